"""The NLB deployer (ccm.aws.deployer): the pass's model of an NLB made true in ELBv2, reading as little as it can.

Observe (`nlb_reads`) -> plan (`nlb_model.plan`, pure) -> apply (`nlb_writes`; adoption of cloud-provider-aws's NLBs
in `nlb_adoption`). This module is that flow and calls AWS only through those three; the security groups are the
security-group deployer's (ccm.aws.security_groups), called here.

A no-op reconcile only reads (`nlb_reads`). A thorough pass (retries after a crash, periodic resync, and every
delete) additionally asks the Resource Groups Tagging API for everything tagged with the Service's UID, so target
groups orphaned by a crash between two calls are found and deleted: nothing leaks.

Adoption (an NLB cloud-provider-aws made): before the first write on an existing NLB, the LB, its target groups and
the listeners the plan touches get our UID tag where they carry only the cluster tag (`nlb_adoption`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ccm.aws import frontend_model as fm
from ccm.aws import names
from ccm.aws import nlb_adoption as adoption
from ccm.aws import nlb_model as m
from ccm.aws import nlb_placement as placed
from ccm.aws import nlb_reads as reads
from ccm.aws import nlb_writes as writes
from ccm.aws import references as refs
from ccm.aws.clients import AwsClients
from ccm.aws.fixed_settings import FIXED_SETTING
from ccm.aws.ip_targets import IpTargetRegistrar
from ccm.aws.lbconfig import LoadBalancerConfig, validate_against_subnets
from ccm.aws.model import LoadBalancerModel
from ccm.aws.security_groups import UNTAGGED_NODE_GROUP, SecurityGroups
from ccm.aws.subnets import UNAVAILABLE_SUBNETS, SubnetChoice, node_zones, resolve_subnets
from ccm.aws.targets import REFUSED_TARGETS, refused_message
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    Applied,
    HostnamePublished,
    Ingress,
    KubeObject,
    LoadBalancerStatus,
    LoadBalancerWarning,
    PassFlags,
    Publish,
    RetryError,
)
from ccm.contracts.cluster import Claim, Cluster
from ccm.contracts.endpoints import IpTarget, ServicePortKey
from ccm.contracts.readiness_gates import TargetHealth

log = logging.getLogger(__name__)


def _epoch(created: Any) -> float:
    """DescribeLoadBalancers' CreatedTime (a datetime in boto3) as epoch seconds; now when absent."""
    return created.timestamp() if isinstance(created, datetime) else time.time()


