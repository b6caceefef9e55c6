"""Names and read-only accessors for Node objects (plain JSON dicts, as the API server returns them)."""

from __future__ import annotations

from typing import Any, Final

from ccm.contracts.cloud import KubeObject

UNINITIALIZED_TAINT: Final = "node.cloudprovider.kubernetes.io/uninitialized"
SHUTDOWN_TAINT: Final = "node.cloudprovider.kubernetes.io/shutdown"
PROVIDED_NODE_IP: Final = "alpha.kubernetes.io/provided-node-ip"

INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
ZONE: Final = "topology.kubernetes.io/zone"
REGION: Final = "topology.kubernetes.io/region"
BETA_INSTANCE_TYPE: Final = "beta.kubernetes.io/instance-type"
BETA_ZONE: Final = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION: Final = "failure-domain.beta.kubernetes.io/region"
ZONE_ID: Final = "topology.k8s.aws/zone-id"


def meta(node: KubeObject) -> dict[str, Any]:
    value: dict[str, Any] = node.get("metadata") or {}
    return value


def name(node: KubeObject) -> str:
    return str(meta(node).get("name", ""))


def labels(node: KubeObject) -> dict[str, str]:
    return dict(meta(node).get("labels") or {})


def annotations_of(node: KubeObject) -> dict[str, str]:
    return dict(meta(node).get("annotations") or {})


def provider_id(node: KubeObject) -> str:
    return str((node.get("spec") or {}).get("providerID") or "")


def taints(node: KubeObject) -> list[dict[str, Any]]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or []]


def has_taint(node: KubeObject, key: str) -> bool:
    return any(t.get("key") == key for t in taints(node))


def addresses(node: KubeObject) -> list[dict[str, str]]:
    return [
        {"type": str(a.get("type", "")), "address": str(a.get("address", ""))}
        for a in (node.get("status") or {}).get("addresses") or []
    ]


def ready_status(node: KubeObject) -> str:
    """Status of the Ready condition; a node without one counts as Unknown (as upstream)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status", "Unknown"))
    return "Unknown"


def is_ready(node: KubeObject) -> bool:
    return ready_status(node) == "True"


def is_deleting(node: KubeObject) -> bool:
    return meta(node).get("deletionTimestamp") is not None
