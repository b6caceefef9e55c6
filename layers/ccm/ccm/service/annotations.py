"""Every load-balancer annotation of a Service, parsed and validated in one place.

ONE table (`TABLE`: annotation, field, value parser, LB types, default) drives parsing, defaults and the
reference in docs/annotations.md (`python -m ccm.service.annotations --markdown` prints it). The result is a typed
`LoadBalancerConfig`; drivers never read annotations themselves.

Compatibility with cloud-provider-aws (we are a drop-in on these annotations):
- an annotation that does not apply to the LB type is ignored (upstream ignores it), and so is an unknown one;
- `internal` means internal for any value but "" and exactly "false", as upstream;
- booleans follow Go's strconv.ParseBool, integers Go's ParseInt, as upstream;
- where upstream hands a bad value to AWS (which fails later, half-way through) or silently misbehaves, we refuse
  it up front instead: InvalidAnnotation, a Warning event, no AWS change. All problems are reported together so a
  user fixes them in one go.
"""

from __future__ import annotations

import ipaddress
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from ccm import predicates as p
from ccm.aws import names
from ccm.contracts import ImplementedElsewhere, InvalidServiceConfig
from ccm.service.lbconfig import (
    ALL_PORTS,
    TRAFFIC_PORT,
    AccessLog,
    ConnectionDraining,
    HealthCheckConfig,
    LbType,
    Listener,
    LoadBalancerConfig,
    Network,
    Scheme,
    ServicePort,
    SslPorts,
)

PREFIX: Final = "service.beta.kubernetes.io/aws-load-balancer-"
SOURCE_RANGES_ANNOTATION: Final = "service.beta.kubernetes.io/load-balancer-source-ranges"
SOURCE_RANGES_FIELD: Final = "spec.loadBalancerSourceRanges"
LB_TYPES: Final[tuple[LbType, ...]] = ("clb", "nlb")
_MAX_SHOWN: Final = 100  # characters of a value quoted in a message; events must stay readable


