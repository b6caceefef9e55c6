"""The node rules of an NLB without security groups, as pure functions (plain data in, IngressRule set out).

An NLB created without groups (adopted, or made by an older version: AWS cannot add groups to it later) carries no
backend group, so the backend group's one node rule does not admit it. Its traffic and health checks reach the
nodes (`instance` targets) or the pods (`ip` targets; the VPC CNI puts pods in the nodes' groups by default) only
through CIDR rules on the node groups, as cloud-provider-aws (`updateInstanceSecurityGroupsForNLB`) and the AWS Load
Balancer Controller (`buildTargetGroupBindingNetworkingLegacy`) add them:

- client: each target group's target ports (instance: the NodePort; ip: the pods' ports from the EndpointSlices),
  its protocol(s), from the client ranges when the target sees the client's address (`preserve_client_ip`, AWS's
  default: on for instance targets and UDP, off for TCP/TLS ip targets), else from the NLB's subnets (the NLB's
  private addresses are then the source). Client ranges: the Service's source ranges; an internal NLB open to
  everything takes the VPC's CIDR blocks instead (the LBC's default: it is reachable only from inside).
- health: TCP on the health-check port (the traffic port unless overridden; healthCheckNodePort under Local) from
  the NLB's subnets, where its health checks come from; left out where a client rule from 0.0.0.0/0 on that TCP
  port already admits them (upstream leaves it out then too).
- mtu: ICMP 3/4 (ICMPv6 2/0) from each client range, for path-MTU discovery, when clients reach the target.

Rules carry a description naming the load balancer (`security_groups_model.lb_named_by` reads it), so deleting the
LB and the sweeper's stale-rule pass retire them like any node rule of ours.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Final

from ccm.aws.nlb_model import NLBSpec, TargetGroupSpec
from ccm.aws.security_groups_model import NODE_RULE_PREFIX, PATH_MTU, PATH_MTU_V6, IngressRule, lb_named_by

KINDS: Final = ("client", "health", "mtu")  # cloud-provider-aws's kinds: kubernetes.io/rule/nlb/<kind>=<lb>
_EVERYWHERE: Final = frozenset({"0.0.0.0/0", "::/0"})
_PROTOCOLS: Final[Mapping[str, tuple[str, ...]]] = {
    "TCP": ("tcp",),
    "TLS": ("tcp",),
    "UDP": ("udp",),
    "TCP_UDP": ("tcp", "udp"),
}


def rule_description(lb_name: str, kind: str) -> str:
    """`serverless-ccm: from load balancer <lb> (nlb <kind>)`: found by `lb_named_by` like every node rule of ours."""
    return f"{NODE_RULE_PREFIX}{lb_name} (nlb {kind})"


def client_ranges(
    source_ranges: Iterable[str], internal: bool, dualstack: bool, vpc_cidrs: Iterable[str]
) -> tuple[str, ...]:
    """Where the clients are: the source ranges (IPv6 ones only on a dualstack NLB, which alone receives IPv6); an
    internal NLB left open to everything is reachable only from its VPC, so the VPC's blocks (the LBC's default)."""
    ranges = {_net(c) for c in source_ranges if ":" not in c or dualstack}
    if internal and ranges and ranges <= _EVERYWHERE:
        ranges = {_net(c) for c in vpc_cidrs if ":" not in c or dualstack}
    return tuple(sorted(ranges))


def preserves_client_ip(tg: TargetGroupSpec) -> bool:
    """Does the target see the client's address? The `preserve_client_ip.enabled` attribute when set, else AWS's
    default (ELBv2 target group attributes: true for instance targets and for UDP/TCP_UDP, false for TCP/TLS ip)."""
    value = dict(tg.attributes).get("preserve_client_ip.enabled")
    if value is not None:
        return value.lower() == "true"
    return tg.target_type == "instance" or "UDP" in tg.protocol.upper()


def target_ports(tg: TargetGroupSpec) -> frozenset[int]:
    """The ports traffic reaches: the NodePort (instance), or every pod port among the ip targets."""
    return frozenset(t.port for t in tg.ip_targets) if tg.target_type == "ip" else frozenset({tg.port})


def desired_node_rules(spec: NLBSpec, clients: Iterable[str], lb_subnet_cidrs: Iterable[str]) -> frozenset[IngressRule]:
    """The CIDR rules each node group must hold for this NLB without groups (see the module's docstring).
    `clients`: `client_ranges(...)`; `lb_subnet_cidrs`: the CIDR blocks of the NLB's subnets (its private
    addresses: the source of its health checks, and of traffic to targets that do not see the client)."""
    client = rule_description(spec.name, "client")
    health = rule_description(spec.name, "health")
    mtu = rule_description(spec.name, "mtu")
    clients = sorted(set(clients))
    subnets = sorted({_net(c) for c in lb_subnet_cidrs if ":" not in c})  # target groups are IPv4 (docs/ip-targets.md)
    rules: set[IngressRule] = set()
    for listener in spec.listeners:
        tg = listener.target_group
        protocols = _PROTOCOLS.get(tg.protocol.upper(), ("tcp",))
        ports = target_ports(tg)
        preserved = preserves_client_ip(tg)
        sources = clients if preserved else subnets
        rules.update(
            IngressRule(p, port, port, cidr=c, description=client) for p in protocols for port in ports for c in sources
        )
        hc_ports = ports if tg.health.port == "traffic-port" else frozenset({int(tg.health.port)})
        for port in hc_ports:
            if not ("tcp" in protocols and port in ports and "0.0.0.0/0" in sources):
                rules.update(IngressRule("tcp", port, port, cidr=c, description=health) for c in subnets)
        if preserved and ports:
            rules.update(
                IngressRule("icmpv6", *PATH_MTU_V6, cidr=c, description=mtu)
                if ":" in c
                else IngressRule("icmp", *PATH_MTU, cidr=c, description=mtu)
                for c in clients
            )
    return frozenset(rules)


def plan_node_rules(
    current: Iterable[IngressRule], desired: Iterable[IngressRule], lb_name: str
) -> tuple[list[IngressRule], list[IngressRule]]:
    """(to authorize, to revoke) on one node group. A wanted rule is present whatever its description (one made by
    cloud-provider-aws, or another NLB's on the same port and range: AWS keeps one rule per source). To revoke: the
    CIDR rules named after this LB that are no longer wanted (ports or ranges changed)."""
    have, want = set(current), set(desired)
    mine = {r for r in have if r.cidr is not None and lb_named_by(r.description) == lb_name}
    return sorted(want - have, key=_sort_key), sorted(mine - want, key=_sort_key)


def _sort_key(rule: IngressRule) -> tuple[str, int, int, str]:
    return rule.protocol, rule.from_port, rule.to_port, rule.cidr or ""


def _net(cidr: str) -> str:
    return str(ipaddress.ip_network(cidr, strict=False))
