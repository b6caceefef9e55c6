"""The build phase of listeners and the health check: from the Service's ports and the parsed annotation values
to what the drivers create, with the defaults of cloud-provider-aws per LB type and traffic policy.

Problems are appended to `errors` (reported together by the parser); `raw_of(annotation)` is the raw value, to
quote in a message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from ccm.aws.lbconfig.config import ALL_PORTS, TRAFFIC_PORT, HealthCheck, LbType, Listener, ServicePort, SslPorts
from ccm.aws.lbconfig.errors import InvalidAnnotation
from ccm.aws.lbconfig.table import (
    HC_TIMEOUT_ANNOTATION,
    SSL_CERT_ANNOTATION,
    SSL_PORTS_ANNOTATION,
    AnnotationValues,
)
from ccm.contracts.cloud import InvalidServiceConfig


def check_ssl_ports(
    ssl_ports: SslPorts, ports: Sequence[ServicePort], raw_of: Callable[[str], str], errors: list[InvalidServiceConfig]
) -> None:
    if ssl_ports == ALL_PORTS or not ports:
        return
    known = {sp.port for sp in ports} | {sp.name for sp in ports if sp.name}
    missing = sorted(str(x) for x in ssl_ports if x not in known)
    if missing:
        have = ", ".join(f"{sp.port} ({sp.name})" if sp.name else str(sp.port) for sp in ports)
        reason = f"{', '.join(missing)}: no such port in the Service (ports: {have})"
        errors.append(InvalidAnnotation(SSL_PORTS_ANNOTATION, raw_of(SSL_PORTS_ANNOTATION), reason))


def _gets_certificate(sp: ServicePort, ssl_ports: SslPorts) -> bool:
    return ssl_ports == ALL_PORTS or sp.port in ssl_ports or sp.name in ssl_ports


# cloud-provider-aws backendProtocolMapping: the CLB front-end protocol of a secure listener per backend protocol.
_CLB_SECURE_FRONTEND: Final = {"https": "HTTPS", "http": "HTTPS", "ssl": "SSL", "tcp": "SSL"}


def build_listeners(
    lb_type: LbType,
    ports: Sequence[ServicePort],
    values: AnnotationValues,
    raw_of: Callable[[str], str],
    errors: list[InvalidServiceConfig],
) -> tuple[Listener, ...]:
    certs: tuple[str, ...] = values.ssl_certificates
    ssl_ports: SslPorts = values.ssl_ports
    backend: str = values.backend_protocol
    policy: str = values.ssl_negotiation_policy
    listeners: list[Listener] = []
    if lb_type == "clb":
        if len(certs) > 1:
            reason = "a Classic ELB listener takes one certificate; give one ARN"
            errors.append(InvalidAnnotation(SSL_CERT_ANNOTATION, raw_of(SSL_CERT_ANNOTATION), reason))
        for sp in ports:
            if sp.protocol != "TCP":
                continue  # reported by the hard rules
            if certs and _gets_certificate(sp, ssl_ports):
                front = _CLB_SECURE_FRONTEND[backend]
                listeners.append(Listener(sp.port, front, backend.upper(), sp.node_port, (sp.name,), certs[:1], policy))
            else:
                # Upstream: without a certificate only backend-protocol http changes the listener.
                proto = "HTTP" if backend == "http" else "TCP"
                listeners.append(Listener(sp.port, proto, proto, sp.node_port, (sp.name,)))
        return tuple(listeners)
    by_number: dict[int, list[ServicePort]] = {}
    for sp in ports:
        by_number.setdefault(sp.port, []).append(sp)
    for number, group in by_number.items():
        port_names = tuple(sp.name for sp in group)
        protocol = group[0].protocol
        if len(group) == 2:  # TCP and UDP on one port (same-protocol duplicates were refused)
            if group[0].node_port != group[1].node_port:
                errors.append(
                    InvalidServiceConfig(
                        f"port {number} is TCP and UDP: one TCP_UDP listener needs one nodePort for both, "
                        f"not {group[0].node_port} and {group[1].node_port}"
                    )
                )
                continue
            protocol = "TCP_UDP"
        secure = bool(certs) and any(_gets_certificate(sp, ssl_ports) for sp in group)
        if secure and protocol != "TCP":
            # `*` means every port that can carry TLS; naming a UDP port explicitly is a mistake worth reporting.
            if ssl_ports != ALL_PORTS:
                reason = f"port {number} is {protocol}; TLS needs a TCP-only port"
                errors.append(InvalidAnnotation(SSL_PORTS_ANNOTATION, raw_of(SSL_PORTS_ANNOTATION), reason))
            secure = False
        if secure:
            target = "TLS" if backend == "ssl" else "TCP"
            listeners.append(Listener(number, "TLS", target, group[0].node_port, port_names, certs, policy))
        else:
            listeners.append(Listener(number, protocol, protocol, group[0].node_port, port_names))
    return tuple(listeners)


def build_health_check(
    lb_type: LbType,
    local_port: int | None,
    values: AnnotationValues,
    raw_of: Callable[[str], str],
    errors: list[InvalidServiceConfig],
) -> HealthCheck:
    """Defaults per LB type and traffic policy (cloud-provider-aws's), then the annotations on top, as upstream."""
    if local_port:
        # kube-proxy answers /healthz on healthCheckNodePort, healthy only where the Service has a local endpoint.
        protocol, port, path = "HTTP", str(local_port), "/healthz"
    elif lb_type == "clb":
        protocol = "SSL" if values.backend_protocol in ("ssl", "https") else "TCP"
        port, path = TRAFFIC_PORT, ""
    else:
        protocol, port, path = "TCP", TRAFFIC_PORT, ""
    if lb_type == "clb":
        healthy, unhealthy, interval = 2, 6, 10
    else:
        healthy, unhealthy, interval = (2, 2, 10) if local_port else (3, 3, 30)
    protocol = values.hc_protocol or protocol
    # Upstream CLB treats healthcheck-port "traffic-port" as "no override" (Local keeps healthCheckNodePort).
    if values.hc_port is not None and not (lb_type == "clb" and values.hc_port == TRAFFIC_PORT):
        port = values.hc_port
    path = (values.hc_path or path or "/") if protocol in ("HTTP", "HTTPS") else ""
    healthy = values.hc_healthy or healthy
    unhealthy = values.hc_unhealthy or unhealthy
    interval = values.hc_interval or interval
    timeout = values.hc_timeout
    if timeout is None:
        # Upstream never sends the NLB timeout, so AWS's default applies: 6 s for HTTP, 10 s otherwise. AWS also
        # wants timeout < interval; a default is lowered to fit a short interval instead of failing.
        timeout = min(5 if lb_type == "clb" else 6 if protocol == "HTTP" else 10, interval - 1)
    elif timeout >= interval:
        reason = f"must be smaller than the health-check interval ({interval} s)"
        errors.append(InvalidAnnotation(HC_TIMEOUT_ANNOTATION, raw_of(HC_TIMEOUT_ANNOTATION), reason))
    return HealthCheck(protocol, port, path, healthy, unhealthy, interval, timeout)
