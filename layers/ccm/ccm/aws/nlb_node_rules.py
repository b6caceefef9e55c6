"""The node rules of an NLB without security groups, made true on the node groups (decisions:
`nlb_node_rules_model`; writes: `security_group_rules.RuleWriter`, which tags each rule with the cluster tag, so only
rules we added are ever revoked).

Reads: the CIDR blocks of the NLB's subnets (one DescribeSubnets per subnet new to the execution environment), the
VPC's blocks for an internal NLB (one DescribeVpcs per environment), then the node groups (one read) when the rules
wanted differ from those this environment last made true for that NLB. Warm, unchanged: no call. A thorough pass
reads the node groups again (a rule revoked behind our back, or another NLB's shared rule gone with it, comes back).

Retiring them is `NodeAccess.revoke_node_access` (the LB deleted) and the sweeper's `revoke_stale_node_rules` (an LB
gone without its delete): the descriptions name the LB (`security_groups_model.lb_named_by`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from ccm.aws import nlb_node_rules_model as nm
from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.lbconfig import LoadBalancerConfig
from ccm.aws.nlb_model import NLBSpec
from ccm.aws.node_access import NodeAccess
from ccm.aws.security_group_rules import RuleWriter
from ccm.aws.security_groups_model import IngressRule
from ccm.contracts.cluster import Cluster

log = logging.getLogger(__name__)

_CACHE_MAX: Final = 512  # load balancers remembered (bounded memory)
SubnetIds = Sequence[str] | Callable[[], Sequence[str]]  # the NLB's subnets, or how to read them


class NlbNodeRules:
    def __init__(self, clients: AwsClients, cluster: Cluster, rules: RuleWriter, nodes: NodeAccess) -> None:
        self.clients = clients
        self.vpc_id = cluster.vpc_id
        self._cluster_tag = cluster.tag_key
        self._rules = rules
        self._nodes = nodes
        # lb name -> (the node groups, the rules last made present on them, whether the others were revoked too)
        self._applied: dict[str, tuple[tuple[str, ...], frozenset[IngressRule], bool]] = {}
        self._lb_subnets: dict[str, tuple[str, ...]] = {}  # lb name -> its subnets (fixed but by SetSubnets)
        self._subnet_cidrs: dict[str, tuple[str, ...]] = {}  # subnet id -> its IPv4 block
        self._vpc_cidrs: tuple[str, ...] | None = None

    def ensure(
        self,
        spec: NLBSpec,
        config: LoadBalancerConfig,
        subnet_ids: SubnetIds,
        thorough: bool = False,
        revoke: bool = True,
    ) -> str | None:
        """Converge every node group to the NLB's rules; a Warning's text when no node group is tagged.
        `subnet_ids`: the NLB's subnets, or how to read them (called only when this environment does not know).
        `revoke=False`: only add (before the listeners change: a replaced target group keeps serving on its port
        until its listener has moved; the pass calls again with `revoke=True` once it has)."""
        if callable(subnet_ids):
            known = self._lb_subnets.get(spec.name)
            subnets = known if known is not None else tuple(subnet_ids())
        else:
            subnets = tuple(subnet_ids)
        self._remember(self._lb_subnets, spec.name, subnets)
        dualstack = spec.ip_address_type == "dualstack"
        vpc = self._vpc_blocks() if config.internal else ()
        clients = nm.client_ranges(config.source_range_cidrs, config.internal, dualstack, vpc)
        desired = nm.desired_node_rules(spec, clients, self._cidrs_of(subnets))
        # Keyed by the node groups too (cached ids: no call warm): a replaced node group gets the rules again.
        made = self._applied.get(spec.name)
        node_ids = tuple(sorted(self._nodes.node_group_ids()))
        if not thorough and made is not None and made[:2] == (node_ids, desired) and (made[2] or not revoke):
            return None  # the warm path: no call
        groups = self._nodes.read_node_groups()
        if not groups:
            message = m.untagged_node_groups_message(self._cluster_tag, self.vpc_id, [])
            log.warning("%s: %s", spec.name, message)
            return message
        complete = True  # nothing of the LB's left beside what it wants
        for group in groups:
            group_id = str(group["GroupId"])
            current = m.rules_from_permissions(group.get("IpPermissions", []))
            authorize, stale = nm.plan_node_rules(current, desired, spec.name)
            # Authorize first: a changed port or range is never closed to both the old and the new.
            self._rules.authorize(group_id, authorize, tags=m.node_rule_tags(self._cluster_tag))
            if revoke:
                self._rules.revoke_tagged(group_id, stale)
            complete = complete and (revoke or not stale)
        node_ids = tuple(sorted(str(g["GroupId"]) for g in groups))
        self._remember(self._applied, spec.name, (node_ids, desired, complete))
        return None

    def forget(self, lb_name: str) -> None:
        """The LB's rules were retired (its delete): nothing is remembered as made true for it."""
        self._applied.pop(lb_name, None)
        self._lb_subnets.pop(lb_name, None)

    def forget_all(self) -> None:
        """The node groups are read again (replaced or forgotten): so are the rules on them."""
        self._applied.clear()

    def _cidrs_of(self, subnet_ids: Sequence[str]) -> list[str]:
        if missing := sorted(set(subnet_ids) - set(self._subnet_cidrs)):
            for subnet in self.clients.ec2.describe_subnets(SubnetIds=missing)["Subnets"]:
                self._remember(self._subnet_cidrs, str(subnet["SubnetId"]), (str(subnet["CidrBlock"]),))
        return [c for s in subnet_ids for c in self._subnet_cidrs.get(s, ())]

    def _vpc_blocks(self) -> tuple[str, ...]:
        """The VPC's associated CIDR blocks, IPv4 and IPv6 (the clients of an internal NLB)."""
        if self._vpc_cidrs is None:
            vpc: dict[str, Any] = self.clients.ec2.describe_vpcs(VpcIds=[self.vpc_id])["Vpcs"][0]
            v4 = [a["CidrBlock"] for a in vpc.get("CidrBlockAssociationSet", []) if _associated(a, "CidrBlockState")]
            v6 = [
                a["Ipv6CidrBlock"]
                for a in vpc.get("Ipv6CidrBlockAssociationSet", [])
                if _associated(a, "Ipv6CidrBlockState")
            ]
            self._vpc_cidrs = tuple(v4 or [vpc["CidrBlock"]]) + tuple(v6)
        return self._vpc_cidrs

    @staticmethod
    def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
        if key not in cache and len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = value


def _associated(association: dict[str, Any], state_key: str) -> bool:
    return (association.get(state_key) or {}).get("State", "associated") == "associated"
