"""Security-group decisions as pure functions: the rules a load balancer's managed group must hold, the diff to
converge a group, the shared groups (backend, default frontend) and their one node rule, the per-LB node rules of
bring-your-own groups (and the leftovers of the previous design), and which node rules are stale.

Rules are compared as AWS identifies them (protocol, ports, one source); descriptions never take part, so a rule
whose description was edited by hand is still "present" and costs no call.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ccm.aws import names
from ccm.aws.lbconfig import LoadBalancerConfig

MANAGED_GROUP_PREFIX: Final = "k8s-elb-"  # cloud-provider-aws's name, so its CLB groups are found and adopted
ALL: Final = "-1"  # all protocols (and all ports)
# Path-MTU discovery (EC2 user guide, "Path MTU Discovery"): ICMP "destination unreachable / fragmentation needed"
# (type 3 code 4) from the IPv4 source ranges, as cloud-provider-aws opens for CLBs and NLB clients (k/k#24254);
# ICMPv6 "packet too big" (type 2 code 0) from the IPv6 ones.
PATH_MTU: Final = (3, 4)
PATH_MTU_V6: Final = (2, 0)
NODE_RULE_PREFIX: Final = "serverless-ccm: from load balancer "
ROLE_TAG: Final = "serverless-ccm/role"  # marks the shared groups (backend, listeners, legacy frontend): not LB-owned
ROLE_BACKEND: Final = "backend"
ROLE_FRONTEND: Final = "frontend-default"  # the legacy all-ports group (0.2 and earlier): only ever retired
ROLE_LISTENERS: Final = "frontend-listeners"  # a listener group, one per port set (ccm.aws.frontend_model)
_EVERYWHERE: Final = ("0.0.0.0/0", "::/0")
# "(nlb client|health|mtu)": the CIDR rules of an NLB without security groups (ccm.aws.nlb_node_rules_model).
_NODE_RULE = re.compile(
    r"^serverless-ccm: from load balancer (?P<lb>[A-Za-z0-9-]+)(?: \((?:service [^)]*|nlb (?:client|health|mtu))\))?$"
)
# Our load balancer names ("a" + UID without dashes, 32 chars): only these may inherit a shared node rule.
_OUR_LB_NAME = re.compile(r"^a[0-9a-f]{31}$")
# ENI descriptions of load balancers: "ELB net/<name>/<id>" (NLB), "ELB app/<name>/<id>" (ALB), "ELB <name>" (CLB).
_ELB_ENI = re.compile(r"^ELB (?:(?:net|app|gwy)/(?P<v2>[^/]+)/\S+|(?P<clb>[^/\s]+))$")
_PROTOCOL_NUMBERS: Final = {"6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6"}
_LISTENER_PROTOCOLS: Final[Mapping[str, tuple[str, ...]]] = {
    "TCP": ("tcp",),
    "TLS": ("tcp",),
    "SSL": ("tcp",),
    "HTTP": ("tcp",),
    "HTTPS": ("tcp",),
    "UDP": ("udp",),
    "TCP_UDP": ("tcp", "udp"),
}


class NodeSecurityGroupError(RuntimeError):
    """The node security group cannot be chosen (an instance carries several cluster-tagged groups)."""


@dataclass(frozen=True, slots=True)
class IngressRule:
    """One ingress rule as AWS identifies it. Ports are -1 for protocol "-1"; for ICMP they are type and code.
    Exactly one of `cidr` (IPv4 or IPv6), `source_group` and `prefix_list` is set. `description` is carried,
    never compared."""

    protocol: str
    from_port: int
    to_port: int
    cidr: str | None = None
    source_group: str | None = None
    description: str = field(default="", compare=False)
    prefix_list: str | None = None


def sort_key(rule: IngressRule) -> tuple[str, int, int, str, str, str]:
    return (
        rule.protocol,
        rule.from_port,
        rule.to_port,
        rule.cidr or "",
        rule.source_group or "",
        rule.prefix_list or "",
    )


def managed_group_name(lb_name: str) -> str:
    return MANAGED_GROUP_PREFIX + lb_name


def desired_lb_rules(config: LoadBalancerConfig, lb_type: str) -> frozenset[IngressRule]:
    """The managed group's rules: every listener port (TCP_UDP opens both) from every source range and managed
    prefix list; IPv6 ranges only on a dualstack NLB (an IPv4 load balancer never receives IPv6 traffic); plus the
    path-MTU ICMP rule per range (ICMP 3/4, ICMPv6 2/0; not per prefix list, whose address family the config does
    not know). Bring-your-own groups replace the managed group: no rules."""
    if config.security_groups:
        return frozenset()
    dualstack = lb_type == "nlb" and config.ip_address_type == "dualstack"
    cidrs = sorted({str(n) for n in config.source_ranges if n.version == 4 or dualstack})
    rules: set[IngressRule] = set()
    for listener in config.listeners:
        protocols = _LISTENER_PROTOCOLS.get(listener.protocol.upper())
        if protocols is None:
            raise ValueError(f"listener protocol {listener.protocol} has no security-group protocol")
        rules.update(IngressRule(p, listener.port, listener.port, cidr=c) for p in protocols for c in cidrs)
        rules.update(
            IngressRule(p, listener.port, listener.port, prefix_list=pl)
            for p in protocols
            for pl in config.prefix_lists
        )
    rules.update(
        IngressRule("icmpv6", *PATH_MTU_V6, cidr=c) if ":" in c else IngressRule("icmp", *PATH_MTU, cidr=c)
        for c in cidrs
    )
    return frozenset(rules)


def plan_rules(
    current: Iterable[IngressRule], desired: Iterable[IngressRule]
) -> tuple[list[IngressRule], list[IngressRule]]:
    """(to authorize, to revoke), each sorted; both empty when converged."""
    have, want = set(current), set(desired)
    return sorted(want - have, key=sort_key), sorted(have - want, key=sort_key)


# -- the AWS shape -----------------------------------------------------------------------------------------------------
def rules_from_permissions(permissions: Iterable[Mapping[str, Any]]) -> list[IngressRule]:
    """Flatten DescribeSecurityGroups' IpPermissions into one rule per source (CIDR, group or prefix list)."""
    rules: list[IngressRule] = []
    for perm in permissions:
        raw = str(perm.get("IpProtocol", ALL)).lower()
        protocol = _PROTOCOL_NUMBERS.get(raw, raw)
        ports = (-1, -1) if protocol == ALL else (int(perm.get("FromPort", -1)), int(perm.get("ToPort", -1)))
        for r in perm.get("IpRanges", []):
            rules.append(IngressRule(protocol, *ports, cidr=_cidr(r["CidrIp"]), description=r.get("Description", "")))
        for r in perm.get("Ipv6Ranges", []):
            rules.append(IngressRule(protocol, *ports, cidr=_cidr(r["CidrIpv6"]), description=r.get("Description", "")))
        for pl in perm.get("PrefixListIds", []):
            rules.append(
                IngressRule(protocol, *ports, prefix_list=pl["PrefixListId"], description=pl.get("Description", ""))
            )
        for pair in perm.get("UserIdGroupPairs", []):
            if pair.get("GroupId"):
                rules.append(
                    IngressRule(protocol, *ports, source_group=pair["GroupId"], description=pair.get("Description", ""))
                )
    return rules


