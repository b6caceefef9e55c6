"""The watcher's kustomize overlay, rendered from the stack (pure): its outputs give the queue URLs and the watcher's
role, its parameters the identity and the namespace, the pushed image its digest. Everything deploy/base leaves as
a placeholder (queue URLs, Region, image) is replaced, so what gets applied names only real things."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ccm.config import claims_unclassed, load_balancer_class

# What deploy/base ships as placeholders: none may survive into an applied overlay.
PLACEHOLDERS = re.compile(r"111122223333|CLUSTER-ccm|[Cc][Hh][Aa][Nn][Gg][Ee][-_]?[Mm][Ee]|EXAMPLE|<[a-z ]+>")
IMAGE_NAME = "serverless-ccm-watcher"  # deploy/base/kustomization.yaml images[].name
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class RenderError(ValueError):
    """The stack or the image cannot give a complete, placeholder-free overlay."""


@dataclass(frozen=True)
class StackView:
    """What the overlay needs from `cloudformation describe-stacks`."""

    name: str
    region: str
    outputs: dict[str, str]
    parameters: dict[str, str]


@dataclass(frozen=True)
class Image:
    repository: str  # registry/path, no tag
    digest: str  # sha256:..., what the pods pull


def rbac_resource(stack: StackView) -> str:
    """The functions' RBAC: EKS access entries map their roles to groups (deploy/lambda-rbac); a kubeconfig secret
    authenticates as a ServiceAccount (deploy/overlays/self-managed-rbac binds it)."""
    mode = stack.parameters.get("KubeAuthMode", "eks")
    return "lambda-rbac" if mode == "eks" else "overlays/self-managed-rbac"


def render(stack: StackView, image: Image, deploy_dir: str) -> dict[str, str]:
    """File name -> content of the overlay directory. `deploy_dir`: deploy/ relative to that directory."""
    if not DIGEST.match(image.digest):
        raise RenderError(f"image digest {image.digest!r} is not sha256:<64 hex>")
    missing = [k for k in ("ServicesQueueUrl", "NodesQueueUrl") if not stack.outputs.get(k)]
    if missing:
        raise RenderError(f"stack {stack.name} has no output {', '.join(missing)}: is it deployed and complete?")
    auth = stack.parameters.get("WatcherAuth", "pod-identity")
    kustomization: dict[str, object] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{deploy_dir}/base", f"{deploy_dir}/{rbac_resource(stack)}"],
        "labels": [{"pairs": {"serverless-ccm/aws-auth": auth}, "includeSelectors": False}],
        "configMapGenerator": [
            {
                "name": IMAGE_NAME,
                "behavior": "merge",
                "literals": [
                    f"WATCHER_SERVICES_QUEUE_URL={stack.outputs['ServicesQueueUrl']}",
                    f"WATCHER_NODES_QUEUE_URL={stack.outputs['NodesQueueUrl']}",
                    f"WATCHER_AWS_REGION={stack.region}",
                    f"WATCHER_LOAD_BALANCER_CLASS={load_balancer_class(stack.parameters)}",
                    f"WATCHER_SERVICES_WITHOUT_CLASS={'claim' if claims_unclassed(stack.parameters) else 'ignore'}",
                ],
            }
        ],
        "images": [{"name": IMAGE_NAME, "newName": image.repository, "digest": image.digest}],
    }
    if auth == "irsa":
        role = stack.outputs.get("WatcherRoleArn")
        if not role:
            raise RenderError(f"WatcherAuth=irsa but stack {stack.name} has no WatcherRoleArn output")
        annotations = {"eks.amazonaws.com/role-arn": role, "eks.amazonaws.com/sts-regional-endpoints": "true"}
        kustomization["patches"] = [
            {
                "target": {"kind": "ServiceAccount", "name": IMAGE_NAME},
                "patch": json.dumps([{"op": "add", "path": "/metadata/annotations", "value": annotations}]),
            }
        ]
    # JSON is YAML: kustomize reads it, and no YAML emitter is needed here.
    text = json.dumps(kustomization, indent=2) + "\n"
    found = PLACEHOLDERS.findall(text)
    if found:
        raise RenderError(f"the stack's values contain placeholders: {sorted(set(found))}")
    return {"kustomization.yaml": text}
