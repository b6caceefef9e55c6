"""Value parsers of the annotation table: each raises ValueError(reason) and carries the `doc` of the reference.

Compatibility with cloud-provider-aws: booleans follow Go's strconv.ParseBool, integers Go's ParseInt, as
upstream; where upstream hands a bad value to AWS (which fails later, half-way through) we refuse it up front.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from ccm.aws import names
from ccm.aws.lbconfig.config import ALL_PORTS, TRAFFIC_PORT, Network, SslPorts
from ccm.aws.lbconfig.errors import show

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
                problems.append(f"{show(raw)} {err}")
                continue
            if value in out:
                if unique:
                    problems.append(f"{show(raw)} is listed twice")
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
                problems.append(f"{show(raw)} {err}")
            if len(out) > max_items:
                raise ValueError(f"at most {max_items} entries")
        if problems:
            raise ValueError("; ".join(problems[:10]))
        if not out:
            raise ValueError("empty list")
        return out

    return Value(parse, doc)


def aws_id(prefix: str) -> Callable[[str], str]:
    pattern = re.compile(prefix + r"-[0-9a-f]{8}(?:[0-9a-f]{9})?")

    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise ValueError(f"is not an ID of the form {prefix}-<8 or 17 hex digits>")
        return text

    return check


_subnet_id = aws_id("subnet")


def subnet(text: str) -> str:
    # Upstream treats anything starting with "subnet-" as an ID and everything else as a Name tag.
    if text.startswith("subnet-"):
        return _subnet_id(text)
    if len(text) > 256 or not text.isprintable():
        raise ValueError("is not a subnet Name tag (at most 256 printable characters)")
    return text


def ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise ValueError("is not an IPv4 address") from None


def cidr(text: str) -> Network:
    # Go's ParseCIDR (upstream) needs the prefix length; host bits are allowed and masked off.
    if "/" not in text:
        raise ValueError("is not a CIDR (expected e.g. 10.0.0.0/24)")
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError("is not a valid CIDR") from None


_CERT_ARN = re.compile(r"arn:aws[a-z-]*:(?:acm|iam):[a-z0-9-]*:[0-9]{12}:(?:certificate|server-certificate)/[!-~]+")


def cert_arn(text: str) -> str:
    if not _CERT_ARN.fullmatch(text):
        raise ValueError("is not an ACM or IAM certificate ARN")
    return text


def _ssl_port(text: str) -> int | str:
    # Upstream: an integer is a port number, anything else a port name.
    return _int(text, 1, 65535) if _INT.fullmatch(text) else text


_ssl_port_list = csv_of(_ssl_port, "")


def ssl_ports(text: str) -> SslPorts:
    return ALL_PORTS if text.strip() == ALL_PORTS else frozenset(_ssl_port_list.parse(text))


def internal(text: str) -> bool:
    # Exactly upstream: only "false" (case and blanks included) keeps the LB internet-facing.
    return text != "false"


def proxy_protocol(text: str) -> bool:
    if text.strip() != "*":
        raise ValueError("the only value supported is '*'")
    return True


_POLICY = re.compile(r"[A-Za-z0-9._-]{1,128}")


def policy(text: str) -> str:
    if not _POLICY.fullmatch(text.strip()):
        raise ValueError("is not a security policy name")
    return text.strip()


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def bucket(text: str) -> str:
    s = text.strip()
    if not _BUCKET.fullmatch(s) or ".." in s:
        raise ValueError("is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    return s


def log_prefix(text: str) -> str:
    s = text.strip()
    if len(s) > 1024 or not s.isprintable() or "AWSLogs" in s:
        raise ValueError("is not a log prefix (printable, at most 1024 characters, without AWSLogs)")
    return s


def hc_port(text: str) -> str:
    s = text.strip()
    return s if s == TRAFFIC_PORT else str(_int(s, 1, 65535))


def hc_path(text: str) -> str:
    s = text.strip()
    if not s.startswith("/") or len(s) > 1024 or any(c.isspace() or not c.isprintable() for c in s):
        raise ValueError("is not a path (starts with /, at most 1024 characters, no blanks)")
    return s


_TAG_CHARS = re.compile(r"[\w .:/=+@-]*")  # AWS: letters, digits, spaces and _ . : / = + - @


def tag(key: str, value: str) -> str:
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


def label(key: str, value: str) -> str:
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


def tg_attribute(key: str, value: str) -> str:
    if key not in TARGET_GROUP_ATTRIBUTES:
        raise ValueError("is not a supported target-group attribute (see docs/annotations.md)")
    return TARGET_GROUP_ATTRIBUTES[key].parse(value)
