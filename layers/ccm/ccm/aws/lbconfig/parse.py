"""Parsing: from a Service (its annotations and spec) to a validated, typed LoadBalancerConfig. Pure; never calls AWS.

Every row of the annotation table (`ccm.aws.lbconfig.table`) is parsed into one typed `AnnotationValues`; the
upstream hard rules check the spec; listeners and the health check are built (`ccm.aws.lbconfig.listeners`); the
cross-field rules run last. Where upstream hands a bad value to AWS (which fails later, half-way through) or
silently misbehaves, we refuse it up front instead: InvalidAnnotation, a Warning event, no AWS change. All
problems are reported together so a user fixes them in one go.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ccm.aws.lbconfig.config import (
    LB_TYPES,
    AccessLog,
    ConnectionDraining,
    LbType,
    Listener,
    LoadBalancerConfig,
    Network,
    Scheme,
    ServicePort,
)
from ccm.aws.lbconfig.errors import InvalidAnnotation, raise_all, show
from ccm.aws.lbconfig.listeners import build_health_check, build_listeners, check_ssl_ports
from ccm.aws.lbconfig.table import (
    ACCESS_LOG_ANNOTATION,
    ANNOTATIONS,
    EIP_ANNOTATION,
    EXTRA_SECURITY_GROUPS_ANNOTATION,
    FOREIGN_TYPES,
    INTERNAL_ANNOTATION,
    PREFIX,
    PRIVATE_IPV4_ANNOTATION,
    PROXY_PROTOCOL_ANNOTATION,
    ROWS,
    SCHEME_ANNOTATION,
    SOURCE_RANGES_ANNOTATION,
    SOURCE_RANGES_FIELD,
    SUBNETS_ANNOTATION,
    TABLE,
    TARGET_GROUP_ATTRIBUTES_ANNOTATION,
    TARGET_TYPE_ANNOTATION,
    TYPE_ANNOTATION,
    AnnotationValues,
)
from ccm.contracts.cloud import ImplementedElsewhere, InvalidServiceConfig
from ccm.contracts.endpoints import address_type


def parse_load_balancer_config(service: Mapping[str, Any], default_lb_type: LbType = "clb") -> LoadBalancerConfig:
    """The validated configuration of a LoadBalancer Service. Pure; never calls AWS.

    Raises ImplementedElsewhere for `aws-load-balancer-type: external|nlb-ip`, and InvalidServiceConfig (an
    InvalidAnnotation, a hard-rule violation, or ServiceConfigErrors holding all of them) for what we refuse.
    `default_lb_type` applies when the Service has no type annotation (cloud-provider-aws: a Classic ELB).
    """
    if default_lb_type not in LB_TYPES:
        raise ValueError(f"default_lb_type must be one of {LB_TYPES}, not {default_lb_type!r}")
    annotations = _section(_section(service, "metadata"), "annotations")
    spec = _section(service, "spec")
    errors: list[InvalidServiceConfig] = []

    lb_type, type_known = _lb_type(annotations.get(TYPE_ANNOTATION), default_lb_type, errors)
    parsed: dict[str, Any] = {}
    ignored: list[str] = []
    for row in TABLE[1:]:
        raw = annotations.get(row.annotation)
        parsed[row.field] = row.default
        if raw is None or raw == "" or (row.blank_is_absent and isinstance(raw, str) and not raw.strip()):
            continue
        if lb_type not in row.types:
            ignored.append(row.annotation)
            continue
        if not isinstance(raw, str):
            errors.append(InvalidAnnotation(row.annotation, raw, "annotation values are strings"))
            continue
        try:
            parsed[row.field] = row.parser(lb_type).parse(raw)
        except ValueError as err:
            errors.append(InvalidAnnotation(row.annotation, raw, str(err)))
    values = AnnotationValues(**parsed)

    def raw_of(annotation: str) -> str:
        return str(annotations.get(annotation, ""))

    scheme = _scheme(values, raw_of, errors)
    ports = _service_ports(spec, lb_type if type_known else None, errors)
    check_ssl_ports(values.ssl_ports, ports, raw_of, errors)
    listeners = build_listeners(lb_type, ports, values, raw_of, errors)
    local = spec.get("externalTrafficPolicy") == "Local"
    health_check_node_port = _port_number(spec.get("healthCheckNodePort"))
    # ip targets are the pods themselves: kube-proxy's healthCheckNodePort says nothing about them (LBC: traffic-port).
    node_health = local and values.target_type != "ip"
    health = build_health_check(lb_type, health_check_node_port if node_health else None, values, raw_of, errors)
    source_ranges = _source_ranges(spec, values, ignored, errors)
    _cross_checks(scheme, listeners, values, raw_of, errors)
    if lb_type == "nlb":
        _ip_family_check(spec, values, raw_of, errors)
    raise_all(errors)
    return LoadBalancerConfig(
        lb_type=lb_type,
        scheme=scheme,
        ports=ports,
        listeners=listeners,
        health_check=health,
        source_ranges=source_ranges,
        external_traffic_policy="Local" if local else "Cluster",
        health_check_node_port=health_check_node_port,
        subnets=values.subnets,
        eip_allocations=values.eip_allocations,
        private_ipv4_addresses=values.private_ipv4_addresses,
        ip_address_type=values.ip_address_type,
        ssl_certificates=values.ssl_certificates,
        ssl_ports=values.ssl_ports,
        ssl_negotiation_policy=values.ssl_negotiation_policy,
        backend_protocol=values.backend_protocol,
        proxy_protocol=values.proxy_protocol,
        connection_draining=ConnectionDraining(values.draining_enabled, values.draining_timeout),
        idle_timeout=values.idle_timeout,
        access_log=AccessLog(values.log_enabled, values.log_interval, values.log_bucket, values.log_prefix),
        cross_zone=values.cross_zone,
        additional_tags=values.additional_tags,
        security_groups=values.security_groups,
        extra_security_groups=values.extra_security_groups,
        prefix_lists=values.prefix_lists,
        target_type=values.target_type,
        target_node_labels=values.target_node_labels,
        target_group_attributes=values.target_group_attributes,
        unknown_annotations=tuple(sorted(k for k in annotations if k.startswith(PREFIX) and k not in ANNOTATIONS)),
        ignored_annotations=tuple(ignored),
    )


def validate_against_subnets(
    config: LoadBalancerConfig, subnet_ids: Sequence[str], subnet_cidrs: Mapping[str, str] | None = None
) -> None:
    """Checks that need the resolved (or auto-discovered) subnets: one EIP and one private IPv4 per subnet, and,
    given `subnet_cidrs` (subnet ID -> IPv4 CIDR), each private IPv4 inside a different one of those subnets."""
    errors: list[InvalidServiceConfig] = []
    count = f"{len(subnet_ids)} subnets ({', '.join(subnet_ids) or 'none'})"
    if config.eip_allocations and len(config.eip_allocations) != len(subnet_ids):
        errors.append(
            InvalidAnnotation(
                EIP_ANNOTATION, ",".join(config.eip_allocations), f"needs exactly one allocation for each of {count}"
            )
        )
    addresses = config.private_ipv4_addresses
    if addresses and len(addresses) != len(subnet_ids):
        errors.append(
            InvalidAnnotation(
                PRIVATE_IPV4_ANNOTATION, ",".join(addresses), f"needs exactly one address for each of {count}"
            )
        )
    elif addresses and subnet_cidrs is not None:
        used: set[str] = set()
        for address in addresses:
            ip = ipaddress.IPv4Address(address)
            inside = [
                s for s in subnet_ids if s in subnet_cidrs and ip in ipaddress.ip_network(subnet_cidrs[s], strict=False)
            ]
            if not inside or inside[0] in used:
                reason = f"{address} is not in a subnet of its own among {count}"
                errors.append(InvalidAnnotation(PRIVATE_IPV4_ANNOTATION, ",".join(addresses), reason))
                break
            used.add(inside[0])
    raise_all(errors)


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _lb_type(raw: object, default: LbType, errors: list[InvalidServiceConfig]) -> tuple[LbType, bool]:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return default, True
    try:
        if not isinstance(raw, str):
            raise ValueError("annotation values are strings")
        value = ROWS[TYPE_ANNOTATION].parser(default).parse(raw)
    except ValueError as err:
        errors.append(InvalidAnnotation(TYPE_ANNOTATION, raw, str(err)))
        return default, False
    if value in FOREIGN_TYPES:
        raise ImplementedElsewhere(f"{TYPE_ANNOTATION}={value}: the AWS Load Balancer Controller's Service")
    return ("nlb" if value == "nlb" else "clb"), True


def _scheme(values: AnnotationValues, raw_of: Callable[[str], str], errors: list[InvalidServiceConfig]) -> Scheme:
    internal, scheme = values.internal, values.scheme
    if scheme is not None and internal != (scheme == "internal") and raw_of(INTERNAL_ANNOTATION):
        errors.append(
            InvalidAnnotation(
                SCHEME_ANNOTATION,
                raw_of(SCHEME_ANNOTATION),
                f"contradicts {INTERNAL_ANNOTATION}={show(raw_of(INTERNAL_ANNOTATION))}",
            )
        )
    return "internal" if internal or scheme == "internal" else "internet-facing"


def _port_number(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if 1 <= raw <= 65535 else None
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 5:
        return _port_number(int(raw))
    return None


def _service_ports(
    spec: Mapping[str, Any], lb_type: LbType | None, errors: list[InvalidServiceConfig]
) -> tuple[ServicePort, ...]:
    """The hard rules of upstream EnsureLoadBalancer (same wording), then the ports. `lb_type` is None when the
    type annotation is invalid: the per-type protocol rules are skipped rather than reported against a guess."""
    affinity = spec.get("sessionAffinity") or "None"
    if affinity != "None":
        errors.append(InvalidServiceConfig(f"unsupported load balancer affinity: {show(affinity)}"))
    if spec.get("loadBalancerIP"):
        errors.append(InvalidServiceConfig("LoadBalancerIP cannot be specified for AWS ELB"))
    raw_ports = spec.get("ports")
    if not isinstance(raw_ports, list) or not raw_ports:
        errors.append(InvalidServiceConfig("requested load balancer with no ports"))
        return ()
    ports: list[ServicePort] = []
    for item in raw_ports:
        raw = _section({"port": item}, "port")
        protocol = str(raw.get("protocol") or "TCP").upper()
        number, node_port = _port_number(raw.get("port")), _port_number(raw.get("nodePort"))
        if number is None:
            errors.append(InvalidServiceConfig(f"invalid port {show(raw.get('port'))}"))
        elif protocol not in ("TCP", "UDP"):
            errors.append(InvalidServiceConfig(f"Protocol {show(protocol)} not supported by LoadBalancer"))
        elif any(sp.port == number and sp.protocol == protocol for sp in ports):
            errors.append(InvalidServiceConfig(f"port {number}/{protocol} is listed twice"))
        elif node_port is None:
            errors.append(
                InvalidServiceConfig(
                    f"port {number} has no nodePort (allocateLoadBalancerNodePorts=false is not supported)"
                )
            )
        else:
            ports.append(ServicePort(str(raw.get("name") or ""), protocol, number, node_port))
    # AWS quotas that cannot be raised: listeners per NLB / per Classic ELB (one listener per Service port).
    limit = {"nlb": 50, "clb": 100}.get(lb_type or "")
    if limit is not None and len(ports) > limit:
        kind = "an NLB" if lb_type == "nlb" else "a Classic ELB"
        errors.append(InvalidServiceConfig(f"{len(ports)} ports exceed the {limit}-listener limit of {kind}"))
    protocols = {sp.protocol for sp in ports}
    if lb_type == "clb" and len(protocols) > 1:
        errors.append(InvalidServiceConfig("mixed protocol is not supported for LoadBalancer (Classic ELB)"))
    elif lb_type == "clb" and "UDP" in protocols:
        errors.append(
            InvalidServiceConfig(f"Protocol UDP not supported by LoadBalancer: UDP needs {TYPE_ANNOTATION}: nlb")
        )
    return tuple(ports)


def _source_ranges(
    spec: Mapping[str, Any], values: AnnotationValues, ignored: list[str], errors: list[InvalidServiceConfig]
) -> tuple[Network, ...]:
    """spec.loadBalancerSourceRanges, else the annotation, else everything (both families when dualstack), or
    nothing when prefix lists are the sources (as the AWS Load Balancer Controller: a Service naming prefix lists
    and no ranges is reachable only from them)."""
    from_spec = spec.get("loadBalancerSourceRanges")
    if isinstance(from_spec, list) and from_spec:
        if values.source_ranges is not None:
            ignored.append(SOURCE_RANGES_ANNOTATION)  # upstream: the spec field wins
        shown = ",".join(str(r) for r in from_spec)
        try:
            return ROWS[SOURCE_RANGES_ANNOTATION].parser("nlb").parse(shown)
        except ValueError as err:
            errors.append(InvalidAnnotation(SOURCE_RANGES_FIELD, shown, str(err)))
            return ()
    if values.source_ranges is not None:
        return values.source_ranges
    if values.prefix_lists:
        return ()
    everything: tuple[Network, ...] = (ipaddress.IPv4Network("0.0.0.0/0"),)
    if values.ip_address_type == "dualstack":
        everything += (ipaddress.IPv6Network("::/0"),)
    return everything


def _cross_checks(
    scheme: Scheme,
    listeners: Sequence[Listener],
    values: AnnotationValues,
    raw_of: Callable[[str], str],
    errors: list[InvalidServiceConfig],
) -> None:
    def refuse(annotation: str, reason: str) -> None:
        errors.append(InvalidAnnotation(annotation, raw_of(annotation), reason))

    subnets = values.subnets
    for annotation, given, needed in (
        (EIP_ANNOTATION, values.eip_allocations, "internet-facing"),
        (PRIVATE_IPV4_ANNOTATION, values.private_ipv4_addresses, "internal"),
    ):
        if given and scheme != needed:
            refuse(annotation, f"needs an {needed} load balancer, this one is {scheme}")
        if given and subnets and len(given) != len(subnets):
            refuse(annotation, f"{len(given)} entries for {len(subnets)} subnets in {SUBNETS_ANNOTATION}; one each")
    attributes = values.target_group_attributes
    if values.proxy_protocol and attributes.get("proxy_protocol_v2.enabled") == "false":
        refuse(
            TARGET_GROUP_ATTRIBUTES_ANNOTATION,
            f"proxy_protocol_v2.enabled=false contradicts {PROXY_PROTOCOL_ANNOTATION}",
        )
    if attributes.get("preserve_client_ip.enabled") == "false" and any("UDP" in ls.protocol for ls in listeners):
        refuse(TARGET_GROUP_ATTRIBUTES_ANNOTATION, "UDP instance targets always preserve the client IP")
    if values.log_enabled and not values.log_bucket:
        refuse(ACCESS_LOG_ANNOTATION, f"access logs need {PREFIX}access-log-s3-bucket-name")
    # AWS allows 5 security groups per load balancer; without security-groups the managed group is one of them.
    extra = values.extra_security_groups
    if extra and len(set(extra) | set(values.security_groups)) + (not values.security_groups) > 5:
        refuse(EXTRA_SECURITY_GROUPS_ANNOTATION, "more than 5 security groups in all")


def _ip_family_check(
    spec: Mapping[str, Any], values: AnnotationValues, raw_of: Callable[[str], str], errors: list[InvalidServiceConfig]
) -> None:
    """An IPv6-primary Service in `ip` mode gets an ipv6 target group, which AWS associates only with a dualstack
    NLB (ELB user guide, "Target groups for your Network Load Balancers", IP address type). Refused up front
    rather than a group made and then a listener refused half-way (as the LBC: no IPv6 group on an ipv4 NLB)."""
    if values.target_type != "ip" or values.ip_address_type == "dualstack":
        return
    if address_type({"spec": spec}) == "IPv6":
        errors.append(
            InvalidAnnotation(
                TARGET_TYPE_ANNOTATION,
                raw_of(TARGET_TYPE_ANNOTATION),
                f"the Service's primary family is IPv6 (spec.ipFamilies[0]): its ip targets need an ipv6 target "
                f"group, which AWS attaches only to a dualstack NLB; set {PREFIX}ip-address-type: dualstack",
            )
        )