def to_permissions(rules: Iterable[IngressRule], *, descriptions: bool = True) -> list[dict[str, Any]]:
    """IpPermissions for one Authorize/Revoke call: rules sharing protocol and ports share one entry."""
    grouped: dict[tuple[str, int, int], dict[str, Any]] = {}
    for rule in sorted(set(rules), key=sort_key):
        perm = grouped.get((rule.protocol, rule.from_port, rule.to_port))
        if perm is None:
            perm = {"IpProtocol": rule.protocol}
            if rule.protocol != ALL:  # AWS ignores ports for all-protocols; not sending them avoids a mismatch
                perm.update(FromPort=rule.from_port, ToPort=rule.to_port)
            grouped[(rule.protocol, rule.from_port, rule.to_port)] = perm
        extra = {"Description": rule.description} if descriptions and rule.description else {}
        if rule.source_group:
            perm.setdefault("UserIdGroupPairs", []).append({"GroupId": rule.source_group, **extra})
        elif rule.prefix_list:
            perm.setdefault("PrefixListIds", []).append({"PrefixListId": rule.prefix_list, **extra})
        elif rule.cidr and ":" in rule.cidr:
            perm.setdefault("Ipv6Ranges", []).append({"CidrIpv6": rule.cidr, **extra})
        elif rule.cidr:
            perm.setdefault("IpRanges", []).append({"CidrIp": rule.cidr, **extra})
    return list(grouped.values())


