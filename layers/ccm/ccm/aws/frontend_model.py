"""The client-facing ("frontend") groups of load balancers open to everyone, as pure functions.

A Service with the default source ranges gets the cluster's shared **listener group** of its port set: one group
per (address family, set of listener protocols and ports), named after a hash of that key
(`serverless-ccm-listeners-<hash>-<cluster>`) and holding exactly the rules one such load balancer needs: each
listener port and protocol from 0.0.0.0/0 (and ::/0 when dualstack), plus path-MTU ICMP. Every load balancer that
carries a listener group has exactly those listeners, so no rule of it opens a port that is not a listener of an
LB carrying it (Security Hub EC2.18 / EC2.19 judge the rules, not the listeners). docs/security.md says why this
arrangement rather than one group per LB.

The key is also the group's tag `serverless-ccm/listeners` (when it fits a tag value), so a new execution
environment's one scan of the cluster's groups can converge each group's rules without knowing any Service.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from typing import Final

from ccm.aws.security_groups_model import PATH_MTU, PATH_MTU_V6, ROLE_LISTENERS, IngressRule

__all__ = ["ROLE_LISTENERS", "interim_groups", "listener_group_name", "listener_key", "rules_of_key"]
LISTENERS_TAG: Final = "serverless-ccm/listeners"  # its key, e.g. "ipv4 tcp:80,443"
MAX_TAG_VALUE: Final = 256  # EC2 tag values; a longer key is only in the name's hash
MAX_GROUPS_PER_LB: Final = 5  # security groups per network interface, so per load balancer (VPC quotas)
_PROTOCOLS: Final = ("tcp", "udp")
_FAMILIES: Final = {"ipv4": ("0.0.0.0/0",), "dualstack": ("0.0.0.0/0", "::/0")}


def _ranges(ports: Sequence[int]) -> str:
    """80,443,8000-8003: consecutive ports as a range, so a key stays short."""
    parts: list[str] = []
    start = prev = ports[0]
    for port in [*ports[1:], None]:
        if port is not None and port == prev + 1:
            prev = port
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if port is not None:
            start = prev = port
    return ",".join(parts)


def _ports(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += range(int(low), int(high or low) + 1)
    return out


def listener_key(rules: Iterable[IngressRule]) -> str:
    """The port-set key of an open-to-all LB's rules: `<ipv4|dualstack> tcp:<ports> udp:<ports>`."""
    rules = list(rules)
    family = "dualstack" if any(r.cidr == "::/0" for r in rules) else "ipv4"
    parts = [family]
    for protocol in _PROTOCOLS:
        ports = sorted({r.from_port for r in rules if r.protocol == protocol})
        if ports:
            parts.append(f"{protocol}:{_ranges(ports)}")
    return " ".join(parts)


def rules_of_key(key: str) -> frozenset[IngressRule]:
    """The inverse of `listener_key`: the rules a listener group of that key holds. ValueError if malformed."""
    family, *parts = key.split(" ")
    if family not in _FAMILIES or not parts:
        raise ValueError(f"not a listener key: {key!r}")
    cidrs = _FAMILIES[family]
    rules: set[IngressRule] = set()
    for part in parts:
        protocol, _, ports = part.partition(":")
        if protocol not in _PROTOCOLS or not ports:
            raise ValueError(f"not a listener key: {key!r}")
        rules.update(IngressRule(protocol, p, p, cidr=c) for p in _ports(ports) for c in cidrs)
    rules.update(
        IngressRule("icmpv6", *PATH_MTU_V6, cidr=c) if ":" in c else IngressRule("icmp", *PATH_MTU, cidr=c)
        for c in cidrs
    )
    return frozenset(rules)


def listener_group_name(cluster_name: str, key: str) -> str:
    """Unique per VPC like every group name; the hash keeps it short whatever the number of ports."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"serverless-ccm-listeners-{digest}-{cluster_name}"


def listener_group_description(cluster_name: str, key: str) -> str:
    """EC2 allows 255 characters (a-z, A-Z, 0-9, spaces and ._-:/()#,@[]+=&;{}!$*)."""
    text = f"serverless-ccm listeners {key} of the load balancers of cluster {cluster_name}"
    return text if len(text) <= 255 else text[:252] + "..."


def listener_tags(cluster_tag: str, key: str, role_tag: str) -> dict[str, str]:
    tags = {cluster_tag: "owned", role_tag: ROLE_LISTENERS}
    if len(key) <= MAX_TAG_VALUE:
        tags[LISTENERS_TAG] = key
    return tags


def interim_groups(attached: Collection[str], wanted: Sequence[str]) -> tuple[str, ...] | None:
    """Make before break: when a load balancer's groups are swapped (some added, some removed), the set to carry
    first, while its listeners change: the old groups and the new ones (every live listener keeps a rule
    throughout), then `wanted`. None when a single change is enough (nothing added or nothing removed) or when
    both together would pass the 5 groups a load balancer may carry."""
    added = [g for g in wanted if g not in attached]
    removed = [g for g in attached if g not in wanted]
    if not added or not removed:
        return None
    both = (*attached, *added)
    return both if len(both) <= MAX_GROUPS_PER_LB else None
