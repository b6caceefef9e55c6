"""scripts/install-watcher end to end on the devstack's parts: stack outputs from a moto CloudFormation stack, the
image pushed to a real registry (Debian's docker-registry on a loopback port) and pulled back by digest, the
rendered overlay applied with the real kubectl to the API emulator; and the self-managed RBAC it includes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws
from moto.server import ThreadedMotoServer

from ccm.config import claims_unclassed
from ccm.install.cli import REPO, main, push, stack_view
from ccm.install.render import PLACEHOLDERS, Image, RenderError, StackView, render
from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.rbac import load_objects
from tests.deploy.conftest import make_kubectl
from tests.deploy.test_rbac_emulator import core_for, refused

DIGEST = "sha256:" + "ab" * 32
FUNCTIONS_SA = "system:serviceaccount:serverless-ccm:serverless-ccm-functions"

# The parts of template.yaml the overlay reads, deployed as a CloudFormation stack by moto.
STACK_TEMPLATE = {
    "Parameters": {p: {"Type": "String"} for p in ("ClusterName", "KubeAuthMode", "WatcherAuth")},
    "Resources": {
        "ServicesQueue": {
            "Type": "AWS::SQS::Queue",
            "Properties": {"FifoQueue": True, "QueueName": "prod-ccm-services.fifo"},
        },
        "NodesQueue": {
            "Type": "AWS::SQS::Queue",
            "Properties": {"FifoQueue": True, "QueueName": "prod-ccm-nodes.fifo"},
        },
        "WatcherImageRepository": {"Type": "AWS::ECR::Repository", "Properties": {"RepositoryName": "ccm/watcher"}},
    },
    "Outputs": {
        "ServicesQueueUrl": {"Value": {"Ref": "ServicesQueue"}},
        "NodesQueueUrl": {"Value": {"Ref": "NodesQueue"}},
        "WatcherImageRepositoryUri": {"Value": {"Fn::GetAtt": ["WatcherImageRepository", "RepositoryUri"]}},
        "WatcherRoleArn": {"Value": "arn:aws:iam::123456789012:role/prod-ccm-watcher"},
    },
}


def deployed_stack(kube_auth: str = "eks", watcher_auth: str = "pod-identity") -> StackView:
    cfn = boto3.client("cloudformation", region_name="eu-west-1")
    params = {"ClusterName": "prod", "KubeAuthMode": kube_auth, "WatcherAuth": watcher_auth}
    cfn.create_stack(
        StackName="ccm",
        TemplateBody=json.dumps(STACK_TEMPLATE),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
    )
    return stack_view(cfn, "ccm", "eu-west-1")


def kustomize(tmp_path: Path, stack: StackView, image: Image) -> tuple[Path, str]:
    out = tmp_path / "overlay"
    out.mkdir()
    deploy = os.path.relpath(REPO / "deploy", out)
    for name, text in render(stack, image, str(deploy)).items():
        (out / name).write_text(text)
    proc = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


@mock_aws
def test_the_overlay_from_the_stack_has_no_placeholder_and_applies(tmp_path: Path) -> None:
    stack = deployed_stack()
    assert stack.outputs["WatcherImageRepositoryUri"].endswith(".dkr.ecr.eu-west-1.amazonaws.com/ccm/watcher")
    image = Image(stack.outputs["WatcherImageRepositoryUri"], DIGEST)
    out, text = kustomize(tmp_path, stack, image)
    assert PLACEHOLDERS.findall(text) == []
    objs = [o for o in yaml.safe_load_all(text) if o]
    config = next(
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("serverless-ccm-watcher")
    )
    assert config["data"]["WATCHER_SERVICES_QUEUE_URL"] == stack.outputs["ServicesQueueUrl"]
    assert config["data"]["WATCHER_NODES_QUEUE_URL"].endswith("/prod-ccm-nodes.fifo")
    assert config["data"]["WATCHER_AWS_REGION"] == "eu-west-1"
    # The watcher's hints follow the functions' class (the stack's parameter, else its default).
    assert config["data"]["WATCHER_LOAD_BALANCER_CLASS"] == stack.parameters.get(
        "LoadBalancerClass", "ccm.aws/serverless"
    )
    # ... and their choice for Services without a class (template.yaml's ClaimServicesWithoutClass).
    assert config["data"]["WATCHER_SERVICES_WITHOUT_CLASS"] == (
        "claim" if claims_unclassed(stack.parameters) else "ignore"
    )
    emu = Emulator().start()
    try:
        kubectl = make_kubectl(emu.write_kubeconfig(str(tmp_path / "kubeconfig")), tmp_path / "home")
        kubectl("apply", "-k", str(out))
        deployment = emu.get("deployments", "serverless-ccm", "serverless-ccm-watcher")
        assert deployment is not None
        containers = deployment["spec"]["template"]["spec"]["containers"]
        assert [c["image"] for c in containers if c["name"] == "watcher"] == [f"{image.repository}@{DIGEST}"]
        account = emu.get("serviceaccounts", "serverless-ccm", "serverless-ccm-watcher")
        assert "eks.amazonaws.com/role-arn" not in (
            (account or {})["metadata"].get("annotations") or {}
        )  # Pod Identity
    finally:
        emu.stop()


@mock_aws
def test_irsa_annotates_the_service_account_with_the_stacks_role(tmp_path: Path) -> None:
    stack = deployed_stack(watcher_auth="irsa")
    _, text = kustomize(tmp_path, stack, Image("registry.internal/ccm", DIGEST))
    account = next(o for o in yaml.safe_load_all(text) if o and o["kind"] == "ServiceAccount")
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == stack.outputs["WatcherRoleArn"]


def test_a_tag_or_a_missing_output_is_refused() -> None:
    stack = StackView("ccm", "eu-west-1", {"ServicesQueueUrl": "https://sqs/1/a.fifo"}, {})
    with pytest.raises(RenderError, match="NodesQueueUrl"):
        render(stack, Image("r", DIGEST), "../deploy")
    with pytest.raises(RenderError, match="digest"):
        render(stack, Image("r", "latest"), "../deploy")
    placeholder = StackView(
        "ccm", "eu-west-1", {"ServicesQueueUrl": "u/111122223333/CLUSTER-ccm-services.fifo", "NodesQueueUrl": "n"}, {}
    )
    with pytest.raises(RenderError, match="placeholders"):
        render(placeholder, Image("r", DIGEST), "../deploy")


# ------------------------------------------------------------------ self-managed: the functions' ServiceAccount


def cluster_with(text: str) -> Emulator:
    emu = Emulator().start()
    load_objects(emu, [o for o in yaml.safe_load_all(text) if o])
    emu.tokens.update({"functions-token": FUNCTIONS_SA})
    emu.enable_rbac()
    emu.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    emu.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        }
    )
    return emu


@mock_aws
def test_a_kubeconfig_secrets_service_account_gets_the_functions_verbs(tmp_path: Path) -> None:
    stack = deployed_stack(kube_auth="kubeconfig-secret", watcher_auth="irsa")
    _, text = kustomize(tmp_path, stack, Image("registry.internal/ccm", DIGEST))
    emu = cluster_with(text)
    try:
        core = core_for(emu, tmp_path, "functions-token")
        merge: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
        core.patch_namespaced_service_status(
            "web", "default", {"status": {"loadBalancer": {"ingress": [{"hostname": "h"}]}}}, **merge
        )
        core.patch_node_status(
            "n1", {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}, **merge
        )
        refused(lambda: core.delete_namespaced_service("web", "default"))
        refused(lambda: core.create_namespace({"metadata": {"name": "evil"}}))
    finally:
        emu.stop()


def test_without_the_overlay_a_service_account_token_gets_nothing(tmp_path: Path) -> None:
    text = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "deploy/lambda-rbac")], capture_output=True, text=True, check=True
    ).stdout
    emu = cluster_with(text)
    try:
        core = core_for(emu, tmp_path, "functions-token")
        merge: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
        refused(lambda: core.patch_namespaced_service_status("web", "default", {"status": {}}, **merge))
    finally:
        emu.stop()


# ------------------------------------------------------------------ the image: a real registry, pulled by digest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.fail("docker-registry is not on PATH: scripts/install-image-tools.sh installs it")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "registry")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=True).stdout.strip()


def push_test_image(registry: str, tmp_path: Path) -> Image:
    """A one-file image (the watcher's build is tests/deploy/test_watcher_image.py's), pushed as the command does."""
    payload = tmp_path / "hello.txt"
    payload.write_text(f"serverless-ccm install test {time.time()}\n")
    container = buildah("from", "scratch")
    try:
        buildah("copy", container, str(payload), "/hello.txt")
        buildah("commit", container, "localhost/ccm-install-test:1")
    finally:
        buildah("rm", container)
    try:
        return push("localhost/ccm-install-test:1", f"{registry}/ccm/watcher", "1", tls_verify=False)
    finally:
        subprocess.run(["buildah", "rmi", "localhost/ccm-install-test:1"], capture_output=True, check=False)


def test_the_image_is_pushed_and_pulled_back_by_digest(registry: str, tmp_path: Path) -> None:
    image = push_test_image(registry, tmp_path)  # the local tag is gone: what follows comes from the registry
    assert image.digest.startswith("sha256:") and len(image.digest) == 71
    reference = f"{image.repository}@{image.digest}"
    pulled = buildah("pull", "--tls-verify=false", reference)
    assert buildah("inspect", "--type", "image", "--format", "{{.FromImageDigest}}", pulled) == image.digest
    buildah("rmi", pulled)
    # The pushed image is what the rendered Deployment runs.
    with mock_aws():
        _, text = kustomize(tmp_path, deployed_stack(), image)
    containers = next(o for o in yaml.safe_load_all(text) if o and o["kind"] == "Deployment")["spec"]["template"]
    assert [c["image"] for c in containers["spec"]["containers"]] == [reference]


@mock_aws
def test_the_command_renders_from_the_stack_by_name(tmp_path: Path) -> None:
    stack = deployed_stack(kube_auth="kubeconfig-secret", watcher_auth="irsa")
    image = f"{stack.outputs['WatcherImageRepositoryUri']}@{DIGEST}"
    out = tmp_path / "ccm"
    argv = ["--stack", "ccm", "--region", "eu-west-1", "--image", image, "--render-only", "--out", str(out)]
    assert main(argv) == 0
    text = (out / "kustomization.yaml").read_text()
    assert PLACEHOLDERS.findall(text) == [] and "overlays/self-managed-rbac" in text
    rendered = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, check=True).stdout
    assert f"image: {image}" in rendered and PLACEHOLDERS.findall(rendered) == []
    tagged = ["--stack", "ccm", "--region", "eu-west-1", "--image", "repo:0.1.0", "--render-only", "--out", str(out)]
    assert main(tagged) == 2  # a tag can move: by digest only


def mark_rolled_out(emu: Emulator, stop: threading.Event) -> None:
    """What the deployment controller and the kubelets (which the emulator does not run) report once the pods are
    ready: the status kubectl rollout status waits for."""
    while not stop.is_set():
        deployment = emu.get("deployments", "serverless-ccm", "serverless-ccm-watcher")
        if deployment is not None:
            replicas = deployment["spec"].get("replicas", 1)
            deployment["status"] = {
                "observedGeneration": deployment["metadata"].get("generation", 1),
                **dict.fromkeys(("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"), replicas),
            }
            emu.update(deployment, subresource="status")
            return
        time.sleep(0.05)


def test_one_command_from_the_stack_to_a_ready_watcher_and_the_doctor(
    registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    emu = Emulator().start()
    stop = threading.Event()
    try:
        host, port = server.get_host_and_port()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")  # the command and the doctor it runs
        stack = deployed_stack()
        image = push_test_image(registry, tmp_path)
        kubeconfig = emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
        threading.Thread(target=mark_rolled_out, args=(emu, stop), daemon=True).start()
        out = tmp_path / "overlay"
        argv = ["--stack", stack.name, "--region", stack.region, "--image", f"{image.repository}@{image.digest}"]
        code = main([*argv, "--kubeconfig", kubeconfig, "--out", str(out), "--timeout", "60s"])
        captured = capfd.readouterr()
        report = captured.out + captured.err[-3000:]
        assert "successfully rolled out" in report
        assert "serverless-ccm-watcher: 2/2 pod(s) ready" in report, report  # the doctor read the applied watcher
        assert "watcher.ServicesQueueUrl" in report and "WATCHER_SERVICES_QUEUE_URL is the stack's" in report
        assert code in (0, 1)  # the doctor's verdict on moto's account (its IAM checks), not a crash
        deployment = emu.get("deployments", "serverless-ccm", "serverless-ccm-watcher")
        assert deployment is not None
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"{image.repository}@{image.digest}"
    finally:
        stop.set()
        emu.stop()
        server.stop()