def _cidr(text: str) -> str:
    return str(ipaddress.ip_network(text, strict=False))


# -- node access -------------------------------------------------------------------------------------------------------
def node_rule_description(lb_name: str, service_uid: str = "") -> str:
    return NODE_RULE_PREFIX + lb_name + (f" (service {service_uid})" if service_uid else "")


def lb_named_by(description: str) -> str | None:
    """The load balancer a node rule was made for, or None for a rule that is not ours."""
    match = _NODE_RULE.match(description or "")
    return match["lb"] if match else None


def node_rule(source_group: str, lb_name: str, service_uid: str) -> IngressRule:
    """The one node rule per load balancer: all traffic from its group (see the driver module for why)."""
    return IngressRule(ALL, -1, -1, source_group=source_group, description=node_rule_description(lb_name, service_uid))


def plan_node_access(
    current: Iterable[IngressRule], source_group: str, lb_name: str, service_uid: str, node_groups: Collection[str]
) -> tuple[list[IngressRule], list[IngressRule]]:
    """(to authorize, to retire) on one node group. The wanted rule is present whatever its description (an
    upstream rule, or one shared through a bring-your-own group and named after another LB). To retire: other
    rules named after this LB (its source changed). Rules from a node group itself (self-references) are never
    touched."""
    wanted = node_rule(source_group, lb_name, service_uid)
    rules = list(current)
    authorize = [] if wanted in rules or source_group in node_groups else [wanted]
    retire = [
        r for r in rules if lb_named_by(r.description) == lb_name and r != wanted and r.source_group not in node_groups
    ]
    return authorize, sorted(retire, key=sort_key)


def rules_for_lb(
    current: Iterable[IngressRule], lb_name: str, lb_group_id: str | None, node_groups: Collection[str]
) -> list[IngressRule]:
    """Node rules to retire when the LB goes: those named after it, and any rule from its managed group."""
    return sorted(
        (
            r
            for r in current
            if r.source_group not in node_groups
            and (lb_named_by(r.description) == lb_name or (lb_group_id and r.source_group == lb_group_id))
        ),
        key=sort_key,
    )


def stale_node_rules(rules: Iterable[IngressRule], live_lb_names: Collection[str]) -> list[IngressRule]:
    """Our node rules (recognised by description) whose load balancer is not among the live ones."""
    return sorted(
        (r for r in rules if (lb := lb_named_by(r.description)) is not None and lb not in live_lb_names), key=sort_key
    )


