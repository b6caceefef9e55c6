"""The typed load-balancer configuration of one Service: what its annotations and spec ask for, fully validated.

Produced only by `ccm.aws.lbconfig.parse.parse_load_balancer_config`; drivers (NLB, CLB) and the sweeper consume
it by attribute and never read annotations themselves, so every default and every rule lives in one place.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

LbType = Literal["clb", "nlb"]
LB_TYPES: Final[tuple[LbType, ...]] = ("clb", "nlb")
Scheme = Literal["internal", "internet-facing"]
IpAddressType = Literal["ipv4", "dualstack"]
TargetType = Literal["instance", "ip"]
BackendProtocol = Literal["tcp", "ssl", "http", "https"]
TrafficPolicy = Literal["Cluster", "Local"]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALL_PORTS: Final = "*"
# "*" (every port that can carry TLS) or the listed port numbers and port names.
SslPorts = frozenset[int | str] | Literal["*"]
TRAFFIC_PORT: Final = "traffic-port"


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    protocol: str  # TCP or UDP (SCTP is refused by the parser)
    port: int
    node_port: int


@dataclass(frozen=True, slots=True)
class Listener:
    """One front-end port of the load balancer.

    NLB: protocol TCP, UDP, TLS or TCP_UDP; target_protocol TCP, UDP, TLS (backend-protocol ssl) or TCP_UDP.
    CLB: protocol TCP, SSL, HTTP or HTTPS; target_protocol (the instance protocol) TCP, SSL, HTTP or HTTPS.
    """

    port: int
    protocol: str
    target_protocol: str
    node_port: int
    port_names: tuple[str, ...] = ()  # the Service port(s) served; two for a TCP_UDP listener
    certificates: tuple[str, ...] = ()  # first is the default certificate; set only on TLS/SSL/HTTPS listeners
    ssl_policy: str = ""  # "" = the AWS default policy

    @property
    def secure(self) -> bool:
        return bool(self.certificates)


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """The one health-check type: the configuration's, the NLB target group's and the Classic ELB's, desired and
    observed alike.

    `port` is "traffic-port" (NLB: the target's port; CLB: resolved by the driver to the nodePort of the first
    listener, as upstream) or a port number as a string. `path` is "" unless the protocol is HTTP or HTTPS.
    """

    protocol: str
    port: str
    path: str
    healthy: int
    unhealthy: int
    interval: int
    timeout: int

    def differs_in_place(self, other: HealthCheck) -> bool:
        """NLB: True when a ModifyTargetGroup is needed (the protocol is part of the target group's identity)."""
        path_matters = self.protocol.startswith("HTTP")
        return (
            self.port,
            self.path if path_matters else "",
            self.healthy,
            self.unhealthy,
            self.interval,
            self.timeout,
        ) != (
            other.port,
            other.path if path_matters else "",
            other.healthy,
            other.unhealthy,
            other.interval,
            other.timeout,
        )

    @property
    def target(self) -> str:
        """Classic ELB: `PROTO:port[path]`, e.g. "TCP:30080", "HTTP:31999/healthz" (`port` resolved)."""
        return f"{self.protocol}:{self.port}{self.path}"

    @classmethod
    def from_target(cls, target: str, *, healthy: int, unhealthy: int, interval: int, timeout: int) -> HealthCheck:
        """Classic ELB: the inverse of `target`, so `from_target(t, ...).target == t` for every `PROTO:...` string."""
        protocol, _, rest = target.partition(":")
        port, slash, path = rest.partition("/")
        return cls(protocol, port, slash + path, healthy, unhealthy, interval, timeout)


@dataclass(frozen=True, slots=True)
class ConnectionDraining:
    enabled: bool = False
    timeout: int = 300


@dataclass(frozen=True, slots=True)
class AccessLog:
    enabled: bool = False
    emit_interval: int = 60
    bucket: str = ""
    prefix: str = ""


@dataclass(frozen=True, slots=True)
class LoadBalancerConfig:
    """Every setting of the annotation table (docs/annotations.md) in typed form, plus the spec fields drivers need.

    Settings that do not apply to `lb_type` hold their defaults (the annotation is listed in
    `ignored_annotations`, as upstream silently ignores it). Mappings are plain dicts typed read-only: treat the
    whole object as immutable.
    """

    lb_type: LbType
    scheme: Scheme
    ports: tuple[ServicePort, ...]
    listeners: tuple[Listener, ...]
    health_check: HealthCheck
    source_ranges: tuple[Network, ...]
    external_traffic_policy: TrafficPolicy = "Cluster"
    health_check_node_port: int | None = None
    subnets: tuple[str, ...] = ()  # subnet IDs and/or Name tags; () = auto-discovery
    eip_allocations: tuple[str, ...] = ()
    private_ipv4_addresses: tuple[str, ...] = ()
    ip_address_type: IpAddressType = "ipv4"
    ssl_certificates: tuple[str, ...] = ()
    ssl_ports: SslPorts = ALL_PORTS
    ssl_negotiation_policy: str = ""
    backend_protocol: BackendProtocol = "tcp"
    proxy_protocol: bool = False
    connection_draining: ConnectionDraining = ConnectionDraining()
    idle_timeout: int = 60
    access_log: AccessLog = AccessLog()
    cross_zone: bool = False
    additional_tags: Mapping[str, str] = field(default_factory=dict)
    security_groups: tuple[str, ...] = ()
    extra_security_groups: tuple[str, ...] = ()
    prefix_lists: tuple[str, ...] = ()  # managed prefix lists: client sources beside (or instead of) source_ranges
    target_type: TargetType = "instance"  # NLB: the nodes (instance) or the pods' IPs from EndpointSlices (ip)
    target_node_labels: Mapping[str, str] = field(default_factory=dict)
    target_group_attributes: Mapping[str, str] = field(default_factory=dict)
    # Annotations under the aws-load-balancer- prefix that we do not know (typos, LBC-only names): a caller may
    # warn about them; upstream ignores them, so they never fail the Service.
    unknown_annotations: tuple[str, ...] = ()
    # Known annotations that do not apply to `lb_type` (e.g. connection-idle-timeout on an NLB); not validated.
    ignored_annotations: tuple[str, ...] = ()

    @property
    def internal(self) -> bool:
        return self.scheme == "internal"

    @property
    def subnet_ids(self) -> tuple[str, ...]:
        return tuple(s for s in self.subnets if s.startswith("subnet-"))

    @property
    def subnet_names(self) -> tuple[str, ...]:
        """Entries resolved through the subnet's Name tag (upstream: anything not starting with `subnet-`)."""
        return tuple(s for s in self.subnets if not s.startswith("subnet-"))

    @property
    def source_range_cidrs(self) -> tuple[str, ...]:
        return tuple(str(n) for n in self.source_ranges)

    def effective_target_group_attributes(self) -> dict[str, str]:
        """The NLB target-group attributes to apply: the annotation's, plus proxy-protocol `*` as upstream does."""
        attrs = dict(self.target_group_attributes)
        if self.proxy_protocol:
            attrs["proxy_protocol_v2.enabled"] = "true"
        return attrs

    def selects_node(self, labels: Mapping[str, str]) -> bool:
        """target-node-labels: a node is a member only if it carries every listed label with that value."""
        return all(labels.get(k) == v for k, v in self.target_node_labels.items())
