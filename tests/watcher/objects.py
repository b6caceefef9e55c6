"""Plain-dict Services and Nodes shaped like API server responses, for watcher tests."""

from __future__ import annotations

import copy
import uuid
from typing import Any

FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


def service(
    name: str = "web",
    namespace: str = "default",
    *,
    svc_type: str = "LoadBalancer",
    ports: list[tuple[int, int | None]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    uid: str | None = None,
    rv: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": svc_type,
        # nodePort None lets the API server allocate one (the emulator rejects duplicates like the real one).
        "ports": [
            {"name": f"p{port}", "protocol": "TCP", "port": port, "targetPort": port}
            | ({"nodePort": node_port} if node_port else {})
            for port, node_port in (ports if ports is not None else [(80, None)])
        ],
        "selector": {"app": name},
    }
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if finalizers:
        meta["finalizers"] = finalizers
    if uid:
        meta["uid"] = uid
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec, "status": {"loadBalancer": {}}}


def node(
    name: str = "node-1",
    *,
    ready: str = "True",
    heartbeat: str = "2024-01-01T00:00:00Z",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    pod_cidrs: list[str] | None = None,
    provider_id: str = "aws:///us-east-1a/i-0123456789abcdef0",
    address: str = "10.0.0.1",
    uid: str | None = None,
    rv: str = "",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels if labels is not None else {"kubernetes.io/os": "linux"}}
    if uid:
        meta["uid"] = uid
    if rv:
        meta["resourceVersion"] = rv
    spec: dict[str, Any] = {"providerID": provider_id}
    if pod_cidrs:
        spec["podCIDR"] = pod_cidrs[0]
        spec["podCIDRs"] = pod_cidrs
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                },
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat},
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.0"},
            "images": [{"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 1}],
        },
    }


def with_uid(obj: dict[str, Any], uid: str | None = None, rv: str = "1") -> dict[str, Any]:
    """A copy with uid/resourceVersion set, as the API server would return it after create."""
    out = copy.deepcopy(obj)
    out["metadata"]["uid"] = uid or str(uuid.uuid4())
    out["metadata"]["resourceVersion"] = rv
    return out


def bump(obj: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy with the resourceVersion incremented (an update as a watch would deliver it)."""
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(int(out["metadata"].get("resourceVersion", "0")) + 1)
    for path, value in changes.items():
        target = out
        *parents, leaf = path.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return out