def lb_names_of_enis(enis: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """group id -> names of the load balancers whose network interfaces carry that group."""
    users: dict[str, set[str]] = {}
    for eni in enis:
        match = _ELB_ENI.match(str(eni.get("Description", "")))
        if match is None:
            continue
        for group in eni.get("Groups", []):
            users.setdefault(group["GroupId"], set()).add(match["v2"] or match["clb"])
    return users


def plan_retire(
    rules: Iterable[IngressRule], retiring: Collection[str], users: Mapping[str, Collection[str]]
) -> tuple[list[IngressRule], list[IngressRule]]:
    """(to revoke, to relabel). A rule whose source group still fronts another of our load balancers (a
    bring-your-own group shared by several Services: AWS keeps one rule per source) is handed over to that LB by
    its description instead of being revoked, so deleting one Service never cuts another one's traffic."""
    revoke: list[IngressRule] = []
    relabel: list[IngressRule] = []
    for rule in sorted(set(rules), key=sort_key):
        heirs = sorted(n for n in users.get(rule.source_group or "", ()) if n not in retiring and _OUR_LB_NAME.match(n))
        if heirs:
            relabel.append(replace(rule, description=node_rule_description(heirs[0])))
        else:
            revoke.append(rule)
    return revoke, relabel


def node_rule_tags(cluster_tag: str) -> list[dict[str, Any]]:
    """TagSpecifications of a node rule we add: the cluster tag on the rule itself (resource type
    security-group-rule), so only rules we created are ever revoked by name."""
    return [{"ResourceType": "security-group-rule", "Tags": [{"Key": cluster_tag, "Value": "owned"}]}]


def tagged_rule_ids(
    rules: Iterable[IngressRule], described: Iterable[Mapping[str, Any]], cluster_tag: str
) -> tuple[list[str], list[IngressRule]]:
    """(ids of the rules among `rules` that carry our cluster tag, the rules that do not). `described`:
    DescribeSecurityGroupRules entries of one group."""
    ours: dict[IngressRule, str] = {}
    for d in described:
        if d.get("IsEgress") or not any(t.get("Key") == cluster_tag for t in d.get("Tags") or []):
            continue
        raw = str(d.get("IpProtocol", ALL)).lower()
        protocol = _PROTOCOL_NUMBERS.get(raw, raw)
        ports = (-1, -1) if protocol == ALL else (int(d.get("FromPort", -1)), int(d.get("ToPort", -1)))
        source = (d.get("ReferencedGroupInfo") or {}).get("GroupId")
        cidr = d.get("CidrIpv4") or d.get("CidrIpv6")
        rule = IngressRule(protocol, *ports, cidr=_cidr(cidr) if cidr else None, source_group=source)
        ours[rule] = str(d["SecurityGroupRuleId"])
    wanted = sorted(set(rules), key=sort_key)
    return sorted(ours[r] for r in wanted if r in ours), [r for r in wanted if r not in ours]


# -- discovery ---------------------------------------------------------------------------------------------------------
def is_lb_group(group: Mapping[str, Any]) -> bool:
    """A cluster-tagged group made for load balancers (ours, shared or per LB, or cloud-provider-aws's), not a node
    group."""
    tags = {t["Key"] for t in group.get("Tags", [])}
    return str(group.get("GroupName", "")).startswith(MANAGED_GROUP_PREFIX) or bool(
        tags & {names.SERVICE_UID_TAG, names.SERVICE_NAME_TAG, ROLE_TAG}
    )


def choose_node_groups(tagged: Collection[str], instance_groups: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """cloud-provider-aws's findSecurityGroupForInstance, over all cluster instances: per instance, its one
    cluster-tagged group; an instance with none uses its only group (upstream's back-compat); several tagged
    groups on one instance is an error, as upstream. The node groups are the union."""
    chosen: set[str] = set()
    for groups in instance_groups:
        mine = sorted(set(groups) & set(tagged))
        if len(mine) > 1:
            raise NodeSecurityGroupError(
                f"an instance carries several security groups tagged for the cluster ({', '.join(mine)}); "
                "tag only the node security group"
            )
        if mine:
            chosen.add(mine[0])
        elif len(set(groups)) == 1:
            chosen.update(groups)
    return tuple(sorted(chosen))


def untagged_node_groups_message(cluster_tag: str, vpc_id: str, instance_groups: Iterable[Sequence[str]]) -> str:
    """The Warning when no node group carries the cluster tag: the LB is up but no rule lets it reach the nodes
    (and IAM only lets us change tagged groups). Names the member instances' groups and the tag to add."""
    groups = sorted({g for gs in instance_groups for g in gs})
    where = f"the nodes' security group(s) {', '.join(groups)}" if groups else "the node security group"
    return (
        f"no security group of {vpc_id} carries {cluster_tag}, so the load balancer cannot reach the nodes: "
        f"tag {where} with {cluster_tag}=owned (only the group all nodes share)"
    )


# -- the two shared groups of the cluster --------------------------------------------------------------------------


def shared_group_name(cluster_name: str, role: str) -> str:
    """Not `k8s-elb-...`: no Service's LB owns it (group names are unique per VPC, so one per cluster)."""
    return f"serverless-ccm-{role}-{cluster_name}"


def open_to_all(config: LoadBalancerConfig, lb_type: str) -> bool:
    """The Service takes the default source ranges (or names exactly them): everything the LB can receive. Such an
    LB uses the shared listener group of its port set (ccm.aws.frontend_model): the same rules as its own group."""
    if config.security_groups or config.prefix_lists:
        return False
    dualstack = lb_type == "nlb" and config.ip_address_type == "dualstack"
    effective = {str(n) for n in config.source_ranges if n.version == 4 or dualstack}
    return effective == ({"0.0.0.0/0", "::/0"} if dualstack else {"0.0.0.0/0"})


def frontend_default_rules() -> frozenset[IngressRule]:
    """The legacy shared frontend group of 0.2 and earlier: TCP and UDP on every port from everywhere, plus the
    path-MTU ICMP rules. Functionally no wider than the listeners, but Security Hub EC2.18 / EC2.19 judge rules, so
    it is no longer made; what an LB on it moves to is its listener group."""
    rules = {IngressRule(p, 0, 65535, cidr=c) for p in ("tcp", "udp") for c in _EVERYWHERE}
    rules |= {IngressRule("icmp", *PATH_MTU, cidr="0.0.0.0/0"), IngressRule("icmpv6", *PATH_MTU_V6, cidr="::/0")}
    return frozenset(rules)


def backend_rule_description(cluster_name: str) -> str:
    """Deliberately not `NODE_RULE_PREFIX + <lb>`: no LB name is parsed from it, so the stale-rule logic
    (`lb_named_by`, `stale_node_rules`) can never take the shared rule for a leftover per-LB one."""
    return f"serverless-ccm: from the load balancers of cluster {cluster_name} (backend group)"


def backend_rule(backend_group: str, cluster_name: str) -> IngressRule:
    """The one node rule of the cluster: all traffic from the backend group that every managed LB carries."""
    return IngressRule(ALL, -1, -1, source_group=backend_group, description=backend_rule_description(cluster_name))


def plan_backend_access(current: Iterable[IngressRule], backend_group: str, cluster_name: str) -> list[IngressRule]:
    """To authorize on one node group: the backend rule, unless present (whatever its description)."""
    wanted = backend_rule(backend_group, cluster_name)
    return [] if wanted in set(current) else [wanted]


def shared_role(group: Mapping[str, Any], cluster_tag: str) -> str | None:
    """ROLE_BACKEND / ROLE_FRONTEND / ROLE_LISTENERS for one of our shared groups (owned by the cluster, role tag),
    else None."""
    tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
    role = tags.get(ROLE_TAG)
    return role if tags.get(cluster_tag) == "owned" and role in (ROLE_BACKEND, ROLE_FRONTEND, ROLE_LISTENERS) else None


@dataclass(frozen=True, slots=True)
class FrontendPlan:
    """What a Service's load balancer carries (pure, part of the pass's model: ccm.aws.model): bring-your-own groups
    (`named`, used as they are) or the frontend `rules` (on the cluster's listener group of its port set when
    `shared`, else on the Service's own group) beside the backend group; then the `extra` groups."""

    named: tuple[str, ...]
    extra: tuple[str, ...]
    shared: bool
    rules: frozenset[IngressRule]


def frontend_plan(config: LoadBalancerConfig, lb_type: str) -> FrontendPlan:
    return FrontendPlan(
        tuple(config.security_groups),
        tuple(config.extra_security_groups),
        open_to_all(config, lb_type),
        desired_lb_rules(config, lb_type),
    )
