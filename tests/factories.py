"""Plain-dict Kubernetes objects for tests (the shape the API server returns)."""

from __future__ import annotations

import uuid
from typing import Any


def service(
    name: str = "web",
    namespace: str = "default",
    *,
    ports: list[tuple[int, int]] | None = None,
    svc_type: str = "LoadBalancer",
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    uid: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid4()),
            "resourceVersion": "1",
            "annotations": annotations or {},
            "finalizers": finalizers or [],
        },
        "spec": {
            "type": svc_type,
            "ports": [
                {"name": f"p{port}", "protocol": "TCP", "port": port, "nodePort": node_port}
                for port, node_port in (ports if ports is not None else [(80, 30080), (443, 30443)])
            ],
            **spec,
        },
        "status": {},
    }


def node(name: str, instance_id: str | None = None, zone: str = "us-east-1a", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if instance_id:
        spec["providerID"] = f"aws:///{zone}/{instance_id}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
