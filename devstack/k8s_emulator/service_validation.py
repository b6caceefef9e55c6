"""Service validation (ValidateService / ValidateServiceUpdate / ValidateServiceStatusUpdate of
pkg/apis/core/validation) and the spec helpers it shares with defaults.py."""

from __future__ import annotations

import ipaddress
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
# --service-cluster-ip-range per family; a cluster serves the families it is given (Emulator(service_families=)).
SERVICE_CIDRS: dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network] = {
    "IPv4": SERVICE_CIDR,
    "IPv6": ipaddress.ip_network("fd00:10:96::/108"),
}
NODE_PORT_MIN, NODE_PORT_MAX = 30000, 32767
TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


def spec_of(svc: Obj) -> Obj:
    spec = svc.get("spec")
    if not isinstance(spec, dict):
        spec = svc["spec"] = {}
    return spec


def ports_of(spec: Obj) -> list[Obj]:
    ports = spec.get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def default_status(svc: Obj) -> None:
    # LoadBalancerIPMode on (the default since 1.30): ingress entries with an IP get ipMode VIP. (Off, the store
    # drops ipMode before this runs: nothing is defaulted.)
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    for ing in ingress if isinstance(ingress, list) else []:
        if isinstance(ing, dict) and ing.get("ip") and ing.get("ipMode") is None:
            ing["ipMode"] = "VIP"


def needs_node_ports(spec: Obj) -> bool:
    return spec.get("type") in NODE_PORT_TYPES


def needs_hc_port(spec: Obj) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def validate_spec(svc: Obj, old: Obj | None, families: tuple[str, ...] = ("IPv4",)) -> list[FieldError]:
    spec = spec_of(svc)
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
            if stype not in NODE_PORT_TYPES:
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
    if stype in NODE_PORT_TYPES:
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
    if hc and not needs_hc_port(spec):
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
    errs += _validate_ips(spec, old, families)
    return errs


SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"
_CIDRS_HINT = "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 "


def _validate_source_ranges(svc: Obj) -> list[FieldError]:
    """ValidateService: spec.loadBalancerSourceRanges (else the annotation) must be CIDRs, and only on a
    LoadBalancer. Field path and value rendering as the real server answers ("spec.LoadBalancerSourceRanges:
    Invalid value: \"[10.0.0.1]\"", observed; the value is Go's %v of the list)."""
    spec = spec_of(svc)
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


def _validate_ips(spec: Obj, old: Obj | None, families: tuple[str, ...] = ("IPv4",)) -> list[FieldError]:
    errs: list[FieldError] = []
    if spec.get("type") == "ExternalName":
        return errs
    cip, cips = spec.get("clusterIP"), spec.get("clusterIPs")
    if cips and cip and cips[0] != cip:
        errs.append(invalid("spec.clusterIPs[0]", cips[0], "must be same as clusterIP"))
    ip = cip or (cips[0] if cips else None)
    if ip == "None":
        if spec.get("type") in NODE_PORT_TYPES:
            errs.append(
                invalid("spec.clusterIPs[0]", "None", f"may not be set to 'None' for {spec.get('type')} services")
            )
    elif ip:
        if not is_ip(ip):
            errs.append(invalid("spec.clusterIPs[0]", ip, "must be a valid IP address"))
        elif not any(ipaddress.ip_address(ip) in SERVICE_CIDRS[f] for f in families):
            ranges = ",".join(str(SERVICE_CIDRS[f]) for f in families)
            errs.append(
                invalid(
                    "spec.clusterIPs",
                    [ip],
                    f"failed to allocate IP {ip}: the provided IP ({ip}) is not "
                    f"in the valid range. The range of valid IPs is {ranges}",
                )
            )
    for fam in spec.get("ipFamilies") or []:
        if fam not in families:
            errs.append(invalid("spec.ipFamilies", fam, "not configured on this cluster"))
    policy = spec.get("ipFamilyPolicy")
    if policy not in (None, "SingleStack", "PreferDualStack", "RequireDualStack"):
        errs.append(
            not_supported("spec.ipFamilyPolicy", policy, ["PreferDualStack", "RequireDualStack", "SingleStack"])
        )
    elif policy == "RequireDualStack" and len(families) < 2:
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