class NetworkLoadBalancers:
    def __init__(self, clients: AwsClients, cluster: Cluster, security_groups: SecurityGroups | None = None) -> None:
        self.clients = clients
        self.cluster = cluster
        self.security_groups = security_groups
        self.vpc_id = cluster.vpc_id
        self.references = refs.ReferenceChecker(clients, cluster.vpc_id)
        self.ip_targets = IpTargetRegistrar(clients)  # keeps the VPC's subnets for the environment's life

    def status_for_uid(self, uid: str) -> LoadBalancerStatus | None:
        lb = reads.describe_lb(self.clients, names.load_balancer_name(uid))
        return None if lb is None else LoadBalancerStatus((Ingress(hostname=lb["DNSName"]),))

    def deploy(self, model: LoadBalancerModel, flags: PassFlags, publish: Publish | None) -> LoadBalancerStatus:
        assert model.nlb is not None
        config, desired, uid, nodes = model.config, model.nlb, model.uid, model.nodes
        # A Service of our class seen for the first time cannot have an LB yet (see PassFlags.first_sight).
        fresh = flags.first_sight and not flags.thorough and model.of_our_class
        lb = None if fresh else reads.describe_lb(self.clients, desired.name)
        created = lb is None
        warnings: list[LoadBalancerWarning] = []
        placement: dict[str, Any] = {}
        scanned = False
        if lb is None:
            # Subnets and their EIPs / private IPs are checked before the first write: a refusal changes nothing.
            choice, scanned = self._subnets_and_groups(config, nodes, flags)
            cidrs = self._cidrs(choice) if config.private_ipv4_addresses else None
            validate_against_subnets(config, choice.ids, cidrs)
            placement = placed.placement(config, choice.ids, cidrs or {})
            warnings += [LoadBalancerWarning(UNAVAILABLE_SUBNETS, choice.warning)] if choice.warning else []
        elif flags.check_attributes:
            wanted_subnets = self._subnets(config, nodes).ids if config.subnets else None
            warnings = [
                LoadBalancerWarning(FIXED_SETTING, w) for w in placed.placement_warnings(lb, config, wanted_subnets)
            ]
        # Observed before any write (groups included), so references the listeners already use are not re-read.
        observed = None if lb is None else reads.observe(self.clients, lb, uid, flags, desired)
        used = refs.in_use(lb, (ls.certificate for ls in observed.listeners) if observed else ())
        wanted = refs.wanted(config, creating=lb is None, placement_fixed=True)
        if lb is not None and not lb.get("SecurityGroups"):  # created without groups: they would never be used
            wanted = replace(wanted, security_groups=frozenset())
        self.references.verify(wanted - used, config)
        without_groups = bool(self.security_groups and flags.check_attributes and lb and not lb.get("SecurityGroups"))
        group_ids, unreachable, swapped = self._ensure_groups(model, lb, flags, scanned)
        warnings += [LoadBalancerWarning(UNTAGGED_NODE_GROUP, unreachable)] if unreachable else []
        if lb is None:
            lb = writes.create_lb(self.clients, self.vpc_id, desired, placement, group_ids)
            if publish is not None:
                publish(LoadBalancerStatus((Ingress(hostname=lb["DNSName"]),)))
                if flags.hostname_first:  # crash-safe: the next pass finds the LB by name and makes the rest
                    raise HostnamePublished(desired.name)
            observed = reads.observe(self.clients, lb, uid, flags, desired, created)
        assert observed is not None
        operations = m.plan(desired, observed)
        if not created:
            # Also when converged: the checkpoint lets later passes delete by ARN, which IAM allows only on
            # resources carrying our UID tag (adoption tags them here once).
            adoption.claim(self.clients, uid, self.cluster.name, observed, operations)
        ip_warnings: list[tuple[str, str]] = []
        refused, arn_by_name = writes.apply_plan(
            self.clients, self.vpc_id, operations, observed, desired, self.ip_targets, ip_warnings
        )
        warnings += [LoadBalancerWarning(reason, message) for reason, message in ip_warnings]
        if swapped is not None:
            self._finish_swap(lb, group_ids, swapped, uid, flags)
        if without_groups:  # the listeners moved: the rules of replaced target groups' ports go (nlb_node_rules)
            assert self.security_groups is not None
            self.security_groups.ensure_nlb_node_rules(desired, config, reads.lb_subnet_ids(lb), flags.thorough)
        warnings += [LoadBalancerWarning(REFUSED_TARGETS, refused_message(refused))] if refused else []
        applied = Applied(
            uid=uid,
            service_key=model.key,
            lb_type="nlb",
            fingerprint=model.fingerprint,
            lb_id=lb["LoadBalancerArn"],
            hostname=lb["DNSName"],
            target_groups=tuple((arn_by_name[ls.target_group.name], ls.target_group.port) for ls in desired.listeners),
            targets=model.instances - frozenset(refused),
            security_groups=tuple(group_ids or lb.get("SecurityGroups") or ()),
            created_at=_epoch(lb.get("CreatedTime")),
            # Refused targets and an unreachable node group are retried by the next pass, which must be full.
            verified_at=0.0 if refused or unreachable else time.time(),
        )
        return LoadBalancerStatus(
            (Ingress(hostname=lb["DNSName"]),), warnings=tuple(warnings), notices=model.notices, applied=applied
        )

    def ip_target_health(self, model: LoadBalancerModel) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        assert model.nlb is not None
        lb = reads.describe_lb(self.clients, model.name)
        if lb is None:
            return {}
        observed = reads.observe(self.clients, lb, model.uid, PassFlags(check_attributes=False))
        by_name = {tg.name: tg for tg in observed.target_groups.values()}
        health: dict[tuple[ServicePortKey, IpTarget], TargetHealth] = {}
        for ls in model.nlb.listeners:
            have = by_name.get(ls.target_group.name)
            if ls.target_group.target_type != "ip" or have is None:
                continue
            for target, seen in m.ip_health(have).items():
                health.update({(key, target): seen for key in ls.target_group.service_ports})
        return health

    def apply_ip_targets(self, applied: Applied, model: LoadBalancerModel) -> None:
        """An `ip` change of endpoints by the checkpoint's target-group ARNs: one DescribeTargetHealth per group,
        then only the difference (deregister first). RetryError when a stored group is gone (a full pass follows).
        An NLB without groups: its node rules follow the pods' ports (added before, revoked after; no call while
        unchanged), so a Service made before its pods opens their port when they come."""
        groups = [(arn, tg.ip_targets) for arn, tg in self._ip_groups(applied, model)]
        cross_zone = model.nlb is not None and writes.cross_zone(model.nlb)
        self._ip_node_rules(applied, model, revoke=False)
        for reason, message in writes.sync_ip_targets_by_arn(self.ip_targets, self.vpc_id, groups, cross_zone):
            log.warning("%s: %s: %s", model.key, reason, message)
        self._ip_node_rules(applied, model, revoke=True)

    def _ip_node_rules(self, applied: Applied, model: LoadBalancerModel, revoke: bool) -> None:
        if self.security_groups is None or applied.security_groups or model.nlb is None:
            return

        def subnets() -> list[str]:
            lb = reads.describe_lb(self.clients, model.name)
            return reads.lb_subnet_ids(lb) if lb is not None else []

        if warning := self.security_groups.ensure_nlb_node_rules(model.nlb, model.config, subnets, False, revoke):
            log.warning("%s: %s: %s", model.key, UNTAGGED_NODE_GROUP, warning)

    def ip_health_by_arn(
        self, applied: Applied, model: LoadBalancerModel
    ) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        """The `ip` targets' health by the checkpoint's ARNs: one DescribeTargetHealth per group."""
        health: dict[tuple[ServicePortKey, IpTarget], TargetHealth] = {}
        for arn, tg in self._ip_groups(applied, model):
            for target, seen in self.ip_targets.observe(arn).items():
                health.update({(key, target): seen for key in tg.service_ports})
        return health

    @staticmethod
    def _ip_groups(applied: Applied, model: LoadBalancerModel) -> list[tuple[str, m.TargetGroupSpec]]:
        """The checkpoint's ARN of each `ip` target group of the model (same listeners, in order: the fingerprints
        match)."""
        assert model.nlb is not None
        pairs = zip(applied.target_groups, model.nlb.listeners, strict=False)
        return [(arn, ls.target_group) for (arn, _), ls in pairs if ls.target_group.target_type == "ip"]

    # -- by the checkpoint ------------------------------------------------------------------------------------
    def active_hostname(self, applied: Applied) -> str | None:
        return reads.active_hostname(self.clients, applied.lb_id)

    def apply_targets(self, applied: Applied, add: frozenset[str], remove: frozenset[str]) -> list[str]:
        return writes.apply_targets_by_arn(self.clients, applied.target_groups, add, remove)

    def delete_applied(self, applied: Applied, confirmed: frozenset[str]) -> None:
        if applied.lb_id in confirmed or self.active_hostname(applied) is not None:
            writes.delete_lb(self.clients, applied.lb_id)
        for arn, _ in applied.target_groups:
            if arn in confirmed or reads.target_group_exists(self.clients, arn):
                writes.delete_target_group(self.clients, arn)

    def _subnets(self, config: LoadBalancerConfig, nodes: Sequence[KubeObject], creating: bool = False) -> SubnetChoice:
        return resolve_subnets(
            self.clients, self.vpc_id, config, self.cluster.name, node_zones(nodes), "NLB", creating=creating
        )

    def _subnets_and_groups(
        self, config: LoadBalancerConfig, nodes: Sequence[KubeObject], flags: PassFlags
    ) -> tuple[SubnetChoice, bool]:
        """For a creation: the subnets, and beside them what `_ensure_groups` reads first in a new environment
        (SecurityGroups.beside). (subnets, whether the groups were read)"""
        find = functools.partial(self._subnets, config, nodes, creating=True)
        if self.security_groups is None or not flags.check_attributes:
            return find(), False
        return self.security_groups.beside(find, config)

    def _cidrs(self, choice: SubnetChoice) -> dict[str, str]:
        """Subnet CIDRs for placing private IPs (subnets given by ID were not described yet: one call)."""
        if choice.cidrs is not None and set(choice.cidrs) == set(choice.ids):
            return choice.cidrs
        return reads.subnet_cidrs(self.clients, choice.ids)

    def _ensure_groups(
        self, model: LoadBalancerModel, lb: dict[str, Any] | None, flags: PassFlags, scanned: bool
    ) -> tuple[list[str], str | None, list[str] | None]:
        """Security groups (the security-group deployer, ccm.aws.security_groups): the frontend (the listener group
        of its port set, or its own for source ranges) and the shared backend group, whose one node rule serves
        every LB. An existing NLB whose groups change carries the old and the new ones while its listeners change
        (make before break: `frontend_model.interim_groups`), then only the new ones (`_finish_swap`). An NLB
        created without groups (AWS cannot add them later) keeps none: CIDR rules on the node groups admit its
        traffic and health checks instead (`SecurityGroups.ensure_nlb_node_rules`). (group ids, node-group warning,
        the groups it carried when they change, else None)"""
        if self.security_groups is None or not flags.check_attributes:
            return [], None, None
        if lb is not None and not lb.get("SecurityGroups"):
            assert model.nlb is not None
            subnets = reads.lb_subnet_ids(lb)
            # Only added here: the old rules go once the listeners have moved (deploy, after apply_plan).
            unreachable = self.security_groups.ensure_nlb_node_rules(
                model.nlb, model.config, subnets, flags.thorough, revoke=False
            )
            return [], unreachable, None
        group_ids = self.security_groups.ensure_lb_group(
            model.name, model.service, model.config, "nlb", dict(model.config.additional_tags), scanned, model.frontend
        )
        attached = list(lb.get("SecurityGroups") or []) if lb is not None else []
        swapped = None
        if lb is not None and sorted(attached) != sorted(group_ids):
            interim = fm.interim_groups(attached, group_ids)
            writes.set_security_groups(self.clients, lb["LoadBalancerArn"], list(interim or group_ids))
            swapped = attached if interim else None
        ids = [i for i in map(p.instance_id, model.nodes) if i]
        unreachable = self.security_groups.ensure_node_access(group_ids, model.name, model.uid, ids)
        if swapped is None:
            self.security_groups.retire_replaced(model.name, model.uid, attached, group_ids, flags.thorough)
        return group_ids, unreachable, swapped

    def _finish_swap(
        self, lb: dict[str, Any], group_ids: list[str], attached: list[str], uid: str, flags: PassFlags
    ) -> None:
        """The listeners changed under the old and the new groups: now only the new ones; then what the old ones
        were retires (its own group and node rule of the previous design, the legacy all-ports group)."""
        assert self.security_groups is not None
        writes.set_security_groups(self.clients, lb["LoadBalancerArn"], group_ids)
        self.security_groups.retire_replaced(lb["LoadBalancerName"], uid, attached, group_ids, flags.thorough)

    def deploy_targets(self, model: LoadBalancerModel, flags: PassFlags) -> None:
        """Only the targets: a host update never changes listeners or groups (a Service change does that)."""
        assert model.nlb is not None
        desired = model.nlb
        lb = reads.describe_lb(self.clients, desired.name)
        if lb is None:
            raise RetryError("load balancer not created yet", delay_seconds=5)
        observed = reads.observe(self.clients, lb, model.uid, flags)
        targets_only = [
            op
            for op in m.plan(desired, observed)
            if isinstance(op, m.RegisterTargets | m.DeregisterTargets | m.SyncIpTargets)
        ]
        existing = {tg.name for tg in observed.target_groups.values()}
        ops: list[m.Operation] = [op for op in targets_only if op.name in existing]
        writes.apply_plan(self.clients, self.vpc_id, ops, observed, desired, self.ip_targets)

    # -- deletion by UID (also used for a Service that is already gone) -----------------------------------------
    def delete_for_uid(self, uid: str) -> bool:
        """The NLB (its listeners go with it) and its target groups; never the security group, which a Classic ELB
        of the same Service shares by name (the caller releases it once no LB uses it). False when an NLB of that
        name is left in place (not ours), with everything it uses."""
        name = names.load_balancer_name(uid)
        lb = reads.describe_lb(self.clients, name)
        if lb is not None:
            tags = reads.lb_tags(self.clients, lb["LoadBalancerArn"])
            if tags is not None and self.cluster.claim(tags, uid) is Claim.NOT_OURS:
                log.warning("nlb %s: not tagged for this cluster, left in place", name)
                return False
            lb = None if tags is None else lb  # gone meanwhile: only its target groups are left to delete
        groups = reads.tagged_target_groups(self.clients, uid)
        if lb is not None:
            attached = reads.target_groups_of(self.clients, lb["LoadBalancerArn"])
            unclaimed = [tg["TargetGroupArn"] for tg in attached if tg["TargetGroupArn"] not in groups]
            for tg in attached:
                groups.setdefault(tg["TargetGroupArn"], tg)
            if self.security_groups is not None:
                self.security_groups.before_lb_delete(lb)  # its groups must be readable first
            # The ownership read above already says whether the LB carries our UID tag: only what lacks it is read.
            claimed = tags is not None and names.SERVICE_UID_TAG in tags
            adoption.tag_unclaimed(self.clients, uid, [*([] if claimed else [lb["LoadBalancerArn"]]), *unclaimed])
            writes.delete_lb(self.clients, lb["LoadBalancerArn"])  # its listeners go with it
        for arn in sorted(groups):
            writes.delete_target_group(self.clients, arn)
        return True
