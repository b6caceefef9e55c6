"""Service defaulting, validation and IP / nodePort allocation, modelled on the real registry.

Order mirrors kube-apiserver: decode-time defaults -> PrepareForCreate/Update (status reset,
dropTypeDependentFields) -> carry over allocated values -> validation -> allocation.
"""

from __future__ import annotations

import copy
import ipaddress
import random
from typing import Any

from .errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    invalid_error,
    not_supported,
    required,
)
from .validation import (
    dns1123_label,
    dns1123_subdomain,
    iana_svc_name,
    is_cidr,
    is_ip,
    qualified_name,
    validate_conditions,
    validate_labels,
)

Obj = dict[str, Any]

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/16")
NODE_PORT_MIN, NODE_PORT_MAX = 30000, 32767
TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
_NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


def _spec(svc: Obj) -> Obj:
    spec = svc.get("spec")
    if not isinstance(spec, dict):
        spec = svc["spec"] = {}
    return spec


def _ports(spec: Obj) -> list[Obj]:
    ports = spec.get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def apply_defaults(svc: Obj) -> None:
    """SetDefaults_Service: what the real server fills in while decoding the request body."""
    spec = _spec(svc)
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in _NODE_PORT_TYPES:
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    if spec.get("sessionAffinity") == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {"clientIP": {"timeoutSeconds": 10800}})
    for port in _ports(spec):
        port.setdefault("protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    default_status(svc)


def default_status(svc: Obj) -> None:
    # LoadBalancerIPMode is GA: ingress entries with an IP get ipMode VIP.
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    for ing in ingress if isinstance(ingress, list) else []:
        if isinstance(ing, dict) and ing.get("ip") and ing.get("ipMode") is None:
            ing["ipMode"] = "VIP"


def _node_ports_in_use(others: list[Obj]) -> set[int]:
    used: set[int] = set()
    for other in others:
        spec = other.get("spec") or {}
        used.update(int(p["nodePort"]) for p in _ports(spec) if p.get("nodePort"))
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


def _allocate_ip(used: set[str]) -> str:
    while True:
        ip = str(SERVICE_CIDR.network_address + random.randint(10, SERVICE_CIDR.num_addresses - 2))
        if ip not in used:
            return ip


def _needs_node_ports(spec: Obj) -> bool:
    return spec.get("type") in _NODE_PORT_TYPES


def _needs_hc_port(spec: Obj) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def drop_type_dependent_fields(new: Obj, old: Obj) -> None:
    """Fields that stop making sense after a type change are wiped when the user left them untouched."""
    ns, os_ = _spec(new), _spec(old)
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
    if _needs_node_ports(os_) and not _needs_node_ports(ns):
        old_ports = {p.get("nodePort") for p in _ports(os_) if p.get("nodePort")}
        if {p.get("nodePort") for p in _ports(ns) if p.get("nodePort")} <= old_ports:
            for port in _ports(ns):
                port.pop("nodePort", None)
        if ns.get("externalTrafficPolicy") == os_.get("externalTrafficPolicy"):
            ns.pop("externalTrafficPolicy", None)
    if (
        _needs_hc_port(os_)
        and not _needs_hc_port(ns)
        and ns.get("healthCheckNodePort") == os_.get("healthCheckNodePort")
    ):
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
    ns, os_ = _spec(new), _spec(old)
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
    if _needs_node_ports(os_) and _needs_node_ports(ns):
        old_used = {p.get("nodePort") for p in _ports(os_) if p.get("nodePort")}
        new_used = {p.get("nodePort") for p in _ports(ns) if p.get("nodePort")}
        used = old_used & new_used
        # Real server matches by port name, not number: renaming a port loses its nodePort.
        by_name = {p.get("name", ""): p.get("nodePort") for p in _ports(os_)}
        for port in _ports(ns):
            if not port.get("nodePort"):
                candidate = by_name.get(port.get("name", ""))
                if candidate and candidate not in used:
                    port["nodePort"] = candidate
                    used.add(candidate)
    if _needs_hc_port(os_) and _needs_hc_port(ns) and not ns.get("healthCheckNodePort"):
        ns["healthCheckNodePort"] = os_.get("healthCheckNodePort")


def _validate_spec(svc: Obj, old: Obj | None) -> list[FieldError]:
    spec = _spec(svc)
    errs: list[FieldError] = []
    stype = spec.get("type")
    if stype not in TYPES:
        errs.append(not_supported("spec.type", stype, TYPES))
        return errs
    ports = spec.get("ports")
    if ports is not None and not isinstance(ports, list):
        return [invalid("spec.ports", ports, "must be a list")]
    ports = ports or []
    if stype == "ExternalName":
        ext = spec.get("externalName")
        if not ext:
            errs.append(required("spec.externalName"))
        elif (msg := dns1123_subdomain(str(ext).rstrip("."))) is not None:
            errs.append(invalid("spec.externalName", ext, msg))
        for key in ("clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if spec.get(key) and not (key == "clusterIPs" and spec.get(key) == [""]):
                errs.append(forbidden(f"spec.{key}", "may not be set for ExternalName services"))
    elif not ports:
        errs.append(required("spec.ports"))
    seen_names: set[str] = set()
    seen_ports: set[tuple[Any, Any]] = set()
    seen_node_ports: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            errs.append(invalid(path, port, "must be an object"))
            continue
        name = port.get("name", "")
        if len(ports) > 1 and not name:
            errs.append(required(f"{path}.name"))
        elif name:
            if (msg := dns1123_label(name)) is not None:
                errs.append(invalid(f"{path}.name", name, msg))
            elif name in seen_names:
                errs.append(duplicate(f"{path}.name", name))
            seen_names.add(name)
        number = port.get("port")
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            errs.append(invalid(f"{path}.port", number, "must be between 1 and 65535, inclusive"))
        protocol = port.get("protocol")
        if protocol not in PROTOCOLS:
            errs.append(not_supported(f"{path}.protocol", protocol, PROTOCOLS))
        if (number, protocol) in seen_ports:
            errs.append(duplicate(path, {"port": number, "protocol": protocol}))
        seen_ports.add((number, protocol))
        target = port.get("targetPort")
        if isinstance(target, int) and not isinstance(target, bool):
            if not 1 <= target <= 65535:
                errs.append(invalid(f"{path}.targetPort", target, "must be between 1 and 65535, inclusive"))
        elif isinstance(target, str) and (msg := iana_svc_name(target)) is not None:
            errs.append(invalid(f"{path}.targetPort", target, msg))
        node_port = port.get("nodePort")
        if node_port:
            if stype not in _NODE_PORT_TYPES:
                errs.append(forbidden(f"{path}.nodePort", f"may not be used when `type` is '{stype}'"))
            elif not isinstance(node_port, int) or not NODE_PORT_MIN <= node_port <= NODE_PORT_MAX:
                errs.append(
                    invalid(
                        f"{path}.nodePort",
                        node_port,
                        "provided port is not in the valid range. The range of valid ports is "
                        f"{NODE_PORT_MIN}-{NODE_PORT_MAX}",
                    )
                )
            elif (node_port, protocol) in seen_node_ports:
                errs.append(duplicate(f"{path}.nodePort", node_port))
            seen_node_ports.add((node_port, protocol))
    if spec.get("sessionAffinity") not in ("None", "ClientIP"):
        errs.append(not_supported("spec.sessionAffinity", spec.get("sessionAffinity"), ["ClientIP", "None"]))
    etp = spec.get("externalTrafficPolicy")
    if stype in _NODE_PORT_TYPES:
        if etp not in ("Cluster", "Local"):
            errs.append(not_supported("spec.externalTrafficPolicy", etp, ["Cluster", "Local"]))
    elif etp:
        errs.append(
            invalid("spec.externalTrafficPolicy", etp, "may only be set when `type` is 'NodePort' or 'LoadBalancer'")
        )
    itp = spec.get("internalTrafficPolicy")
    if itp is not None and itp not in ("Cluster", "Local"):
        errs.append(not_supported("spec.internalTrafficPolicy", itp, ["Cluster", "Local"]))
    hc = spec.get("healthCheckNodePort")
    if hc and not _needs_hc_port(spec):
        errs.append(
            invalid(
                "spec.healthCheckNodePort",
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            )
        )
    if stype != "LoadBalancer":
        if spec.get("allocateLoadBalancerNodePorts") is not None:
            errs.append(
                forbidden("spec.allocateLoadBalancerNodePorts", "may only be used when `type` is 'LoadBalancer'")
            )
        if spec.get("loadBalancerClass") is not None:
            errs.append(forbidden("spec.loadBalancerClass", "may only be used when service type is 'LoadBalancer'"))
    lbc = spec.get("loadBalancerClass")
    if lbc is not None and (not isinstance(lbc, str) or qualified_name(lbc) is not None):
        errs.append(invalid("spec.loadBalancerClass", lbc, "must be a qualified name"))
    errs += _validate_source_ranges(svc)
    errs += validate_labels(spec.get("selector"), "spec.selector")
    errs += _validate_ips(spec, old)
    return errs


SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"
_CIDRS_HINT = "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 "


def _validate_source_ranges(svc: Obj) -> list[FieldError]:
    """ValidateService: spec.loadBalancerSourceRanges (else the annotation) must be CIDRs, and only on a
    LoadBalancer. Field path and value rendering as the real server answers ("spec.LoadBalancerSourceRanges:
    Invalid value: \"[10.0.0.1]\"", observed; the value is Go's %v of the list)."""
    spec = _spec(svc)
    ranges = spec.get("loadBalancerSourceRanges") or []
    annotation = ((svc.get("metadata") or {}).get("annotations") or {}).get(SOURCE_RANGES_ANNOTATION, "")
    if not ranges and not str(annotation).strip():
        return []
    errs: list[FieldError] = []
    if spec.get("type") != "LoadBalancer":
        errs.append(forbidden("spec.LoadBalancerSourceRanges", "may only be used when `type` is 'LoadBalancer'"))
    if ranges:
        if not isinstance(ranges, list) or not all(isinstance(r, str) and is_cidr(r.strip()) for r in ranges):
            shown = "[" + " ".join(str(r) for r in ranges) + "]" if isinstance(ranges, list) else str(ranges)
            errs.append(invalid("spec.LoadBalancerSourceRanges", shown, _CIDRS_HINT))
    elif not all(is_cidr(part.strip()) for part in str(annotation).strip().split(",")):
        errs.append(invalid(f"metadata.annotations[{SOURCE_RANGES_ANNOTATION}]", annotation, _CIDRS_HINT))
    return errs


def _validate_ips(spec: Obj, old: Obj | None) -> list[FieldError]:
    errs: list[FieldError] = []
    if spec.get("type") == "ExternalName":
        return errs
    cip, cips = spec.get("clusterIP"), spec.get("clusterIPs")
    if cips and cip and cips[0] != cip:
        errs.append(invalid("spec.clusterIPs[0]", cips[0], "must be same as clusterIP"))
    ip = cip or (cips[0] if cips else None)
    if ip == "None":
        if spec.get("type") in _NODE_PORT_TYPES:
            errs.append(
                invalid("spec.clusterIPs[0]", "None", f"may not be set to 'None' for {spec.get('type')} services")
            )
    elif ip:
        if not is_ip(ip):
            errs.append(invalid("spec.clusterIPs[0]", ip, "must be a valid IP address"))
        elif ipaddress.ip_address(ip) not in SERVICE_CIDR:
            errs.append(
                invalid(
                    "spec.clusterIPs",
                    [ip],
                    f"failed to allocate IP {ip}: the provided IP ({ip}) is not "
                    f"in the valid range. The range of valid IPs is {SERVICE_CIDR}",
                )
            )
    for fam in spec.get("ipFamilies") or []:
        if fam != "IPv4":
            errs.append(invalid("spec.ipFamilies", fam, "not configured on this cluster"))
    policy = spec.get("ipFamilyPolicy")
    if policy not in (None, "SingleStack", "PreferDualStack", "RequireDualStack"):
        errs.append(
            not_supported("spec.ipFamilyPolicy", policy, ["PreferDualStack", "RequireDualStack", "SingleStack"])
        )
    elif policy == "RequireDualStack":
        errs.append(invalid("spec.ipFamilyPolicy", policy, "this cluster is not configured for dual-stack services"))
    if old is not None:
        os_ = old.get("spec") or {}
        if os_.get("type") != "ExternalName" and ip and os_.get("clusterIP") and ip != os_.get("clusterIP"):
            errs.append(invalid("spec.clusterIPs[0]", ip, "may not change once set"))
        if (
            os_.get("type") == "LoadBalancer"
            and spec.get("type") == "LoadBalancer"
            and os_.get("loadBalancerClass") != spec.get("loadBalancerClass")
        ):
            errs.append(invalid("spec.loadBalancerClass", spec.get("loadBalancerClass"), "may not change once set"))
    return errs


def _allocate(svc: Obj, others: list[Obj], old: Obj | None) -> None:
    spec = _spec(svc)
    name = (svc.get("metadata") or {}).get("name", "")
    errs: list[FieldError] = []
    if spec["type"] != "ExternalName":
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        # Scanning every Service is O(n) per create: skip it for headless ones (10,000-object benchmarks).
        in_use = _ips_in_use(others) if ip != "None" else set()
        if not ip:
            ip = _allocate_ip(in_use)
        elif ip != "None" and ip in in_use:
            errs.append(
                invalid("spec.clusterIPs", [ip], f"failed to allocate IP {ip}: provided IP is already allocated")
            )
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    used = _node_ports_in_use(others) if _needs_node_ports(spec) or _needs_hc_port(spec) else set()
    if _needs_node_ports(spec):
        for i, port in enumerate(_ports(spec)):
            if port.get("nodePort") and port["nodePort"] in used:
                errs.append(
                    invalid(f"spec.ports[{i}].nodePort", port["nodePort"], "provided port is already allocated")
                )
        mine = {p["nodePort"] for p in _ports(spec) if p.get("nodePort")}
        if spec["type"] == "NodePort" or spec.get("allocateLoadBalancerNodePorts") is not False:
            # On create, ports with the same number (TCP and UDP 53) share ONE nodePort, a requested one if any
            # (registry/core/service/storage/alloc.go initNodePorts keys allocation by port number). Updates
            # allocate per port (updateNodePorts).
            by_number: dict[Any, int] = {}
            if old is None:
                for port in _ports(spec):
                    if port.get("nodePort"):
                        by_number.setdefault(port.get("port"), port["nodePort"])
            for port in _ports(spec):
                if not port.get("nodePort"):
                    shared = by_number.get(port.get("port"))
                    port["nodePort"] = shared or _allocate_port(used | mine)
                    mine.add(port["nodePort"])
                    if old is None:
                        by_number.setdefault(port.get("port"), port["nodePort"])
        used |= mine
    if _needs_hc_port(spec):
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


def prepare_create(svc: Obj, others: list[Obj]) -> None:
    apply_defaults(svc)
    svc["status"] = {"loadBalancer": {}}
    name = (svc.get("metadata") or {}).get("name", "")
    errs = _validate_spec(svc, None)
    if errs:
        raise invalid_error("Service", "", name, errs)
    _allocate(svc, others, None)


def prepare_update(new: Obj, old: Obj, others: list[Obj]) -> None:
    apply_defaults(new)
    new["status"] = copy.deepcopy(old.get("status")) or {"loadBalancer": {}}
    drop_type_dependent_fields(new, old)
    _carry_allocated(new, old)
    name = (new.get("metadata") or {}).get("name", "")
    errs = _validate_spec(new, old)
    if errs:
        raise invalid_error("Service", "", name, errs)
    _allocate(new, others, old)


def validate_status(svc: Obj) -> None:
    default_status(svc)
    status = svc.get("status") or {}
    errs: list[FieldError] = []
    ingress = (status.get("loadBalancer") or {}).get("ingress") or []
    for i, ing in enumerate(ingress):
        path = f"status.loadBalancer.ingress[{i}]"
        if not isinstance(ing, dict):
            errs.append(invalid(path, ing, "must be an object"))
            continue
        ip, host, mode = ing.get("ip"), ing.get("hostname"), ing.get("ipMode")
        if ip and not is_ip(ip):
            errs.append(invalid(f"{path}.ip", ip, "must be a valid IP address"))
        if host:
            if is_ip(host):
                errs.append(invalid(f"{path}.hostname", host, "must be a DNS name, not an IP address"))
            elif (msg := dns1123_subdomain(host)) is not None:
                errs.append(invalid(f"{path}.hostname", host, msg))
        if mode is not None:
            if not ip:
                errs.append(forbidden(f"{path}.ipMode", "may not be specified when `ip` is not set"))
            elif mode not in ("VIP", "Proxy"):
                errs.append(not_supported(f"{path}.ipMode", mode, ["Proxy", "VIP"]))
        for j, port in enumerate(ing.get("ports") or []):
            number = port.get("port") if isinstance(port, dict) else None
            if not isinstance(number, int) or not 1 <= number <= 65535:
                errs.append(invalid(f"{path}.ports[{j}].port", number, "must be between 1 and 65535, inclusive"))
            proto = port.get("protocol") if isinstance(port, dict) else None
            if proto not in PROTOCOLS:
                errs.append(not_supported(f"{path}.ports[{j}].protocol", proto, PROTOCOLS))
    errs += validate_conditions(status.get("conditions"), "status.conditions")
    if errs:
        raise invalid_error("Service", "", (svc.get("metadata") or {}).get("name", ""), errs)
