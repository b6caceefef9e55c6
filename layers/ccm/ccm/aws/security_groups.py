"""Security groups of load balancers (NLB and Classic ELB) and the node rules that let them reach the nodes.

API (used by both drivers; the pure part is in `security_groups_model`, the node rules' I/O in `node_access`):

- `IngressRule(protocol, from_port, to_port, cidr=None, source_group=None)` — one rule as AWS identifies it
  (protocol "tcp" | "udp" | "icmp" | "icmpv6" | "-1"; ports -1 for "-1"; ICMP type/code in the ports). It also
  carries a `description` that never takes part in comparisons.
- `desired_lb_rules(config, lb_type) -> frozenset[IngressRule]` — listener ports x source ranges (+ ICMP 3/4 on a
  CLB; IPv6 ranges only on a dualstack NLB); empty with bring-your-own groups.
- `plan_rules(current, desired) -> (to_authorize, to_revoke)` — pure.
- `SecurityGroups(clients, cluster)`:
  - `ensure_lb_group(lb_name, service, config, lb_type, extra_tags) -> list[str]` — the group ids for the LB: the
    `security-groups` annotation's groups (used as they are, never modified), or [the shared default frontend
    (default source ranges) or our per-LB group `k8s-elb-<lb_name>` (source ranges), the shared backend group]
    (`ccm.aws.shared_groups`); then the `extra-security-groups`.
  - `ensure_node_access(lb_group_ids, lb_name, service_uid)` — with the backend group: its ONE rule on the node
    group(s), for all LBs (cached: no call warm); with bring-your-own groups: one rule from `lb_group_ids[0]`.
  - `retire_replaced(lb_name, uid, attached, group_ids, thorough)` — migration of an LB of the previous design:
    its own node rule and (unless still its frontend) its group go once it carries `group_ids`.
  - `ensure_nlb_node_rules(spec, config, subnets, thorough)` — an NLB without groups' CIDR node rules.
  - `revoke_node_access(lb_name, lb_group_id)` — retire the node rules of that LB.
  - `delete_lb_group(lb_name, service_uid)` — retire its node rules, then delete the managed group; raises
    RetryError while AWS still reports a dependency. Call it once no LB of that name (NLB or CLB: they share
    the group) is left; also right for BYO LBs.
  - `revoke_stale_node_rules(live)` — for the sweeper: `live(names)` answers which of the named LBs exist.

Decisions:
- Node rule scope: all protocols from the backend group (or the bring-your-own LB's group), as cloud-provider-aws
  does for CLBs. Only the LB carries that
  group and an LB only opens connections to its targets' traffic and health-check ports, so nothing wider is
  opened in practice, and a port change never touches the node group: one rule per LB, whatever its ports. An NLB
  with a security group is matched by target rules that reference that group even with client-IP preservation.
- The rule's description is `serverless-ccm: from load balancer <lb> (service <uid>)` and the rule carries the
  cluster tag (`security_group_rules`); a rule is revoked by name only if it has both (by rule id), so upstream's,
  hand-made and look-alike rules stay; a rule from the LB's own managed group is revoked whatever made it. A node
  group's own self-reference is never touched.
- A bring-your-own group shared by several Services yields one node rule (AWS keeps one per source): when its LB
  goes, the rule is handed to another of our LBs still using the group (found through the group's ELB network
  interfaces) by relabelling it, instead of being revoked under the other Service's feet (upstream revokes it).
- Node groups (cached per execution environment, 30 min): the cluster-tagged groups of the VPC that are not LB
  groups; if exactly one, that one (1 read); otherwise cloud-provider-aws's per-instance choice over the
  cluster-tagged instances of the VPC (`choose_node_groups`). Untagged node groups cannot be changed under the
  tag-conditioned IAM policy; tag them.
- Managed group tags (cluster=owned, service name, service uid, plus `extra_tags`) are set on creation only
  (IAM allows CreateTags only with CreateSecurityGroup); later tag edits do not reach an existing group.
- Every Describe is filtered by VPC, name or tag, or names its ids: never a region-wide listing.

Calls (warm: the shared ids and the backend rule cached): ensure_lb_group with default ranges 0; with source
ranges converged 1 read, created 1 read + CreateSecurityGroup + 1 Authorize, a range change 1 read + at most 1
Authorize + 1 Revoke. ensure_node_access 0 (bring-your-own: 1 read, +1 Authorize per node group to add). Cold, once
per execution environment: 1 read of the VPC's cluster-tagged groups (`NodeAccess.learn_cluster_groups`: both shared
groups, the node group when its tags name it, and its backend rule); then only what it did not settle: a shared group
not found is created (+ 1 Authorize for the frontend), node groups not named by tags 1-2 reads + 1 read, + 1
Authorize per node group lacking the backend rule. delete_lb_group: 0 for an LB seen
carrying only the shared groups; else 2 reads + DeleteSecurityGroup (+ Revoke of a per-LB node rule).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.lbconfig import LoadBalancerConfig
from ccm.aws.nlb_model import NLBSpec
from ccm.aws.nlb_node_rules import NlbNodeRules, SubnetIds
from ccm.aws.node_access import NodeAccess
from ccm.aws.parallel import in_parallel
from ccm.aws.security_group_rules import CONFLICT_RETRY_SECONDS, RuleWriter
from ccm.aws.security_groups_model import IngressRule, desired_lb_rules, plan_rules, stale_node_rules
from ccm.aws.shared_groups import SharedGroups
from ccm.contracts.cloud import CloudStateError, InvalidServiceConfig, KubeObject, RetryError
from ccm.contracts.cluster import Cluster

__all__ = ["IngressRule", "SecurityGroups", "desired_lb_rules", "plan_rules", "stale_node_rules"]

log = logging.getLogger(__name__)
T = TypeVar("T")

DELETE_RETRY_SECONDS: Final = 15  # ENIs of a deleted LB hold its group for a minute or two
HIDDEN_RETRY_SECONDS: Final = 5  # EC2 read-after-create lag: seconds
READ_AFTER_CREATE_SECONDS: Final = 300.0  # well past any read-after-create lag AWS shows
UNTAGGED_NODE_GROUP: Final = "NodeSecurityGroupNotTagged"  # Warning reason: the LB cannot reach the nodes
_SEEN_MAX: Final = 512  # load balancers whose groups were seen right before their delete (bounded memory)


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


class SecurityGroups:
    def __init__(self, clients: AwsClients, cluster: Cluster, any_named_group: bool = False) -> None:
        self.clients = clients
        # The security-groups / extra-security-groups annotations get node access for the groups they name: by
        # default only groups carrying the cluster tag, so a Service author cannot open the nodes to any group of
        # the VPC (template parameter AnnotationSecurityGroups=any lifts it).
        self.any_named_group = any_named_group
        self.cluster = cluster
        self.vpc_id = cluster.vpc_id
        self.cluster_name = cluster.name
        self._cluster_tag = cluster.tag_key
        self._vpc_filter = {"Name": "vpc-id", "Values": [cluster.vpc_id]}
        self._rules = RuleWriter(clients, self._cluster_tag, self.forget_node_groups)
        self.shared = SharedGroups(clients, cluster, self._rules)
        self._nodes = NodeAccess(clients, cluster, self._rules, self.shared)
        self._nlb_rules = NlbNodeRules(clients, cluster, self._rules, self._nodes)  # NLBs without groups
        self._seen: dict[str, tuple[str, ...]] = {}  # lb name -> its groups, read right before deleting it

    # -- the load balancer's groups --------------------------------------------------------------------------------
    def needs_cluster_scan(self, config: LoadBalancerConfig) -> bool:
        """Would `ensure_lb_group` start with a read of the cluster's groups (a new environment, shared groups)?"""
        return not config.security_groups and self.shared.cached(m.ROLE_BACKEND) is None

    def beside(self, task: Callable[[], T], config: LoadBalancerConfig) -> tuple[T, bool]:
        """Before a create: `task` (subnet discovery) and, when a new environment's `ensure_lb_group` would start
        with it, the read of the cluster's groups (`NodeAccess.learn_cluster_groups`), both at once
        (ccm.aws.parallel). (task's result, scanned: pass it on as `ensure_lb_group(scanned=...)`)"""
        if not self.needs_cluster_scan(config):
            return task(), False
        result, scanned = in_parallel(self.clients.counter, task, self._nodes.learn_cluster_groups)
        return result, bool(scanned)

    def ensure_lb_group(
        self,
        lb_name: str,
        service: KubeObject,
        config: LoadBalancerConfig,
        lb_type: str,
        extra_tags: dict[str, str],
        scanned: bool = False,
        plan: m.FrontendPlan | None = None,
    ) -> list[str]:
        """The SG ids to attach to the LB: bring-your-own groups (annotation security-groups, used as is, never
        modified) or our managed group `k8s-elb-<lb_name>` (created with its tags via TagSpecifications, rules
        converged), then extra-security-groups. Idempotent; finds its group by name + VPC + cluster tag.
        `scanned`: `learn_cluster_groups` read the cluster's groups just before. `plan`: the pass's model's
        (`m.frontend_plan(config, lb_type)` when not given)."""
        plan = plan or m.frontend_plan(config, lb_type)
        extra = list(plan.extra)
        self._check_named_groups([*plan.named, *extra])
        if plan.named:
            # Bring-your-own groups, as before, without the backend group: the author chose what the LB carries
            # (and an LB carries at most 5), their first group keeps its node rule, and Services sharing one
            # group share that rule (one per source), so they do not grow the node group per LB either.
            return _unique([*plan.named, *extra])
        # A new environment: one read instead of four (learn_cluster_groups).
        scanned = scanned or (self.shared.cached(m.ROLE_BACKEND) is None and self._nodes.learn_cluster_groups())
        backend = self.shared.group_id(m.ROLE_BACKEND, scanned)
        if plan.shared:
            # The listener group of its port set: exactly its listeners, open to all (ccm.aws.frontend_model).
            listeners = self.shared.listener_group(plan.rules, scanned)
            return _unique([listeners, backend, *extra])
        group = self._managed_group(lb_name)
        if group is None:
            group = self._create_managed_group(lb_name, service, extra_tags)
        else:
            meta = service.get("metadata", {})
            self._claim(group, str(meta.get("uid", "")), f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        group_id = str(group["GroupId"])
        current = m.rules_from_permissions(group.get("IpPermissions", []))
        authorize, revoke = plan_rules(current, plan.rules)
        # Authorize before revoking: a changed range is never briefly closed to both the old and the new clients.
        try:
            self._rules.authorize(group_id, authorize, lb_rules=True)
        except CloudStateError:
            if not revoke:
                raise
            # Near the rules quota the old and new rules together do not fit: revoke first (the changed ranges
            # are closed for a moment), then authorize; a refusal now is the new rules alone not fitting.
            log.warning(
                "security group %s: at the rules quota, revoking %d rules before authorizing", group_id, len(revoke)
            )
            self._rules.revoke(group_id, revoke)
            self._rules.authorize(group_id, authorize, lb_rules=True)
            return _unique([group_id, backend, *extra])
        self._rules.revoke(group_id, revoke)
        return _unique([group_id, backend, *extra])

    def before_lb_delete(self, lb: Mapping[str, Any]) -> None:
        """Call before deleting a load balancer (either API's description). EC2 reads are eventually consistent: a
        Service deleted moments after its load balancer was created may not find its just-created group by name,
        and delete_lb_group would conclude "nothing to delete" and leak it. The load balancer is the one durable
        record of its groups, so it stays until they are readable (RetryError). Only a load balancer younger than
        READ_AFTER_CREATE_SECONDS costs the read: its groups were created before it."""
        attached = [str(g) for g in lb.get("SecurityGroups") or []]
        if lb.get("LoadBalancerName"):
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            self._seen[str(lb["LoadBalancerName"])] = tuple(attached)
        created = lb.get("CreatedTime")
        if not attached or not isinstance(created, datetime) or self.shared.is_shared(attached):
            return  # the shared groups were made long before, and no delete of this LB touches them
        if (datetime.now(created.tzinfo or UTC) - created).total_seconds() > READ_AFTER_CREATE_SECONDS:
            return
        filters = [self._vpc_filter, {"Name": "group-id", "Values": sorted(attached)}]
        seen = {str(g["GroupId"]) for g in self.clients.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]}
        if hidden := sorted(set(attached) - seen):
            raise RetryError(
                f"security group {', '.join(hidden)} of {lb.get('LoadBalancerName')} is not readable yet (EC2 reads "
                "are eventually consistent); the load balancer is deleted once it is",
                delay_seconds=HIDDEN_RETRY_SECONDS,
            )

    def delete_lb_group(self, lb_name: str, service_uid: str) -> None:
        """Retire the node rules of the LB, then delete its managed group (none with bring-your-own groups).
        A DependencyViolation (the LB's ENIs hold the group a while after the LB is deleted) raises RetryError so
        the queue comes back; a group already gone is done. No call when the LB was just seen (before_lb_delete)
        carrying only the shared groups: it had no group or node rule of its own (a leftover of an interrupted
        migration is the sweeper's: its group is tagged with a Service that is gone, its rule names a gone LB)."""
        if self.shared.is_shared(list(self._seen.pop(lb_name, ()))):
            return
        self._delete_managed(lb_name, service_uid, self._managed_group(lb_name))

    def _delete_managed(self, lb_name: str, service_uid: str, group: Mapping[str, Any] | None) -> None:
        group_id = str(group["GroupId"]) if group else None
        self.revoke_node_access(lb_name, group_id)
        if group is None or group_id is None:
            return
        owner = {t["Key"]: t["Value"] for t in group.get("Tags", [])}.get(names.SERVICE_UID_TAG)
        if owner not in (None, service_uid):
            log.warning(
                "security group %s of %s belongs to service %s, not %s: kept", group_id, lb_name, owner, service_uid
            )
            return
        self._claim(group, service_uid)  # cloud-provider-aws's group: IAM deletes only UID-tagged groups
        try:
            self.clients.ec2.delete_security_group(GroupId=group_id)
        except ClientError as err:
            code = error_code(err)
            if code == "InvalidGroup.NotFound":
                return
            if code == "DependencyViolation":
                raise RetryError(
                    f"security group {group_id} of {lb_name} is still in use (the load balancer's network "
                    "interfaces are released a while after it is deleted)",
                    delay_seconds=DELETE_RETRY_SECONDS,
                ) from err
            raise
        log.info("deleted security group %s of %s", group_id, lb_name)

    def _claim(self, group: Mapping[str, Any], service_uid: str, service_key: str = "") -> None:
        """Adoption: a managed group cloud-provider-aws made (cluster tag, no UID tag) gets our UID tag (and the
        Service's name when known: upstream tags its groups with the cluster only), the tags IAM lets us add to an
        existing group (template: AdoptClusterSecurityGroups), so that deleting it later is allowed
        (DeleteOwnSecurityGroups needs the UID tag). Free when it already carries one (no call)."""
        tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
        if not service_uid or names.SERVICE_UID_TAG in tags or self._cluster_tag not in tags:
            return
        claim = {names.SERVICE_UID_TAG: service_uid}
        if service_key and names.SERVICE_NAME_TAG not in tags:
            claim[names.SERVICE_NAME_TAG] = service_key
        self.clients.ec2.create_tags(Resources=[str(group["GroupId"])], Tags=names.as_tag_list(claim))
        log.info("adopted security group %s: tagged %s", group["GroupId"], names.SERVICE_UID_TAG)

    def _check_named_groups(self, group_ids: list[str]) -> None:
        """Before any change: the annotations' groups exist in our VPC and (by default) carry the cluster tag."""
        if not group_ids:
            return
        try:
            found = self.clients.ec2.describe_security_groups(GroupIds=_unique(group_ids))["SecurityGroups"]
        except ClientError as err:
            if error_code(err) == "InvalidGroupId.Malformed":  # only the author can fix a malformed id
                raise InvalidServiceConfig(
                    f"security-groups / extra-security-groups: {', '.join(group_ids)}: {error_code(err)}"
                ) from err
            if error_code(err) == "InvalidGroup.NotFound":  # may be created later (ccm.aws.refusals): Warning + retry
                raise CloudStateError(
                    f"security-groups / extra-security-groups: {', '.join(group_ids)}: {error_code(err)}"
                ) from err
            raise
        if missing := sorted(set(group_ids) - {str(g["GroupId"]) for g in found}):
            raise CloudStateError(f"security-groups / extra-security-groups: {', '.join(missing)}: not found")
        refused = sorted(
            str(g["GroupId"])
            for g in found
            if g.get("VpcId") != self.vpc_id
            or not (self.any_named_group or any(t["Key"] == self._cluster_tag for t in g.get("Tags", [])))
        )
        if refused:
            raise InvalidServiceConfig(
                f"security-groups / extra-security-groups: {', '.join(refused)} "
                + (
                    "not in " + self.vpc_id
                    if self.any_named_group
                    else f"not tagged {self._cluster_tag} in {self.vpc_id}"
                )
                + "; only such groups may be given access to the nodes"
            )

    def _managed_group(self, lb_name: str, *, tagged: bool = True) -> dict[str, Any] | None:
        filters = [self._vpc_filter, {"Name": "group-name", "Values": [m.managed_group_name(lb_name)]}]
        if tagged:
            filters.append({"Name": "tag-key", "Values": [self._cluster_tag]})
        # A group name is unique within a VPC: one page at most.
        groups: list[dict[str, Any]] = self.clients.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
        return groups[0] if groups else None

    def _create_managed_group(self, lb_name: str, service: KubeObject, extra_tags: Mapping[str, str]) -> dict[str, Any]:
        meta = service.get("metadata", {})
        namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        # Ownership tags win over additional tags of the same key (the parser refuses those anyway).
        tags = {**extra_tags, **names.resource_tags(self.cluster_name, namespace, name, uid)}
        group_name = m.managed_group_name(lb_name)
        try:
            created = self.clients.ec2.create_security_group(
                GroupName=group_name,
                Description=f"Security group for Kubernetes ELB {lb_name} ({namespace}/{name})",
                VpcId=self.vpc_id,
                TagSpecifications=[{"ResourceType": "security-group", "Tags": names.as_tag_list(tags)}],
            )
        except ClientError as err:
            if error_code(err) != "InvalidGroup.Duplicate":
                raise
            found = self._managed_group(lb_name, tagged=False)
            if found and any(t["Key"] == self._cluster_tag for t in found.get("Tags", [])):
                return found  # created concurrently (e.g. a redelivered message): adopt it
            if found is None:
                # EC2 is eventually consistent: a group created a moment ago may not be readable yet.
                raise RetryError(
                    f"security group {group_name} exists but is not visible yet", CONFLICT_RETRY_SECONDS
                ) from err
            raise RuntimeError(
                f"security group {group_name} exists in {self.vpc_id} without the tag {self._cluster_tag}; "
                "delete or tag it"
            ) from err
        log.info("created security group %s (%s)", created["GroupId"], group_name)
        return {"GroupId": created["GroupId"], "IpPermissions": []}

    def retire_replaced(
        self, lb_name: str, service_uid: str, attached: Collection[str], group_ids: list[str], thorough: bool
    ) -> None:
        """Migration from one node rule per LB: once the LB carries `group_ids` (it carried `attached` before this
        pass), retire its own node rule and, unless it is still its frontend, delete its managed group
        (RetryError while AWS holds it). Only when its groups changed, or on a thorough pass (a retry completes
        an interrupted migration); free otherwise. Bring-your-own LBs keep their per-LB rule: nothing to do."""
        backend = self.shared.cached(m.ROLE_BACKEND)
        if backend is None or backend not in group_ids or (not thorough and set(attached) <= set(group_ids)):
            return
        dropped = sorted(set(attached) - set(group_ids))
        own = sorted(set(dropped) - self.shared.shared_among(dropped))  # before the legacy group leaves the cache
        if (legacy := self.shared.cached(m.ROLE_FRONTEND)) and legacy in dropped:
            self.shared.retire_legacy_frontend(legacy)  # it moved off the all-ports group: gone once no LB has it
        if not thorough and dropped and not own:
            return  # it only changed shared groups (a listener group for another): nothing of its own to retire
        group = self._managed_group(lb_name)
        if group is not None and str(group["GroupId"]) in group_ids:
            self.revoke_node_access(lb_name, str(group["GroupId"]))  # still its frontend: only the node rule goes
            return
        if group is None and own:
            group = self._replaced_group(lb_name, own)
        log.info("%s: on the shared groups; retiring its own node rule and group", lb_name)
        self._delete_managed(lb_name, service_uid, group)

    def _replaced_group(self, lb_name: str, replaced: list[str]) -> dict[str, Any] | None:
        """The LB's own group among those it carried before this pass, read by id: a name read may not see a group
        made moments ago (EC2 reads are eventually consistent; cloud-provider-aws may have just made it), and
        concluding "none" would leave it, and its node rule, behind. Not readable yet: RetryError."""
        filters = [self._vpc_filter, {"Name": "group-id", "Values": replaced}]
        found = self.clients.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
        if len(found) < len(replaced):
            raise RetryError(
                f"security group {', '.join(replaced)} of {lb_name} is not readable yet (EC2 reads are eventually "
                "consistent); it is retired once it is",
                delay_seconds=HIDDEN_RETRY_SECONDS,
            )
        for group in found:  # the legacy all-ports group, when this environment had not learnt its id
            if m.shared_role(group, self._cluster_tag) == m.ROLE_FRONTEND:
                self.shared.retire_legacy_frontend(str(group["GroupId"]))
        own = [g for g in found if g.get("GroupName") == m.managed_group_name(lb_name)]
        return own[0] if own else None

    # -- node access (ccm.aws.node_access) -------------------------------------------------------------------------
    def ensure_node_access(
        self, lb_group_ids: list[str], lb_name: str, service_uid: str, instance_ids: Collection[str] = ()
    ) -> str | None:
        """The node rule letting the LB reach the nodes; a Warning's text when no node group is tagged
        (NodeAccess.ensure_node_access)."""
        return self._nodes.ensure_node_access(lb_group_ids, lb_name, service_uid, instance_ids)

    def ensure_nlb_node_rules(
        self, spec: NLBSpec, config: LoadBalancerConfig, subnets: SubnetIds, thorough: bool, revoke: bool = True
    ) -> str | None:
        """An NLB without groups: its CIDR rules on the node groups (ccm.aws.nlb_node_rules); a Warning's text when
        no node group is tagged. `revoke=False`: only add (before its listeners change)."""
        return self._nlb_rules.ensure(spec, config, subnets, thorough, revoke)

    def revoke_node_access(self, lb_name: str, lb_group_id: str | None) -> None:
        """Retire the node rules named after the LB (an NLB without groups' CIDR rules too), and any from its
        managed group `lb_group_id`."""
        self._nlb_rules.forget(lb_name)
        self._nodes.revoke_node_access(lb_name, lb_group_id)

    def revoke_stale_node_rules(self, live: Callable[[set[str]], Collection[str]]) -> list[IngressRule]:
        """For the sweeper: retire node rules named after LBs that `live(names)` says are gone; returns them."""
        return self._nodes.revoke_stale_node_rules(live)

    def node_group_ids(self) -> tuple[str, ...]:
        """The cluster's node security groups (`ccm.aws.node_groups`), cached per execution environment."""
        return self._nodes.node_group_ids()

    def forget_node_groups(self) -> None:
        """Forget the node groups and the shared groups (ids, the backend rule): all read again on next need."""
        self._nlb_rules.forget_all()
        self._nodes.forget_node_groups()
