"""Service defaulting and IP / nodePort allocation, modelled on the real registry (validation: service_validation).

Order mirrors kube-apiserver: decode-time defaults -> PrepareForCreate/Update (status reset,
dropTypeDependentFields) -> carry over allocated values -> validation -> allocation.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import random
from typing import Any

from .errors import FieldError, invalid, invalid_error
from .service_validation import (
    NODE_PORT_MAX,
    NODE_PORT_MIN,
    NODE_PORT_TYPES,
    SERVICE_CIDRS,
    default_status,
    needs_hc_port,
    needs_node_ports,
    ports_of,
    spec_of,
    validate_spec,
    validate_status,
)

__all__ = ["apply_defaults", "prepare_create", "prepare_update", "validate_status"]

Obj = dict[str, Any]


def apply_defaults(svc: Obj) -> None:
    """SetDefaults_Service: what the real server fills in while decoding the request body."""
    spec = spec_of(svc)
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in NODE_PORT_TYPES:
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    if spec.get("sessionAffinity") == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {"clientIP": {"timeoutSeconds": 10800}})
    for port in ports_of(spec):
        port.setdefault("protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    default_status(svc)


def _node_ports_in_use(others: list[Obj]) -> set[int]:
    used: set[int] = set()
    for other in others:
        spec = other.get("spec") or {}
        used.update(int(p["nodePort"]) for p in ports_of(spec) if p.get("nodePort"))
        if spec.get("healthCheckNodePort"):
            used.add(int(spec["healthCheckNodePort"]))
    return used


def _ips_in_use(others: list[Obj]) -> set[str]:
    return {ip for o in others for ip in (o.get("spec") or {}).get("clusterIPs") or [] if ip != "None"}


def _allocate_port(used: set[int]) -> int:
    free = NODE_PORT_MAX - NODE_PORT_MIN + 1 - len(used)
    if free <= 0:
        raise invalid_error("Service", "", "", [invalid("spec.ports", None, "range is full")])
    while True:
        port = random.randint(NODE_PORT_MIN, NODE_PORT_MAX)
        if port not in used:
            return port


def _allocate_ip(used: set[str], family: str = "IPv4") -> str:
    cidr = SERVICE_CIDRS[family]
    while True:
        ip = str(cidr.network_address + random.randint(10, cidr.num_addresses - 2))
        if ip not in used:
            return ip


def _ip_families(spec: Obj, cluster: tuple[str, ...]) -> list[str]:
    """The Service's families: those given, else the given clusterIP's, else the cluster's primary; completed with
    the cluster's other family under Prefer/RequireDualStack on a dual-stack cluster (a SingleStack downgrade keeps
    the primary only)."""
    given = list(spec.get("ipFamilies") or [])
    ip = spec.get("clusterIP")
    if not given and ip and ip != "None":
        with contextlib.suppress(ValueError):
            given = ["IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"]
    given = given or [cluster[0]]
    if (spec.get("ipFamilyPolicy") or "SingleStack") == "SingleStack":
        return given[:1]
    return given + [f for f in cluster if f not in given][: 2 - len(given)]


def drop_type_dependent_fields(new: Obj, old: Obj) -> None:
    """Fields that stop making sense after a type change are wiped when the user left them untouched."""
    ns, os_ = spec_of(new), spec_of(old)
    if os_.get("type") != "ExternalName" and ns.get("type") == "ExternalName":
        if ns.get("clusterIP") == os_.get("clusterIP") and ns.get("clusterIPs") == os_.get("clusterIPs"):
            ns.pop("clusterIP", None)
            ns.pop("clusterIPs", None)
        if ns.get("ipFamilies") == os_.get("ipFamilies"):
            ns.pop("ipFamilies", None)
        if ns.get("ipFamilyPolicy") == os_.get("ipFamilyPolicy"):
            ns.pop("ipFamilyPolicy", None)
        if ns.get("internalTrafficPolicy") == os_.get("internalTrafficPolicy"):
            ns.pop("internalTrafficPolicy", None)
    if needs_node_ports(os_) and not needs_node_ports(ns):
        old_ports = {p.get("nodePort") for p in ports_of(os_) if p.get("nodePort")}
        if {p.get("nodePort") for p in ports_of(ns) if p.get("nodePort")} <= old_ports:
            for port in ports_of(ns):
                port.pop("nodePort", None)
        if ns.get("externalTrafficPolicy") == os_.get("externalTrafficPolicy"):
            ns.pop("externalTrafficPolicy", None)
    if needs_hc_port(os_) and not needs_hc_port(ns) and ns.get("healthCheckNodePort") == os_.get("healthCheckNodePort"):
        ns.pop("healthCheckNodePort", None)
    if os_.get("type") == "LoadBalancer" and ns.get("type") != "LoadBalancer":
        if ns.get("allocateLoadBalancerNodePorts") == os_.get("allocateLoadBalancerNodePorts"):
            ns.pop("allocateLoadBalancerNodePorts", None)
        if ns.get("loadBalancerClass") == os_.get("loadBalancerClass"):
            ns.pop("loadBalancerClass", None)
    if ns.get("type") != "LoadBalancer":
        # The real registry clears LB status as soon as the type is no longer LoadBalancer.
        status = new.setdefault("status", {})
        status["loadBalancer"] = {}


def _carry_allocated(new: Obj, old: Obj) -> None:
    """patchAllocatedValues: PUTs that omit allocated values keep the old ones."""
    ns, os_ = spec_of(new), spec_of(old)
    if os_.get("type") != "ExternalName" and ns.get("type") != "ExternalName":
        if not ns.get("clusterIP"):
            ns["clusterIP"] = os_.get("clusterIP")
            if not ns.get("clusterIPs"):
                ns["clusterIPs"] = os_.get("clusterIPs")
        elif not ns.get("clusterIPs") and ns.get("clusterIP") == os_.get("clusterIP"):
            ns["clusterIPs"] = os_.get("clusterIPs")
        for key in ("ipFamilies", "ipFamilyPolicy"):
            if not ns.get(key) and os_.get(key):
                ns[key] = os_[key]
    if needs_node_ports(os_) and needs_node_ports(ns):
        old_used = {p.get("nodePort") for p in ports_of(os_) if p.get("nodePort")}
        new_used = {p.get("nodePort") for p in ports_of(ns) if p.get("nodePort")}
        used = old_used & new_used
        # Real server matches by port name, not number: renaming a port loses its nodePort.
        by_name = {p.get("name", ""): p.get("nodePort") for p in ports_of(os_)}
        for port in ports_of(ns):
            if not port.get("nodePort"):
                candidate = by_name.get(port.get("name", ""))
                if candidate and candidate not in used:
                    port["nodePort"] = candidate
                    used.add(candidate)
    if needs_hc_port(os_) and needs_hc_port(ns) and not ns.get("healthCheckNodePort"):
        ns["healthCheckNodePort"] = os_.get("healthCheckNodePort")


def _allocate(svc: Obj, others: list[Obj], old: Obj | None, families: tuple[str, ...] = ("IPv4",)) -> None:
    spec = spec_of(svc)
    name = (svc.get("metadata") or {}).get("name", "")
    errs: list[FieldError] = []
    if spec["type"] != "ExternalName":
        wanted = _ip_families(spec, families)
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        # Scanning every Service is O(n) per create: skip it for headless ones (10,000-object benchmarks).
        in_use = _ips_in_use(others) if ip != "None" else set()
        if not ip:
            ip = _allocate_ip(in_use, wanted[0])
        elif ip != "None" and ip in in_use:
            errs.append(
                invalid("spec.clusterIPs", [ip], f"failed to allocate IP {ip}: provided IP is already allocated")
            )
        ips = [ip, *[i for i in (spec.get("clusterIPs") or [])[1 : len(wanted)] if ip != "None"]]
        while ip != "None" and len(ips) < len(wanted):
            ips.append(_allocate_ip(in_use, wanted[len(ips)]))  # the secondary family's address
        spec["clusterIP"], spec["clusterIPs"] = ip, ips
        spec["ipFamilies"] = wanted
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    used = _node_ports_in_use(others) if needs_node_ports(spec) or needs_hc_port(spec) else set()
    if needs_node_ports(spec):
        for i, port in enumerate(ports_of(spec)):
            if port.get("nodePort") and port["nodePort"] in used:
                errs.append(
                    invalid(f"spec.ports[{i}].nodePort", port["nodePort"], "provided port is already allocated")
                )
        mine = {p["nodePort"] for p in ports_of(spec) if p.get("nodePort")}
        if spec["type"] == "NodePort" or spec.get("allocateLoadBalancerNodePorts") is not False:
            # On create, ports with the same number (TCP and UDP 53) share ONE nodePort, a requested one if any
            # (registry/core/service/storage/alloc.go initNodePorts keys allocation by port number). Updates
            # allocate per port (updateNodePorts).
            by_number: dict[Any, int] = {}
            if old is None:
                for port in ports_of(spec):
                    if port.get("nodePort"):
                        by_number.setdefault(port.get("port"), port["nodePort"])
            for port in ports_of(spec):
                if not port.get("nodePort"):
                    shared = by_number.get(port.get("port"))
                    port["nodePort"] = shared or _allocate_port(used | mine)
                    mine.add(port["nodePort"])
                    if old is None:
                        by_number.setdefault(port.get("port"), port["nodePort"])
        used |= mine
    if needs_hc_port(spec):
        hc = spec.get("healthCheckNodePort")
        if hc:
            if not isinstance(hc, int) or not NODE_PORT_MIN <= hc <= NODE_PORT_MAX:
                errs.append(invalid("spec.healthCheckNodePort", hc, "provided port is not in the valid range"))
            elif hc in used:
                errs.append(invalid("spec.healthCheckNodePort", hc, "provided port is already allocated"))
        else:
            spec["healthCheckNodePort"] = _allocate_port(used)
    if errs:
        raise invalid_error("Service", "", name, errs)


def prepare_create(svc: Obj, others: list[Obj], families: tuple[str, ...] = ("IPv4",)) -> None:
    apply_defaults(svc)
    svc["status"] = {"loadBalancer": {}}
    name = (svc.get("metadata") or {}).get("name", "")
    errs = validate_spec(svc, None, families)
    if errs:
        raise invalid_error("Service", "", name, errs)
    _allocate(svc, others, None, families)


def prepare_update(new: Obj, old: Obj, others: list[Obj], families: tuple[str, ...] = ("IPv4",)) -> None:
    apply_defaults(new)
    new["status"] = copy.deepcopy(old.get("status")) or {"loadBalancer": {}}
    drop_type_dependent_fields(new, old)
    _carry_allocated(new, old)
    name = (new.get("metadata") or {}).get("name", "")
    errs = validate_spec(new, old, families)
    if errs:
        raise invalid_error("Service", "", name, errs)
    _allocate(new, others, old, families)
