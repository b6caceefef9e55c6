"""discovery.k8s.io/v1 EndpointSlices as kube-apiserver keeps them: v1 defaulting (SetDefaults_EndpointPort) and
pkg/apis/discovery/validation ValidateEndpointSliceCreate / ValidateEndpointSliceUpdate, with the limits of the
1.32 API (at most 1000 endpoints, 100 addresses per endpoint, 100 ports per slice)."""

from __future__ import annotations

import ipaddress
from typing import Any

from .errors import FieldError, duplicate, invalid, not_supported, required, too_many
from .validation import dns1123_label, dns1123_subdomain, label_value, qualified_name, validate_labels

Obj = dict[str, Any]

ADDRESS_TYPES = ["FQDN", "IPv4", "IPv6"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
MAX_PORTS = 100  # 1.32 (the upstream main branch has since raised it)
MAX_TOPOLOGY_LABELS = 16
MAX_ZONE_HINTS = 8


def apply_defaults(slice_: Obj) -> None:
    """v1 defaults: a port's name is "" and its protocol TCP when not given; ``endpoints`` and ``ports`` have no
    ``omitempty`` in the Go type, so an empty list reads back as ``null`` (etcd keeps no difference)."""
    for port in slice_.get("ports") or []:
        if isinstance(port, dict):
            if port.get("name") is None:
                port["name"] = ""
            if port.get("protocol") is None:
                port["protocol"] = "TCP"
    for endpoint in slice_.get("endpoints") or []:
        if isinstance(endpoint, dict):
            endpoint.setdefault("conditions", {})  # a struct: always present, `{}` when nothing is set
    for key in ("endpoints", "ports"):
        if not slice_.get(key):
            slice_[key] = None


def _endpoint_ip(value: str, path: str, family: int) -> list[FieldError]:
    """IsValidIPv4Address / IsValidIPv6Address, then ValidateEndpointIP (no unspecified, loopback, link-local)."""
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return [
            invalid(path, value, f"must be a valid IPv{family} address"),
            invalid(path, value, "must be a valid IP address"),
        ]
    errs: list[FieldError] = []
    if ip.version != family:
        errs.append(invalid(path, value, f"must be a valid IPv{family} address"))
    if ip.is_unspecified:
        errs.append(invalid(path, value, f"may not be unspecified ({value})"))
    if ip.is_loopback:
        errs.append(invalid(path, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
    if ip.is_link_local:
        errs.append(invalid(path, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
    if ip in ipaddress.ip_network("224.0.0.0/24") or (ip.version == 6 and ip in ipaddress.ip_network("ff02::/16")):
        errs.append(invalid(path, value, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
    return errs


def _fqdn(value: str, path: str) -> list[FieldError]:
    if not value:
        return [required(path)]
    if len(value) > 253:
        return [FieldError("FieldValueTooLong", path, "Too long: may not be more than 253 bytes")]
    if (msg := dns1123_subdomain(value)) is not None or "." not in value:
        return [invalid(path, value, msg or "should be a domain with at least two segments separated by dots")]
    return []


def validate(slice_: Obj, old: Obj | None) -> list[FieldError]:
    errs: list[FieldError] = []
    atype = slice_.get("addressType")
    if not atype:
        errs.append(required("addressType"))
    elif atype not in ADDRESS_TYPES:
        errs.append(not_supported("addressType", atype, ADDRESS_TYPES))
    errs += _validate_endpoints(slice_.get("endpoints") or [], atype)
    errs += _validate_ports(slice_.get("ports") or [])
    if old is not None and atype != old.get("addressType"):
        errs.append(invalid("addressType", atype, "field is immutable"))
    return errs


def _validate_endpoints(endpoints: list[Any], atype: Any) -> list[FieldError]:
    if len(endpoints) > MAX_ENDPOINTS:
        return [too_many("endpoints", len(endpoints), MAX_ENDPOINTS)]
    errs: list[FieldError] = []
    for i, endpoint in enumerate(endpoints):
        path = f"endpoints[{i}]"
        if not isinstance(endpoint, dict):
            errs.append(invalid(path, endpoint, "must be an object"))
            continue
        addresses = endpoint.get("addresses") or []
        if not addresses:
            errs.append(required(f"{path}.addresses", "must contain at least 1 address"))
        elif len(addresses) > MAX_ADDRESSES:
            errs.append(too_many(f"{path}.addresses", len(addresses), MAX_ADDRESSES))
        for j, address in enumerate(addresses):
            apath = f"{path}.addresses[{j}]"
            if atype == "IPv4":
                errs += _endpoint_ip(str(address), apath, 4)
            elif atype == "IPv6":
                errs += _endpoint_ip(str(address), apath, 6)
            elif atype == "FQDN":
                errs += _fqdn(str(address), apath)
        node_name = endpoint.get("nodeName")
        if node_name is not None and (msg := dns1123_subdomain(str(node_name))) is not None:
            errs.append(invalid(f"{path}.nodeName", node_name, msg))
        topology = endpoint.get("deprecatedTopology") or {}
        if len(topology) > MAX_TOPOLOGY_LABELS:
            errs.append(too_many(f"{path}.deprecatedTopology", len(topology), MAX_TOPOLOGY_LABELS))
        errs += validate_labels(topology, f"{path}.deprecatedTopology")
        hostname = endpoint.get("hostname")
        if hostname is not None and (msg := dns1123_label(str(hostname))) is not None:
            errs.append(invalid(f"{path}.hostname", hostname, msg))
        zone = endpoint.get("zone")
        if zone is not None and (msg := label_value(zone)) is not None:
            errs.append(invalid(f"{path}.zone", zone, msg))
        errs += _validate_hints(endpoint.get("hints"), f"{path}.hints")
    return errs


def _validate_hints(hints: Any, path: str) -> list[FieldError]:
    if not isinstance(hints, dict):
        return []
    zones = hints.get("forZones") or []
    if len(zones) > MAX_ZONE_HINTS:
        return [too_many(f"{path}.forZones", len(zones), MAX_ZONE_HINTS)]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, zone in enumerate(zones):
        name = zone.get("name") if isinstance(zone, dict) else None
        zpath = f"{path}.forZones[{i}].name"
        if name in seen:
            errs.append(duplicate(zpath, name))
        seen.add(str(name))
        if (msg := label_value(name)) is not None:
            errs.append(invalid(zpath, name, msg))
    return errs


def _validate_ports(ports: list[Any]) -> list[FieldError]:
    if len(ports) > MAX_PORTS:
        return [too_many("ports", len(ports), MAX_PORTS)]
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, port in enumerate(ports):
        path = f"ports[{i}]"
        if not isinstance(port, dict):
            errs.append(invalid(path, port, "must be an object"))
            continue
        name = str(port.get("name") or "")
        if name and (msg := dns1123_label(name)) is not None:
            errs.append(invalid(f"{path}.name", name, msg))
        if name in names:
            errs.append(duplicate(f"{path}.name", name))
        names.add(name)
        protocol = port.get("protocol")
        if protocol is None:
            errs.append(required(f"{path}.protocol"))
        elif protocol not in PROTOCOLS:
            errs.append(not_supported(f"{path}.protocol", protocol, PROTOCOLS))
        app = port.get("appProtocol")
        if app is not None and (msg := qualified_name(str(app))) is not None:
            errs.append(invalid(f"{path}.appProtocol", app, msg))
    return errs
