"""What one pod contributes to its Service's EndpointSlices, as kube-controller-manager's EndpointSlice controller
computes it (staging/src/k8s.io/endpointslice/utils.go, pkg/api/v1/pod FindPort): whether it is an endpoint at all,
its ports, and its endpoint in a slice of a given address family. Pure; the controller is devstack.endpointslices.
"""

from __future__ import annotations

import ipaddress
from typing import Any

Obj = dict[str, Any]

ZONE_LABEL = "topology.kubernetes.io/zone"


def pod_is_ready(pod: Obj) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def should_be_endpoint(pod: Obj) -> bool:
    """endpointutil.ShouldPodBeInEndpoints(pod, includeTerminating=true): not terminal, has an IP."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    return bool(status.get("podIP") or status.get("podIPs"))


def find_port(pod: Obj, svc_port: Obj) -> int | None:
    """podutil.FindPort: a number as is; a name looked up in the containers' ports with the same protocol."""
    target = svc_port.get("targetPort", svc_port.get("port"))
    protocol = svc_port.get("protocol", "TCP")
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and port.get("protocol", "TCP") == protocol:
                return int(port["containerPort"])
    return None


def endpoint_ports(svc: Obj, pod: Obj) -> list[Obj]:
    ports: list[Obj] = []
    for svc_port in (svc.get("spec") or {}).get("ports") or []:
        number = find_port(pod, svc_port)
        if number is None:
            continue  # the controller logs "Failed to find port for service" and leaves the port out
        port: Obj = {"name": svc_port.get("name", ""), "port": number, "protocol": svc_port.get("protocol", "TCP")}
        if svc_port.get("appProtocol"):
            port["appProtocol"] = svc_port["appProtocol"]
        ports.append(port)
    return ports


def pod_address(pod: Obj, family: str) -> str | None:
    """getEndpointAddresses: the pod's address of the slice's family (podIPs, else podIP)."""
    status = pod.get("status") or {}
    candidates = [str(p.get("ip")) for p in status.get("podIPs") or [] if p.get("ip")] or [str(status.get("podIP"))]
    want = 6 if family == "IPv6" else 4
    for address in candidates:
        try:
            if ipaddress.ip_address(address).version == want:
                return address
        except ValueError:
            continue
    return None


def pod_to_endpoint(svc: Obj, pod: Obj, node: Obj | None, family: str = "IPv4") -> Obj | None:
    """The pod's endpoint in a slice of `family`; None when the pod has no address of it."""
    serving = pod_is_ready(pod)
    terminating = bool(pod["metadata"].get("deletionTimestamp"))
    ready = bool((svc.get("spec") or {}).get("publishNotReadyAddresses")) or (serving and not terminating)
    address = pod_address(pod, family)
    if address is None:
        return None
    endpoint: Obj = {
        "addresses": [address],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": {
            "kind": "Pod",
            "namespace": pod["metadata"]["namespace"],
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        },
    }
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name:
        endpoint["nodeName"] = node_name
    zone = ((node or {}).get("metadata", {}).get("labels") or {}).get(ZONE_LABEL)
    if zone:
        endpoint["zone"] = zone
    return endpoint