def _show(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    shown = json.dumps(text[:_MAX_SHOWN], ensure_ascii=False)
    return shown if len(text) <= _MAX_SHOWN else f"{shown}... ({len(text)} characters)"


# -- errors -----------------------------------------------------------------------------------------------------------
class InvalidAnnotation(InvalidServiceConfig):
    """One annotation (or spec field) with a value we refuse; the message names it and its (truncated) value."""

    def __init__(self, annotation: str, value: object, reason: str) -> None:
        super().__init__(f"invalid {annotation}={_show(value)}: {reason}")
        self.annotation = annotation
        self.value = value
        self.reason = reason


class ServiceConfigErrors(InvalidServiceConfig):
    """Several problems at once (InvalidAnnotation and hard-rule InvalidServiceConfig), in one message."""

    def __init__(self, errors: Sequence[InvalidServiceConfig]) -> None:
        super().__init__(f"{len(errors)} problems: " + "; ".join(str(e) for e in errors))
        self.errors = tuple(errors)


def errors_of(err: InvalidServiceConfig) -> tuple[InvalidServiceConfig, ...]:
    return err.errors if isinstance(err, ServiceConfigErrors) else (err,)


def _raise_all(errors: Sequence[InvalidServiceConfig]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ServiceConfigErrors(errors)


# -- value parsers: raise ValueError(reason); `doc` feeds the reference table ------------------------------------------
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Value(Generic[T]):
    parse: Callable[[str], T]
    doc: str


_INT = re.compile(r"[+-]?[0-9]+")  # Go ParseInt: ASCII digits, optional sign; no spaces or underscores
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _int(text: str, lo: int, hi: int) -> int:
    s = text.strip()
    if not _INT.fullmatch(s):
        raise ValueError("not an integer")
    if len(s) > 12 or not lo <= int(s) <= hi:  # the length check keeps huge inputs away from int()
        raise ValueError(f"must be between {lo} and {hi}")
    return int(s)


def int_range(lo: int, hi: int) -> Value[int]:
    return Value(lambda s: _int(s, lo, hi), f"integer {lo}-{hi}")


def int_choice(*choices: int) -> Value[int]:
    def parse(text: str) -> int:
        n = _int(text, min(choices), max(choices))
        if n not in choices:
            raise ValueError("must be one of " + ", ".join(map(str, choices)))
        return n

    return Value(parse, " or ".join(f"`{c}`" for c in choices))


def _go_bool(text: str) -> bool:
    s = text.strip()
    if s in _GO_TRUE:
        return True
    if s in _GO_FALSE:
        return False
    raise ValueError("not a boolean (expected true or false)")


BOOL: Final = Value(_go_bool, "`true`/`false` (Go ParseBool: also `1`/`0`, `t`/`f`)")


def one_of(*choices: str) -> Value[str]:
    canonical = {c.lower(): c for c in choices}

    def parse(text: str) -> str:
        try:
            return canonical[text.strip().lower()]
        except KeyError:
            raise ValueError("must be one of " + ", ".join(choices)) from None

    return Value(parse, " / ".join(f"`{c}`" for c in choices) + " (case-insensitive)")


def csv_of(item: Callable[[str], T], doc: str, *, max_items: int = 100, unique: bool = True) -> Value[tuple[T, ...]]:
    """Comma-separated items, blanks around items and empty items ignored; `unique=False` drops duplicates."""

    def parse(text: str) -> tuple[T, ...]:
        out: dict[T, None] = {}  # ordered, and O(1) duplicate checks even for a 256 KiB annotation
        problems: list[str] = []
        for raw in (s.strip() for s in text.split(",")):
            if not raw:
                continue
            try:
                value = item(raw)
            except ValueError as err:
                problems.append(f"{_show(raw)} {err}")
                continue
            if value in out:
                if unique:
                    problems.append(f"{_show(raw)} is listed twice")
                continue
            out[value] = None
            if len(out) > max_items:
                raise ValueError(f"at most {max_items} entries")
        if problems:
            raise ValueError("; ".join(problems[:10]))
        if not out:
            raise ValueError("empty list")
        return tuple(out)

    return Value(parse, doc)


def key_values(check: Callable[[str, str], str], doc: str, *, max_items: int = 100) -> Value[dict[str, str]]:
    """`k=v,k2=v2`; a bare `k` means an empty value (as upstream); `check(key, value)` returns the value to keep."""

    def parse(text: str) -> dict[str, str]:
        out: dict[str, str] = {}
        problems: list[str] = []
        for raw in (s.strip() for s in text.split(",")):
            if not raw:
                continue
            key, _, value = (part.strip() for part in raw.partition("="))
            try:
                if not key:
                    raise ValueError("has no key")
                if key in out:
                    raise ValueError("repeats a key")
                out[key] = check(key, value)
            except ValueError as err:
                problems.append(f"{_show(raw)} {err}")
            if len(out) > max_items:
                raise ValueError(f"at most {max_items} entries")
        if problems:
            raise ValueError("; ".join(problems[:10]))
        if not out:
            raise ValueError("empty list")
        return out

    return Value(parse, doc)


def _aws_id(prefix: str) -> Callable[[str], str]:
    pattern = re.compile(prefix + r"-[0-9a-f]{8}(?:[0-9a-f]{9})?")

    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise ValueError(f"is not an ID of the form {prefix}-<8 or 17 hex digits>")
        return text

    return check


_subnet_id = _aws_id("subnet")


def _subnet(text: str) -> str:
    # Upstream treats anything starting with "subnet-" as an ID and everything else as a Name tag.
    if text.startswith("subnet-"):
        return _subnet_id(text)
    if len(text) > 256 or not text.isprintable():
        raise ValueError("is not a subnet Name tag (at most 256 printable characters)")
    return text


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise ValueError("is not an IPv4 address") from None


def _cidr(text: str) -> Network:
    # Go's ParseCIDR (upstream) needs the prefix length; host bits are allowed and masked off.
    if "/" not in text:
        raise ValueError("is not a CIDR (expected e.g. 10.0.0.0/24)")
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError("is not a valid CIDR") from None


_CERT_ARN = re.compile(r"arn:aws[a-z-]*:(?:acm|iam):[a-z0-9-]*:[0-9]{12}:(?:certificate|server-certificate)/[!-~]+")


def _cert_arn(text: str) -> str:
    if not _CERT_ARN.fullmatch(text):
        raise ValueError("is not an ACM or IAM certificate ARN")
    return text


def _ssl_port(text: str) -> int | str:
    # Upstream: an integer is a port number, anything else a port name.
    return _int(text, 1, 65535) if _INT.fullmatch(text) else text


_ssl_port_list = csv_of(_ssl_port, "")


def _ssl_ports(text: str) -> SslPorts:
    return ALL_PORTS if text.strip() == ALL_PORTS else frozenset(_ssl_port_list.parse(text))


def _internal(text: str) -> bool:
    # Exactly upstream: only "false" (case and blanks included) keeps the LB internet-facing.
    return text != "false"


def _proxy_protocol(text: str) -> bool:
    if text.strip() != "*":
        raise ValueError("the only value supported is '*'")
    return True


_POLICY = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _policy(text: str) -> str:
    if not _POLICY.fullmatch(text.strip()):
        raise ValueError("is not a security policy name")
    return text.strip()


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _bucket(text: str) -> str:
    s = text.strip()
    if not _BUCKET.fullmatch(s) or ".." in s:
        raise ValueError("is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    return s


def _log_prefix(text: str) -> str:
    s = text.strip()
    if len(s) > 1024 or not s.isprintable() or "AWSLogs" in s:
        raise ValueError("is not a log prefix (printable, at most 1024 characters, without AWSLogs)")
    return s


def _hc_port(text: str) -> str:
    s = text.strip()
    return s if s == TRAFFIC_PORT else str(_int(s, 1, 65535))


def _hc_path(text: str) -> str:
    s = text.strip()
    if not s.startswith("/") or len(s) > 1024 or any(c.isspace() or not c.isprintable() for c in s):
        raise ValueError("is not a path (starts with /, at most 1024 characters, no blanks)")
    return s


_TAG_CHARS = re.compile(r"[\w .:/=+@-]*")  # AWS: letters, digits, spaces and _ . : / = + - @


def _tag(key: str, value: str) -> str:
    if len(key) > 128 or len(value) > 256 or not _TAG_CHARS.fullmatch(key) or not _TAG_CHARS.fullmatch(value):
        raise ValueError("is not an AWS tag (key <= 128, value <= 256 of letters, digits, spaces, _ . : / = + - @)")
    if key.lower().startswith("aws:"):
        raise ValueError("uses the aws: prefix, reserved by AWS")
    # Ownership tags decide what the controller may change or delete: a Service must not forge them.
    if key == names.SERVICE_NAME_TAG or key == names.SERVICE_UID_TAG or key.startswith(names.CLUSTER_TAG_PREFIX):
        raise ValueError("is reserved for the controller's ownership tags")
    return value


_LABEL_PART = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")


def _label(key: str, value: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError("has a label key prefix that is not a DNS subdomain")
    if not name or len(name) > 63 or not _LABEL_PART.fullmatch(name):
        raise ValueError("is not a label key")
    if len(value) > 63 or not _LABEL_PART.fullmatch(value):
        raise ValueError("is not a label value")
    return value


def _attr(value: Value[Any]) -> Value[str]:
    """Target-group attribute values are strings for AWS; normalise booleans to "true"/"false"."""

    def parse(text: str) -> str:
        parsed = value.parse(text)
        return ("true" if parsed else "false") if isinstance(parsed, bool) else str(parsed)

    return Value(parse, value.doc)


def _off_or(numbers: Value[int]) -> Value[str]:
    def parse(text: str) -> str:
        return "off" if text.strip().lower() == "off" else str(numbers.parse(text))

    return Value(parse, f"`off` or {numbers.doc}")


# cloud-provider-aws accepts the first two; the others are the NLB instance-target attributes the AWS Load
# Balancer Controller documents, all valid for instance targets. Anything else is refused before it reaches AWS.
TARGET_GROUP_ATTRIBUTES: Final[Mapping[str, Value[str]]] = {
    "preserve_client_ip.enabled": _attr(BOOL),
    "proxy_protocol_v2.enabled": _attr(BOOL),
    "deregistration_delay.timeout_seconds": _attr(int_range(0, 3600)),
    "deregistration_delay.connection_termination.enabled": _attr(BOOL),
    "stickiness.enabled": _attr(BOOL),
    "stickiness.type": one_of("source_ip"),
    "load_balancing.cross_zone.enabled": one_of("true", "false", "use_load_balancer_configuration"),
    "target_health_state.unhealthy.connection_termination.enabled": _attr(BOOL),
    "target_health_state.unhealthy.draining_interval_seconds": _attr(int_range(0, 360000)),
    "target_group_health.dns_failover.minimum_healthy_targets.count": _off_or(int_range(1, 100000)),
    "target_group_health.dns_failover.minimum_healthy_targets.percentage": _off_or(int_range(1, 100)),
    "target_group_health.unhealthy_state_routing.minimum_healthy_targets.count": _attr(int_range(1, 100000)),
    "target_group_health.unhealthy_state_routing.minimum_healthy_targets.percentage": _off_or(int_range(1, 100)),
}


def _tg_attribute(key: str, value: str) -> str:
    if key not in TARGET_GROUP_ATTRIBUTES:
        raise ValueError("is not a supported target-group attribute (see docs/annotations.md)")
    return TARGET_GROUP_ATTRIBUTES[key].parse(value)


# -- the table --------------------------------------------------------------------------------------------------------
BOTH: Final[frozenset[LbType]] = frozenset(LB_TYPES)
CLB_ONLY: Final[frozenset[LbType]] = frozenset({"clb"})
NLB_ONLY: Final[frozenset[LbType]] = frozenset({"nlb"})
_SG = _aws_id("sg")


@dataclass(frozen=True, slots=True)
class Row:
    """One annotation. `field` is a LoadBalancerConfig field, or `_name` for a part the build phase combines.
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
TARGET_GROUP_ATTRIBUTES_ANNOTATION: Final = _a("target-group-attributes")
HC_TIMEOUT_ANNOTATION: Final = _a("healthcheck-timeout")
FOREIGN_TYPES: Final = p.FOREIGN_LB_TYPES

# fmt: off
TABLE: Final[tuple[Row, ...]] = (
    Row(TYPE_ANNOTATION, "lb_type", one_of("nlb", "clb", "external", "nlb-ip"), BOTH, None,
        "the configured default", "`nlb`: NLB; `clb`: Classic ELB; `external`/`nlb-ip`: left to the AWS Load "
        "Balancer Controller"),
    Row(INTERNAL_ANNOTATION, "_internal", Value(_internal, "any; only `false` (exactly) is not internal"), BOTH,
        False, "internet-facing", "internal scheme", blank_is_absent=False),
    Row(SCHEME_ANNOTATION, "_scheme", one_of("internal", "internet-facing"), BOTH, None, "`internet-facing`",
        "the scheme (LBC name); must agree with `internal` when both are set"),
    Row(SUBNETS_ANNOTATION, "subnets", csv_of(_subnet, "subnet IDs and/or Name tags, comma-separated"), BOTH, (),
        "auto-discovery", "the LB's subnets"),
    Row(EIP_ANNOTATION, "eip_allocations", csv_of(_aws_id("eipalloc"), "`eipalloc-` IDs, comma-separated"),
        NLB_ONLY, (), "none", "one Elastic IP per subnet (internet-facing), used when the NLB is created"),
    Row(PRIVATE_IPV4_ANNOTATION, "private_ipv4_addresses", csv_of(_ipv4, "IPv4 addresses, comma-separated"),
        NLB_ONLY, (), "AWS assigns", "one private IP per subnet (internal), used when the NLB is created"),
    Row(_a("ip-address-type"), "ip_address_type", one_of("ipv4", "dualstack"), NLB_ONLY, "ipv4", "`ipv4`",
        "IP address type (LBC name)"),
    Row(SSL_CERT_ANNOTATION, "ssl_certificates", csv_of(_cert_arn, "ACM/IAM certificate ARNs, comma-separated"),
        BOTH, (), "none", "TLS (NLB) or SSL/HTTPS (CLB, one ARN) listeners on the ssl-ports; the first ARN is the "
        "default certificate"),
    Row(SSL_PORTS_ANNOTATION, "ssl_ports", Value(_ssl_ports, "`*` or port numbers/names, comma-separated"), BOTH,
        ALL_PORTS, "`*`", "ports that get the certificate; each must be a port of the Service"),
    Row(_a("ssl-negotiation-policy"), "ssl_negotiation_policy", Value(_policy, "a security policy name"), BOTH, "",
        "the AWS default", "TLS policy of the secure listeners"),
    Row(_a("backend-protocol"), "backend_protocol", one_of("tcp", "ssl", "http", "https"), BOTH, "tcp", "`tcp`",
        "CLB instance protocol; on NLB `ssl` makes TLS targets behind TLS listeners"),
    Row(PROXY_PROTOCOL_ANNOTATION, "proxy_protocol", Value(_proxy_protocol, "`*`"), BOTH, False, "off",
        "proxy protocol (CLB policy on all backends; NLB `proxy_protocol_v2.enabled`)"),
    Row(_a("connection-draining-enabled"), "_draining_enabled", BOOL, CLB_ONLY, False, "`false`",
        "connection draining"),
    Row(_a("connection-draining-timeout"), "_draining_timeout", int_range(1, 3600), CLB_ONLY, 300, "`300`",
        "connection draining timeout (seconds)"),
    Row(_a("connection-idle-timeout"), "idle_timeout", int_range(1, 4000), CLB_ONLY, 60, "`60`",
        "idle timeout (seconds)"),
    Row(ACCESS_LOG_ANNOTATION, "_log_enabled", BOOL, BOTH, False, "`false`",
        "access logs (needs the bucket name)"),
    Row(_a("access-log-emit-interval"), "_log_interval", int_choice(5, 60), BOTH, 60, "`60`",
        "access-log interval (minutes; CLB)"),
    Row(_a("access-log-s3-bucket-name"), "_log_bucket", Value(_bucket, "an S3 bucket name"), BOTH, "", "none",
        "access-log bucket"),
    Row(_a("access-log-s3-bucket-prefix"), "_log_prefix", Value(_log_prefix, "a key prefix"), BOTH, "", "none",
        "access-log key prefix"),
    Row(_a("cross-zone-load-balancing-enabled"), "cross_zone", BOOL, BOTH, False, "`false`",
        "cross-zone load balancing"),
    Row(_a("additional-resource-tags"), "additional_tags", key_values(_tag, "`k=v,k2=v2` AWS tags", max_items=40),
        BOTH, {}, "none", "tags on every resource made for the Service (not `aws:`, not the ownership tags)"),
    Row(SECURITY_GROUPS_ANNOTATION, "security_groups", csv_of(_SG, "`sg-` IDs, comma-separated", max_items=5),
        BOTH, (), "a managed group", "bring-your-own security groups, replacing the managed one"),
    Row(EXTRA_SECURITY_GROUPS_ANNOTATION, "extra_security_groups",
        csv_of(_SG, "`sg-` IDs, comma-separated", max_items=4), CLB_ONLY, (), "none",
        "security groups added beside the managed one (at most 5 groups in all)"),
    Row(_a("target-node-labels"), "target_node_labels", key_values(_label, "`k=v,k2=v2` node labels"), BOTH, {},
        "all nodes", "only nodes with all these labels are targets"),
    Row(TARGET_GROUP_ATTRIBUTES_ANNOTATION, "target_group_attributes",
        key_values(_tg_attribute, "`k=v,...`, keys below"), NLB_ONLY, {}, "AWS defaults",
        "target-group attributes (see the list below)"),
    Row(_a("healthcheck-protocol"), "_hc_protocol",
        {"clb": one_of("TCP", "SSL", "HTTP", "HTTPS"), "nlb": one_of("TCP", "HTTP", "HTTPS")}, BOTH, None,
        "`TCP` (CLB: `SSL` if backend-protocol is ssl/https); `HTTP` when Local", "health-check protocol"),
    Row(_a("healthcheck-port"), "_hc_port", Value(_hc_port, "`traffic-port` or a port number"), BOTH, None,
        "`traffic-port`; healthCheckNodePort when Local", "health-check port"),
    Row(_a("healthcheck-path"), "_hc_path", Value(_hc_path, "a path starting with `/`"), BOTH, None,
        "`/`; `/healthz` when Local", "health-check path (HTTP/HTTPS only)"),
    Row(_a("healthcheck-healthy-threshold"), "_hc_healthy", int_range(2, 10), BOTH, None,
        "CLB 2; NLB 3 (2 when Local)", "healthy threshold"),
    Row(_a("healthcheck-unhealthy-threshold"), "_hc_unhealthy", int_range(2, 10), BOTH, None,
        "CLB 6; NLB 3 (2 when Local)", "unhealthy threshold"),
    Row(HC_TIMEOUT_ANNOTATION, "_hc_timeout", {"clb": int_range(2, 60), "nlb": int_range(2, 120)}, BOTH, None,
        "CLB 5; NLB 10 (6 for HTTP)", "health-check timeout (seconds), smaller than the interval"),
    Row(_a("healthcheck-interval"), "_hc_interval", int_range(5, 300), BOTH, None,
        "CLB 10; NLB 30 (10 when Local)", "health-check interval (seconds)"),
    Row(SOURCE_RANGES_ANNOTATION, "_source_ranges", csv_of(_cidr, "CIDRs, comma-separated", unique=False), BOTH,
        None, "`0.0.0.0/0` (+ `::/0` dualstack)", "allowed client ranges when spec.loadBalancerSourceRanges is "
        "empty"),
)
# fmt: on
ANNOTATIONS: Final = frozenset(row.annotation for row in TABLE)
_ROW: Final = {row.annotation: row for row in TABLE}


# -- parsing ----------------------------------------------------------------------------------------------------------
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
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for row in TABLE[1:]:
        raw = annotations.get(row.annotation)
        values[row.field] = row.default
        if raw is None or raw == "" or (row.blank_is_absent and isinstance(raw, str) and not raw.strip()):
            continue
        if lb_type not in row.types:
            ignored.append(row.annotation)
            continue
        if not isinstance(raw, str):
            errors.append(InvalidAnnotation(row.annotation, raw, "annotation values are strings"))
            continue
        try:
            values[row.field] = row.parser(lb_type).parse(raw)
        except ValueError as err:
            errors.append(InvalidAnnotation(row.annotation, raw, str(err)))

    def raw_of(annotation: str) -> str:
        return str(annotations.get(annotation, ""))

    scheme = _scheme(values, raw_of, errors)
    ports = _service_ports(spec, lb_type if type_known else None, errors)
    _check_ssl_ports(values["ssl_ports"], ports, raw_of, errors)
    listeners = _listeners(lb_type, ports, values, raw_of, errors)
    local = spec.get("externalTrafficPolicy") == "Local"
    health_check_node_port = _port_number(spec.get("healthCheckNodePort"))
    health = _health_check(lb_type, health_check_node_port if local else None, values, raw_of, errors)
    source_ranges = _source_ranges(spec, values, ignored, errors)
    _cross_checks(scheme, listeners, values, raw_of, errors)
    _raise_all(errors)
    return LoadBalancerConfig(
        lb_type=lb_type,
        scheme=scheme,
        ports=ports,
        listeners=listeners,
        health_check=health,
        source_ranges=source_ranges,
        external_traffic_policy="Local" if local else "Cluster",
        health_check_node_port=health_check_node_port,
        subnets=values["subnets"],
        eip_allocations=values["eip_allocations"],
        private_ipv4_addresses=values["private_ipv4_addresses"],
        ip_address_type=values["ip_address_type"],
        ssl_certificates=values["ssl_certificates"],
        ssl_ports=values["ssl_ports"],
        ssl_negotiation_policy=values["ssl_negotiation_policy"],
        backend_protocol=values["backend_protocol"],
        proxy_protocol=values["proxy_protocol"],
        connection_draining=ConnectionDraining(values["_draining_enabled"], values["_draining_timeout"]),
        idle_timeout=values["idle_timeout"],
        access_log=AccessLog(
            values["_log_enabled"], values["_log_interval"], values["_log_bucket"], values["_log_prefix"]
        ),
        cross_zone=values["cross_zone"],
        additional_tags=values["additional_tags"],
        security_groups=values["security_groups"],
        extra_security_groups=values["extra_security_groups"],
        target_node_labels=values["target_node_labels"],
        target_group_attributes=values["target_group_attributes"],
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
    _raise_all(errors)


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _lb_type(raw: object, default: LbType, errors: list[InvalidServiceConfig]) -> tuple[LbType, bool]:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return default, True
    try:
        if not isinstance(raw, str):
            raise ValueError("annotation values are strings")
        value = _ROW[TYPE_ANNOTATION].parser(default).parse(raw)
    except ValueError as err:
        errors.append(InvalidAnnotation(TYPE_ANNOTATION, raw, str(err)))
        return default, False
    if value in FOREIGN_TYPES:
        raise ImplementedElsewhere(f"{TYPE_ANNOTATION}={value}: the AWS Load Balancer Controller's Service")
    return ("nlb" if value == "nlb" else "clb"), True


def _scheme(values: dict[str, Any], raw_of: Callable[[str], str], errors: list[InvalidServiceConfig]) -> Scheme:
    internal, scheme = values["_internal"], values["_scheme"]
    if scheme is not None and internal != (scheme == "internal") and raw_of(INTERNAL_ANNOTATION):
        errors.append(
            InvalidAnnotation(
                SCHEME_ANNOTATION,
                raw_of(SCHEME_ANNOTATION),
                f"contradicts {INTERNAL_ANNOTATION}={_show(raw_of(INTERNAL_ANNOTATION))}",
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
        errors.append(InvalidServiceConfig(f"unsupported load balancer affinity: {_show(affinity)}"))
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
            errors.append(InvalidServiceConfig(f"invalid port {_show(raw.get('port'))}"))
        elif protocol not in ("TCP", "UDP"):
            errors.append(InvalidServiceConfig(f"Protocol {_show(protocol)} not supported by LoadBalancer"))
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


def _check_ssl_ports(
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


def _listeners(
    lb_type: LbType,
    ports: Sequence[ServicePort],
    values: Mapping[str, Any],
    raw_of: Callable[[str], str],
    errors: list[InvalidServiceConfig],
) -> tuple[Listener, ...]:
    certs: tuple[str, ...] = values["ssl_certificates"]
    ssl_ports: SslPorts = values["ssl_ports"]
    backend: str = values["backend_protocol"]
    policy: str = values["ssl_negotiation_policy"]
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


def _health_check(
    lb_type: LbType,
    local_port: int | None,
    values: Mapping[str, Any],
    raw_of: Callable[[str], str],
    errors: list[InvalidServiceConfig],
) -> HealthCheckConfig:
    """Defaults per LB type and traffic policy (aws-reference.md), then the annotations on top, as upstream."""
    if local_port:
        # kube-proxy answers /healthz on healthCheckNodePort, healthy only where the Service has a local endpoint.
        protocol, port, path = "HTTP", str(local_port), "/healthz"
    elif lb_type == "clb":
        protocol = "SSL" if values["backend_protocol"] in ("ssl", "https") else "TCP"
        port, path = TRAFFIC_PORT, ""
    else:
        protocol, port, path = "TCP", TRAFFIC_PORT, ""
    if lb_type == "clb":
        healthy, unhealthy, interval = 2, 6, 10
    else:
        healthy, unhealthy, interval = (2, 2, 10) if local_port else (3, 3, 30)
    protocol = values["_hc_protocol"] or protocol
    # Upstream CLB treats healthcheck-port "traffic-port" as "no override" (Local keeps healthCheckNodePort).
    if values["_hc_port"] is not None and not (lb_type == "clb" and values["_hc_port"] == TRAFFIC_PORT):
        port = values["_hc_port"]
    path = (values["_hc_path"] or path or "/") if protocol in ("HTTP", "HTTPS") else ""
    healthy = values["_hc_healthy"] or healthy
    unhealthy = values["_hc_unhealthy"] or unhealthy
    interval = values["_hc_interval"] or interval
    timeout = values["_hc_timeout"]
    if timeout is None:
        # Upstream never sends the NLB timeout, so AWS's default applies: 6 s for HTTP, 10 s otherwise. AWS also
        # wants timeout < interval; a default is lowered to fit a short interval instead of failing.
        timeout = min(5 if lb_type == "clb" else 6 if protocol == "HTTP" else 10, interval - 1)
    elif timeout >= interval:
        reason = f"must be smaller than the health-check interval ({interval} s)"
        errors.append(InvalidAnnotation(HC_TIMEOUT_ANNOTATION, raw_of(HC_TIMEOUT_ANNOTATION), reason))
    return HealthCheckConfig(protocol, port, path, healthy, unhealthy, interval, timeout)


def _source_ranges(
    spec: Mapping[str, Any], values: Mapping[str, Any], ignored: list[str], errors: list[InvalidServiceConfig]
) -> tuple[Network, ...]:
    """spec.loadBalancerSourceRanges, else the annotation, else everything (both families when dualstack)."""
    from_spec = spec.get("loadBalancerSourceRanges")
    if isinstance(from_spec, list) and from_spec:
        if values["_source_ranges"] is not None:
            ignored.append(SOURCE_RANGES_ANNOTATION)  # upstream: the spec field wins
        shown = ",".join(str(r) for r in from_spec)
        try:
            return _ROW[SOURCE_RANGES_ANNOTATION].parser("nlb").parse(shown)
        except ValueError as err:
            errors.append(InvalidAnnotation(SOURCE_RANGES_FIELD, shown, str(err)))
            return ()
    if values["_source_ranges"] is not None:
        return values["_source_ranges"]
    everything: tuple[Network, ...] = (ipaddress.IPv4Network("0.0.0.0/0"),)
    if values["ip_address_type"] == "dualstack":
        everything += (ipaddress.IPv6Network("::/0"),)
    return everything


def _cross_checks(
    scheme: Scheme,
    listeners: Sequence[Listener],
    values: Mapping[str, Any],
    raw_of: Callable[[str], str],
    errors: list[InvalidServiceConfig],
) -> None:
    def refuse(annotation: str, reason: str) -> None:
        errors.append(InvalidAnnotation(annotation, raw_of(annotation), reason))

    subnets = values["subnets"]
    for annotation, field, needed in (
        (EIP_ANNOTATION, "eip_allocations", "internet-facing"),
        (PRIVATE_IPV4_ANNOTATION, "private_ipv4_addresses", "internal"),
    ):
        given = values[field]
        if given and scheme != needed:
            refuse(annotation, f"needs an {needed} load balancer, this one is {scheme}")
        if given and subnets and len(given) != len(subnets):
            refuse(annotation, f"{len(given)} entries for {len(subnets)} subnets in {SUBNETS_ANNOTATION}; one each")
    attributes = values["target_group_attributes"]
    if values["proxy_protocol"] and attributes.get("proxy_protocol_v2.enabled") == "false":
        refuse(
            TARGET_GROUP_ATTRIBUTES_ANNOTATION,
            f"proxy_protocol_v2.enabled=false contradicts {PROXY_PROTOCOL_ANNOTATION}",
        )
    if attributes.get("preserve_client_ip.enabled") == "false" and any("UDP" in ls.protocol for ls in listeners):
        refuse(TARGET_GROUP_ATTRIBUTES_ANNOTATION, "UDP instance targets always preserve the client IP")
    if values["_log_enabled"] and not values["_log_bucket"]:
        refuse(ACCESS_LOG_ANNOTATION, f"access logs need {_a('access-log-s3-bucket-name')}")
    # AWS allows 5 security groups per load balancer; without security-groups the managed group is one of them.
    extra = values["extra_security_groups"]
    if extra and len(set(extra) | set(values["security_groups"])) + (not values["security_groups"]) > 5:
        refuse(EXTRA_SECURITY_GROUPS_ANNOTATION, "more than 5 security groups in all")


# -- the reference ----------------------------------------------------------------------------------------------------
RULES: Final = (
    '`spec.sessionAffinity` must be `None` ("unsupported load balancer affinity").',
    '`spec.loadBalancerIP` must be empty ("LoadBalancerIP cannot be specified for AWS ELB").',
    "At least one port; every port needs a nodePort; SCTP is refused.",
    "CLB: TCP only, no mixed protocols. NLB: TCP and UDP; TCP and UDP on one port become one TCP_UDP listener "
    "(both need the same nodePort).",
    "CLB: one certificate ARN. `ssl-ports` entries must name ports of the Service; with `*`, NLB TLS goes to the "
    "TCP-only ports.",
    "`eip-allocations` need internet-facing, `private-ipv4-addresses` internal; each needs exactly one entry per "
    "subnet (checked again against auto-discovered subnets).",
    "`healthcheck-timeout` must be smaller than `healthcheck-interval` (a default timeout is lowered to fit).",
    "`access-log-enabled` needs `access-log-s3-bucket-name`; at most 5 security groups in all.",
    "`target-group-attributes` must not contradict `proxy-protocol: *`, nor disable client-IP preservation with "
    "UDP ports.",
)
NOTES: Final = (
    "An empty value counts as absent (except `internal`, which is exact as upstream: only `false` is "
    "internet-facing, so `False` means internal).",
    "Annotations that do not apply to the LB type, and unknown `aws-load-balancer-` annotations (Load Balancer "
    "Controller names included), are ignored as upstream ignores them, but never silently: a Warning "
    "`AnnotationIgnored` names each; `AnnotationDiffers` names those applied where cloud-provider-aws would not "
    "(docs/migration.md).",
    "`type` is compared case-insensitively; values other than `nlb`, `clb`, `external`, `nlb-ip` are refused "
    "(upstream would silently make a CLB).",
    "A problem is reported as one Warning naming every annotation and value at fault; nothing in AWS changes and "
    "the Service keeps its current load balancer.",
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_markdown() -> str:
    """docs/annotations.md, generated from TABLE so documentation and parser cannot drift apart."""
    out = [
        "# Service annotations",
        "",
        "<!-- Generated by `python -m ccm.service.annotations --markdown` from the parser's table; do not edit. -->",
        "",
        f"Prefix `{PREFIX}` unless written in full. Same names and meaning as cloud-provider-aws; `scheme`,",
        "`ip-address-type`, `private-ipv4-addresses` and most target-group attributes are AWS Load Balancer",
        "Controller names we also accept. `spec.loadBalancerSourceRanges` wins over the source-ranges annotation.",
        "",
        "| annotation | CLB | NLB | values | default | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for row in TABLE:
        name = row.annotation.removeprefix(PREFIX) if row.annotation.startswith(PREFIX) else row.annotation
        flags = " | ".join("y" if t in row.types else "-" for t in LB_TYPES)
        cells = (f"`{name}`", flags, _cell(row.values_doc), _cell(row.default_doc), _cell(row.meaning))
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "## Target-group attributes (NLB)", "", "| key | values |", "|---|---|"]
    out += [f"| `{key}` | {_cell(value.doc)} |" for key, value in TARGET_GROUP_ATTRIBUTES.items()]
    out += ["", "## Rules", ""] + [f"- {rule}" for rule in RULES]
    out += ["", "## Notes", ""] + [f"- {note}" for note in NOTES]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["--markdown"]:
        print("usage: python -m ccm.service.annotations --markdown", file=sys.stderr)
        return 2
    sys.stdout.write(reference_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
