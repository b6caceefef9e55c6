"""The annotation table: every load-balancer annotation of a Service, with its field, value parser, LB types,
default and meaning. ONE table drives parsing (`ccm.aws.lbconfig.parse`), defaults and the reference in
docs/annotations.md (`ccm.aws.lbconfig.docs`).

Compatibility with cloud-provider-aws (we are a drop-in on these annotations): an annotation that does not apply
to the LB type is ignored (upstream ignores it), and so is an unknown one; `internal` means internal for any value
but "" and exactly "false", as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ccm.aws.lbconfig.config import (
    ALL_PORTS,
    LB_TYPES,
    BackendProtocol,
    IpAddressType,
    LbType,
    Network,
    Scheme,
    SslPorts,
    TargetType,
)
from ccm.aws.lbconfig.values import (
    BOOL,
    Value,
    aws_id,
    bucket,
    cert_arn,
    cidr,
    csv_of,
    hc_path,
    hc_port,
    int_choice,
    int_range,
    internal,
    ipv4,
    key_values,
    label,
    log_prefix,
    one_of,
    policy,
    proxy_protocol,
    ssl_ports,
    subnet,
    tag,
    tg_attribute,
)
from ccm.contracts import kube as p

PREFIX: Final = "service.beta.kubernetes.io/aws-load-balancer-"
SOURCE_RANGES_ANNOTATION: Final = "service.beta.kubernetes.io/load-balancer-source-ranges"
SOURCE_RANGES_FIELD: Final = "spec.loadBalancerSourceRanges"

BOTH: Final[frozenset[LbType]] = frozenset(LB_TYPES)
CLB_ONLY: Final[frozenset[LbType]] = frozenset({"clb"})
NLB_ONLY: Final[frozenset[LbType]] = frozenset({"nlb"})
_SG = aws_id("sg")
_PL = aws_id("pl")


@dataclass(frozen=True, slots=True)
class Row:
    """One annotation. `field` is its attribute of `AnnotationValues` (the type row's: LoadBalancerConfig.lb_type).
    `default` is what the field holds when the annotation is absent, blank or not for this LB type (None: the
    build phase derives it, described by `default_doc`)."""

    annotation: str
    field: str
    value: Value[Any] | Mapping[LbType, Value[Any]]  # a mapping when the accepted values differ per LB type
    types: frozenset[LbType]
    default: Any
    default_doc: str
    meaning: str
    blank_is_absent: bool = True

    def parser(self, lb_type: LbType) -> Value[Any]:
        return self.value[lb_type] if isinstance(self.value, Mapping) else self.value

    @property
    def values_doc(self) -> str:
        if isinstance(self.value, Mapping):
            return "; ".join(f"{t.upper()}: {v.doc}" for t, v in sorted(self.value.items()))
        return self.value.doc


def _a(suffix: str) -> str:
    return PREFIX + suffix


TYPE_ANNOTATION: Final = _a("type")
INTERNAL_ANNOTATION: Final = _a("internal")
SCHEME_ANNOTATION: Final = _a("scheme")
SUBNETS_ANNOTATION: Final = _a("subnets")
EIP_ANNOTATION: Final = _a("eip-allocations")
PRIVATE_IPV4_ANNOTATION: Final = _a("private-ipv4-addresses")
SSL_CERT_ANNOTATION: Final = _a("ssl-cert")
SSL_PORTS_ANNOTATION: Final = _a("ssl-ports")
PROXY_PROTOCOL_ANNOTATION: Final = _a("proxy-protocol")
ACCESS_LOG_ANNOTATION: Final = _a("access-log-enabled")
SECURITY_GROUPS_ANNOTATION: Final = _a("security-groups")
EXTRA_SECURITY_GROUPS_ANNOTATION: Final = _a("extra-security-groups")
TARGET_TYPE_ANNOTATION: Final = _a("nlb-target-type")  # the AWS Load Balancer Controller's
PREFIX_LISTS_ANNOTATION: Final = _a("security-group-prefix-lists")  # the AWS Load Balancer Controller's (v2.8)
TARGET_GROUP_ATTRIBUTES_ANNOTATION: Final = _a("target-group-attributes")
HC_TIMEOUT_ANNOTATION: Final = _a("healthcheck-timeout")
FOREIGN_TYPES: Final = p.FOREIGN_LB_TYPES

# fmt: off
TABLE: Final[tuple[Row, ...]] = (
    Row(TYPE_ANNOTATION, "lb_type", one_of("nlb", "clb", "external", "nlb-ip"), BOTH, None,
        "the configured default", "`nlb`: NLB; `clb`: Classic ELB; `external`/`nlb-ip`: left to the AWS Load "
        "Balancer Controller"),
    Row(INTERNAL_ANNOTATION, "internal", Value(internal, "any; only `false` (exactly) is not internal"), BOTH,
        False, "internet-facing", "internal scheme", blank_is_absent=False),
    Row(SCHEME_ANNOTATION, "scheme", one_of("internal", "internet-facing"), BOTH, None, "`internet-facing`",
        "the scheme (LBC name); must agree with `internal` when both are set"),
    Row(SUBNETS_ANNOTATION, "subnets", csv_of(subnet, "subnet IDs and/or Name tags, comma-separated"), BOTH, (),
        "auto-discovery", "the LB's subnets"),
    Row(EIP_ANNOTATION, "eip_allocations", csv_of(aws_id("eipalloc"), "`eipalloc-` IDs, comma-separated"),
        NLB_ONLY, (), "none", "one Elastic IP per subnet (internet-facing), used when the NLB is created"),
    Row(PRIVATE_IPV4_ANNOTATION, "private_ipv4_addresses", csv_of(ipv4, "IPv4 addresses, comma-separated"),
        NLB_ONLY, (), "AWS assigns", "one private IP per subnet (internal), used when the NLB is created"),
    Row(_a("ip-address-type"), "ip_address_type", one_of("ipv4", "dualstack"), NLB_ONLY, "ipv4", "`ipv4`",
        "IP address type (LBC name)"),
    Row(SSL_CERT_ANNOTATION, "ssl_certificates", csv_of(cert_arn, "ACM/IAM certificate ARNs, comma-separated"),
        BOTH, (), "none", "TLS (NLB) or SSL/HTTPS (CLB, one ARN) listeners on the ssl-ports; the first ARN is the "
        "default certificate"),
    Row(SSL_PORTS_ANNOTATION, "ssl_ports", Value(ssl_ports, "`*` or port numbers/names, comma-separated"), BOTH,
        ALL_PORTS, "`*`", "ports that get the certificate; each must be a port of the Service"),
    Row(_a("ssl-negotiation-policy"), "ssl_negotiation_policy", Value(policy, "a security policy name"), BOTH, "",
        "the AWS default", "TLS policy of the secure listeners"),
    Row(_a("backend-protocol"), "backend_protocol", one_of("tcp", "ssl", "http", "https"), BOTH, "tcp", "`tcp`",
        "CLB instance protocol; on NLB `ssl` makes TLS targets behind TLS listeners"),
    Row(PROXY_PROTOCOL_ANNOTATION, "proxy_protocol", Value(proxy_protocol, "`*`"), BOTH, False, "off",
        "proxy protocol (CLB policy on all backends; NLB `proxy_protocol_v2.enabled`)"),
    Row(_a("connection-draining-enabled"), "draining_enabled", BOOL, CLB_ONLY, False, "`false`",
        "connection draining"),
    Row(_a("connection-draining-timeout"), "draining_timeout", int_range(1, 3600), CLB_ONLY, 300, "`300`",
        "connection draining timeout (seconds)"),
    Row(_a("connection-idle-timeout"), "idle_timeout", int_range(1, 4000), CLB_ONLY, 60, "`60`",
        "idle timeout (seconds)"),
    Row(ACCESS_LOG_ANNOTATION, "log_enabled", BOOL, BOTH, False, "`false`",
        "access logs (needs the bucket name)"),
    Row(_a("access-log-emit-interval"), "log_interval", int_choice(5, 60), BOTH, 60, "`60`",
        "access-log interval (minutes; CLB)"),
    Row(_a("access-log-s3-bucket-name"), "log_bucket", Value(bucket, "an S3 bucket name"), BOTH, "", "none",
        "access-log bucket"),
    Row(_a("access-log-s3-bucket-prefix"), "log_prefix", Value(log_prefix, "a key prefix"), BOTH, "", "none",
        "access-log key prefix"),
    Row(_a("cross-zone-load-balancing-enabled"), "cross_zone", BOOL, BOTH, False, "`false`",
        "cross-zone load balancing"),
    Row(_a("additional-resource-tags"), "additional_tags", key_values(tag, "`k=v,k2=v2` AWS tags", max_items=40),
        BOTH, {}, "none", "tags on every resource made for the Service (not `aws:`, not the ownership tags)"),
    Row(SECURITY_GROUPS_ANNOTATION, "security_groups", csv_of(_SG, "`sg-` IDs, comma-separated", max_items=5),
        BOTH, (), "a managed group", "bring-your-own security groups, replacing the managed one"),
    Row(EXTRA_SECURITY_GROUPS_ANNOTATION, "extra_security_groups",
        csv_of(_SG, "`sg-` IDs, comma-separated", max_items=4), CLB_ONLY, (), "none",
        "security groups added beside the managed one (at most 5 groups in all)"),
    Row(PREFIX_LISTS_ANNOTATION, "prefix_lists", csv_of(_PL, "`pl-` IDs, comma-separated", max_items=10), BOTH, (),
        "none", "managed prefix lists allowed as client sources on the listener ports; without source ranges they "
        "replace `0.0.0.0/0`"),
    Row(TARGET_TYPE_ANNOTATION, "target_type", one_of("instance", "ip"), NLB_ONLY, "instance", "`instance`",
        "`instance`: the nodes, on their node ports; `ip`: the pods' IPs and ports from the Service's EndpointSlices "
        "(VPC-native pod networking: the VPC CNI, Fargate); docs/ip-targets.md"),
    Row(_a("target-node-labels"), "target_node_labels", key_values(label, "`k=v,k2=v2` node labels"), BOTH, {},
        "all nodes", "only nodes with all these labels are targets"),
    Row(TARGET_GROUP_ATTRIBUTES_ANNOTATION, "target_group_attributes",
        key_values(tg_attribute, "`k=v,...`, keys below"), NLB_ONLY, {}, "AWS defaults",
        "target-group attributes (see the list below)"),
    Row(_a("healthcheck-protocol"), "hc_protocol",
        {"clb": one_of("TCP", "SSL", "HTTP", "HTTPS"), "nlb": one_of("TCP", "HTTP", "HTTPS")}, BOTH, None,
        "`TCP` (CLB: `SSL` if backend-protocol is ssl/https); `HTTP` when Local", "health-check protocol"),
    Row(_a("healthcheck-port"), "hc_port", Value(hc_port, "`traffic-port` or a port number"), BOTH, None,
        "`traffic-port`; healthCheckNodePort when Local", "health-check port"),
    Row(_a("healthcheck-path"), "hc_path", Value(hc_path, "a path starting with `/`"), BOTH, None,
        "`/`; `/healthz` when Local", "health-check path (HTTP/HTTPS only)"),
    Row(_a("healthcheck-healthy-threshold"), "hc_healthy", int_range(2, 10), BOTH, None,
        "CLB 2; NLB 3 (2 when Local)", "healthy threshold"),
    Row(_a("healthcheck-unhealthy-threshold"), "hc_unhealthy", int_range(2, 10), BOTH, None,
        "CLB 6; NLB 3 (2 when Local)", "unhealthy threshold"),
    Row(HC_TIMEOUT_ANNOTATION, "hc_timeout", {"clb": int_range(2, 60), "nlb": int_range(2, 120)}, BOTH, None,
        "CLB 5; NLB 10 (6 for HTTP)", "health-check timeout (seconds), smaller than the interval"),
    Row(_a("healthcheck-interval"), "hc_interval", int_range(5, 300), BOTH, None,
        "CLB 10; NLB 30 (10 when Local)", "health-check interval (seconds)"),
    Row(SOURCE_RANGES_ANNOTATION, "source_ranges", csv_of(cidr, "CIDRs, comma-separated", unique=False), BOTH,
        None, "`0.0.0.0/0` (+ `::/0` dualstack)", "allowed client ranges when spec.loadBalancerSourceRanges is "
        "empty"),
)
# fmt: on
ANNOTATIONS: Final = frozenset(row.annotation for row in TABLE)
ROWS: Final = {row.annotation: row for row in TABLE}


@dataclass(frozen=True, slots=True)
class AnnotationValues:
    """Every row of TABLE but the type, parsed, or its default: what the build phase reads (by attribute) and
    combines into a LoadBalancerConfig. Fields named as in LoadBalancerConfig are copied; the others are parts
    (`hc_*`, `log_*`, `draining_*`, `internal`/`scheme`) or inputs (`source_ranges`: the annotation, None unset)."""

    internal: bool
    scheme: Scheme | None
    subnets: tuple[str, ...]
    eip_allocations: tuple[str, ...]
    private_ipv4_addresses: tuple[str, ...]
    ip_address_type: IpAddressType
    ssl_certificates: tuple[str, ...]
    ssl_ports: SslPorts
    ssl_negotiation_policy: str
    backend_protocol: BackendProtocol
    proxy_protocol: bool
    draining_enabled: bool
    draining_timeout: int
    idle_timeout: int
    log_enabled: bool
    log_interval: int
    log_bucket: str
    log_prefix: str
    cross_zone: bool
    additional_tags: Mapping[str, str]
    security_groups: tuple[str, ...]
    extra_security_groups: tuple[str, ...]
    prefix_lists: tuple[str, ...]
    target_type: TargetType
    target_node_labels: Mapping[str, str]
    target_group_attributes: Mapping[str, str]
    hc_protocol: str | None
    hc_port: str | None
    hc_path: str | None
    hc_healthy: int | None
    hc_unhealthy: int | None
    hc_timeout: int | None
    hc_interval: int | None
    source_ranges: tuple[Network, ...] | None
