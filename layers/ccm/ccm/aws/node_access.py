"""Node access: the ingress rules on the cluster's node security groups that let load balancers reach the nodes.

With the shared backend group (`shared_groups`) that is ONE rule per node group for every LB; an LB with
bring-your-own groups keeps one rule from its first group, named after it. Retiring rules (an LB deleted, or the
sweeper finding rules of gone LBs) hands a rule whose source group still fronts another of our LBs over to that LB
instead of revoking it. Apart from `security_groups` (the LBs' own groups), which reaches it through
`SecurityGroups`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.node_groups import NodeGroups
from ccm.aws.security_group_rules import RuleWriter
from ccm.aws.security_groups_model import IngressRule, stale_node_rules
from ccm.aws.shared_groups import SharedGroups
from ccm.contracts.cluster import Cluster

log = logging.getLogger(__name__)


class NodeAccess:
    def __init__(self, clients: AwsClients, cluster: Cluster, rules: RuleWriter, shared: SharedGroups) -> None:
        self.clients = clients
        self.vpc_id = cluster.vpc_id
        self.cluster_name = cluster.name
        self._cluster_tag = cluster.tag_key
        self._vpc_filter = {"Name": "vpc-id", "Values": [cluster.vpc_id]}
        self._rules = rules
        self.shared = shared
        self._node_groups = NodeGroups(clients, cluster, shared.forget)

    def ensure_node_access(
        self, lb_group_ids: list[str], lb_name: str, service_uid: str, instance_ids: Collection[str] = ()
    ) -> str | None:
        """ONE rule per LB on each node group: all traffic from lb_group_ids[0], described with the LB's name.
        0 mutating calls when present; a rule of this LB from another source (its groups changed) is retired.
        Returns a warning for the Service when no node group carries the cluster tag (the LB cannot reach the
        nodes): it names the groups of the member instances `instance_ids` (one read, only in that case)."""
        if not lb_group_ids:
            raise ValueError("ensure_node_access needs the load balancer's security groups")
        backend = self.shared.cached(m.ROLE_BACKEND)
        shared = backend is not None and backend in lb_group_ids
        if shared and self.shared.has_backend_rule(str(backend)):
            return None  # the warm path: no call
        groups = self.read_node_groups()
        if not groups:
            instance_groups: list[list[str]] = []
            if instance_ids:
                for page in self.clients.ec2.get_paginator("describe_instances").paginate(
                    InstanceIds=sorted(instance_ids)
                ):
                    instance_groups += [
                        [str(g["GroupId"]) for g in i.get("SecurityGroups", [])]
                        for r in page["Reservations"]
                        for i in r["Instances"]
                    ]
            message = m.untagged_node_groups_message(self._cluster_tag, self.vpc_id, instance_groups)
            log.warning("%s: %s", lb_name, message)
            return message
        if shared and backend is not None:
            for group in groups:
                current = m.rules_from_permissions(group.get("IpPermissions", []))
                authorize = m.plan_backend_access(current, backend, self.cluster_name)
                self._rules.authorize(str(group["GroupId"]), authorize, tags=m.node_rule_tags(self._cluster_tag))
            self.shared.remember_backend_rule(backend)
            return None
        node_ids = {str(g["GroupId"]) for g in groups}
        retire: dict[str, list[IngressRule]] = {}
        for group in groups:
            rules = m.rules_from_permissions(group.get("IpPermissions", []))
            authorize, stale = m.plan_node_access(rules, lb_group_ids[0], lb_name, service_uid, node_ids)
            self._rules.authorize(str(group["GroupId"]), authorize, tags=m.node_rule_tags(self._cluster_tag))
            if stale:
                retire[str(group["GroupId"])] = stale
        self._retire(retire, {lb_name})
        return None

    def learn_cluster_groups(self) -> bool:
        """A new execution environment's first need of the shared groups: ONE read of the VPC's cluster-tagged
        groups teaches their ids, the node group (when its tags name it) and whether it holds the backend rule,
        which one by one took 4 reads (backend, frontend, node discovery, node rules) before the first create. True:
        it scanned (`SharedGroups.group_id(scanned=True)` then creates what it did not find without another read)."""
        scanned = self._node_groups.scan()
        self.shared.learn(scanned)
        node_groups = self._node_groups.learn(scanned)
        backend = self.shared.cached(m.ROLE_BACKEND)
        if (
            backend is not None
            and node_groups
            and not any(
                m.plan_backend_access(m.rules_from_permissions(g.get("IpPermissions", [])), backend, self.cluster_name)
                for g in node_groups
            )
        ):
            self.shared.remember_backend_rule(backend)
        return True

    def revoke_node_access(self, lb_name: str, lb_group_id: str | None) -> None:
        """Retire the node rules named after the LB, and any from its managed group `lb_group_id`."""
        groups = self.read_node_groups()
        node_ids = {str(g["GroupId"]) for g in groups}
        retire: dict[str, list[IngressRule]] = {}
        for group in groups:
            current = m.rules_from_permissions(group.get("IpPermissions", []))
            if rules := m.rules_for_lb(current, lb_name, lb_group_id, node_ids):
                retire[str(group["GroupId"])] = rules
        # The managed group serves this LB only: no need to look for other users of it.
        self._retire(retire, {lb_name}, exclusive={lb_group_id} if lb_group_id else set())

    def revoke_stale_node_rules(self, live: Callable[[set[str]], Collection[str]]) -> list[IngressRule]:
        """For the sweeper: node rules named after an LB that no longer exists are retired (revoked, or handed
        to another of our LBs sharing the source group). `live(names)` returns those of the names that exist.
        Returns the stale rules found."""
        groups = self.read_node_groups()
        node_ids = {str(g["GroupId"]) for g in groups}
        rules_of = {
            str(g["GroupId"]): [
                r for r in m.rules_from_permissions(g.get("IpPermissions", [])) if r.source_group not in node_ids
            ]
            for g in groups
        }
        named = {lb for rules in rules_of.values() for r in rules if (lb := m.lb_named_by(r.description))}
        if not named:
            return []
        alive = set(live(named))
        retire = {gid: stale for gid, rules in rules_of.items() if (stale := stale_node_rules(rules, alive))}
        self._retire(retire, named - alive)
        return [r for rules in retire.values() for r in rules]

    def node_group_ids(self) -> tuple[str, ...]:
        """The cluster's node security groups (`ccm.aws.node_groups`), cached per execution environment."""
        return self._node_groups.ids()

    def forget_node_groups(self) -> None:
        """Forget the node groups and the shared groups (ids, the backend rule): all read again on next need."""
        self._node_groups.forget()

    def read_node_groups(self) -> list[dict[str, Any]]:
        """The node groups as DescribeSecurityGroups answers (rules included): one read; [] when none is tagged."""
        return self._node_groups.read()

    def _retire(
        self, rules_by_group: Mapping[str, list[IngressRule]], retiring: set[str], exclusive: Collection[str] = ()
    ) -> None:
        """Revoke these node rules, except those whose source group still fronts another of our LBs: relabel."""
        sources = sorted(
            {r.source_group for rules in rules_by_group.values() for r in rules if r.source_group} - set(exclusive)
        )
        users: dict[str, set[str]] = {}
        if sources:
            for page in self.clients.ec2.get_paginator("describe_network_interfaces").paginate(
                Filters=[self._vpc_filter, {"Name": "group-id", "Values": sources}]
            ):
                for gid, lbs in m.lb_names_of_enis(page["NetworkInterfaces"]).items():
                    users.setdefault(gid, set()).update(lbs)
        for group_id, rules in rules_by_group.items():
            revoke, relabel = m.plan_retire(rules, retiring, users)
            # A rule from a managed group that is going away is revoked whatever made it (the group cannot be
            # deleted while referenced); any other only if we tagged it when adding it.
            self._rules.revoke(group_id, [r for r in revoke if r.source_group in exclusive])
            self._rules.revoke_tagged(group_id, [r for r in revoke if r.source_group not in exclusive])
            if relabel:
                log.info("node rules of %s handed over: %s", sorted(retiring), [r.description for r in relabel])
                self.clients.ec2.update_security_group_rule_descriptions_ingress(
                    GroupId=group_id, IpPermissions=m.to_permissions(relabel)
                )
