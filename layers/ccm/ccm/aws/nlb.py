"""The NLB driver: implements ccm.contracts.cloud.LoadBalancer with ELBv2, reading as little as it can.

This module is the reconcile flow (ensure, update, delete); the reads are in `nlb_reads`, the writes in
`nlb_writes`, adoption of cloud-provider-aws's NLBs in `nlb_adoption`, the pure planning in `nlb_model`.

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

from botocore.exceptions import ClientError

from ccm.aws import frontend_model as fm
from ccm.aws import names
from ccm.aws import nlb_adoption as adoption
from ccm.aws import nlb_model as m
from ccm.aws import nlb_placement as placed
from ccm.aws import nlb_reads as reads
from ccm.aws import nlb_writes as writes
from ccm.aws import references as refs
from ccm.aws.applied import fingerprint
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.fixed_settings import FIXED_SETTING
from ccm.aws.lbconfig import LoadBalancerConfig, parse_load_balancer_config, validate_against_subnets
from ccm.aws.lbconfig.notices import annotation_notices
from ccm.aws.ownership import nlb_tags
from ccm.aws.security_groups import UNTAGGED_NODE_GROUP, SecurityGroups
from ccm.aws.subnets import UNAVAILABLE_SUBNETS, SubnetChoice, node_zones, resolve_subnets
from ccm.aws.targets import REFUSED_TARGETS, refused_message, register_targets
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    ROUTINE,
    Applied,
    HostnamePublished,
    ImplementedElsewhere,
    Ingress,
    KubeObject,
    LoadBalancerStatus,
    LoadBalancerWarning,
    PassFlags,
    Publish,
    RetryError,
)
from ccm.contracts.cluster import Claim, Cluster

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
        self.our_class = cluster.load_balancer_class
        self.references = refs.ReferenceChecker(clients, cluster.vpc_id)

    # -- contract ---------------------------------------------------------------------------------------------
    def get_load_balancer_name(self, service: KubeObject) -> str:
        return names.load_balancer_name(p.meta(service)["uid"])

    def get_load_balancer(self, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        lb = reads.describe_lb(self.clients, self.get_load_balancer_name(service))
        if lb is None:
            return None, False
        return LoadBalancerStatus((Ingress(hostname=lb["DNSName"]),)), True

    def ensure_load_balancer(
        self,
        service: KubeObject,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        publish: Publish | None = None,
    ) -> LoadBalancerStatus:
        if not p.belongs_to_us(service, self.our_class):
            raise ImplementedElsewhere()
        config = parse_load_balancer_config(service, default_lb_type="nlb")  # before any AWS call
        desired = m.desired_nlb(service, config, nodes, self.cluster.name, self.vpc_id)
        # A Service of our class seen for the first time cannot have an LB yet (see PassFlags.first_sight).
        fresh = flags.first_sight and not flags.thorough and p.spec(service).get("loadBalancerClass") == self.our_class
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
        uid = p.meta(service)["uid"]
        # Observed before any write (groups included), so references the listeners already use are not re-read.
        observed = None if lb is None else reads.observe(self.clients, lb, uid, flags, desired)
        used = refs.in_use(lb, (ls.certificate for ls in observed.listeners) if observed else ())
        wanted = refs.wanted(config, creating=lb is None, placement_fixed=True)
        if lb is not None and not lb.get("SecurityGroups"):  # created without groups: they would never be used
            wanted = replace(wanted, security_groups=frozenset())
        self.references.verify(wanted - used, config)
        group_ids, unreachable, swapped = self._ensure_groups(service, config, desired, lb, nodes, flags, scanned)
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
        refused, arn_by_name = writes.apply_plan(self.clients, self.vpc_id, operations, observed, desired)
        if swapped is not None:
            self._finish_swap(lb, group_ids, swapped, uid, flags)
        warnings += [LoadBalancerWarning(REFUSED_TARGETS, refused_message(refused))] if refused else []
        applied = Applied(
            uid=uid,
            service_key=f"{p.meta(service).get('namespace')}/{p.meta(service).get('name')}",
            lb_type="nlb",
            fingerprint=self.fingerprint(service),
            lb_id=lb["LoadBalancerArn"],
            hostname=lb["DNSName"],
            target_groups=tuple((arn_by_name[ls.target_group.name], ls.target_group.port) for ls in desired.listeners),
            targets=frozenset(desired.listeners[0].target_group.targets) - frozenset(refused),
            security_groups=tuple(group_ids or lb.get("SecurityGroups") or ()),
            created_at=_epoch(lb.get("CreatedTime")),
            # Refused targets and an unreachable node group are retried by the next pass, which must be full.
            verified_at=0.0 if refused or unreachable else time.time(),
        )
        return LoadBalancerStatus(
            (Ingress(hostname=lb["DNSName"]),),
            warnings=tuple(warnings),
            notices=annotation_notices(config, p.annotations_of(service)),
            applied=applied,
        )

    # -- the checkpoint (ccm.aws.applied; LoadBalancers keeps it) -------------------------------------------------
    def fingerprint(self, service: KubeObject) -> str:
        if not p.belongs_to_us(service, self.our_class):
            raise ImplementedElsewhere()
        config = parse_load_balancer_config(service, default_lb_type="nlb")
        return fingerprint(
            "nlb", config, m.desired_nlb(service, config, (), self.cluster.name, self.vpc_id), self.vpc_id
        )

    def active_hostname(self, applied: Applied) -> str | None:
        try:
            found = self.clients.elbv2.describe_load_balancers(LoadBalancerArns=[applied.lb_id])["LoadBalancers"]
        except ClientError as err:
            if error_code(err) == "LoadBalancerNotFound":
                return None
            raise
        if not found or (found[0].get("State") or {}).get("Code") == "failed":
            return None
        return str(found[0]["DNSName"])

    def apply_targets(self, applied: Applied, add: frozenset[str], remove: frozenset[str]) -> list[str]:
        refused: set[str] = set()
        try:
            for arn, port in applied.target_groups:
                if add:
                    refused.update(register_targets(self.clients.elbv2, self.clients.ec2, arn, port, sorted(add)))
                if remove:
                    self.clients.elbv2.deregister_targets(
                        TargetGroupArn=arn, Targets=[{"Id": i, "Port": port} for i in sorted(remove)]
                    )
        except ClientError as err:
            if error_code(err) != "TargetGroupNotFound":
                raise
            raise RetryError(f"a target group of {applied.lb_id} is gone: reading it in full", delay_seconds=1) from err
        return sorted(refused)

    def delete_applied(self, applied: Applied, confirmed: frozenset[str]) -> None:
        if applied.lb_id in confirmed or self.active_hostname(applied) is not None:
            try:
                self.clients.elbv2.delete_load_balancer(LoadBalancerArn=applied.lb_id)  # its listeners go with it
            except ClientError as err:
                if error_code(err) != "LoadBalancerNotFound":
                    raise
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
        found = self.clients.ec2.describe_subnets(SubnetIds=choice.ids)["Subnets"]
        return {s["SubnetId"]: s["CidrBlock"] for s in found}

    def _ensure_groups(
        self,
        service: KubeObject,
        config: LoadBalancerConfig,
        desired: m.NLBSpec,
        lb: dict[str, Any] | None,
        nodes: Sequence[KubeObject],
        flags: PassFlags,
        scanned: bool,
    ) -> tuple[list[str], str | None, list[str] | None]:
        """Security groups (ccm.aws.shared_groups): the frontend (the listener group of its port set, or its own
        for source ranges) and the shared backend group, whose one node rule serves every LB. An existing NLB
        whose groups change carries the old and the new ones while its listeners change (make before break:
        `frontend_model.interim_groups`), then only the new ones (`_finish_swap`). An NLB created without groups
        (AWS cannot add them later) is left as it is. (group ids, node-group warning, the groups it carried when
        they change, else None)"""
        if (
            self.security_groups is None
            or not flags.check_attributes
            or (lb is not None and not lb.get("SecurityGroups"))
        ):
            return [], None, None
        uid = p.meta(service)["uid"]
        group_ids = self.security_groups.ensure_lb_group(
            desired.name, service, config, "nlb", dict(config.additional_tags), scanned
        )
        attached = list(lb.get("SecurityGroups") or []) if lb is not None else []
        swapped = None
        if lb is not None and sorted(attached) != sorted(group_ids):
            interim = fm.interim_groups(attached, group_ids)
            self.clients.elbv2.set_security_groups(
                LoadBalancerArn=lb["LoadBalancerArn"], SecurityGroups=list(interim or group_ids)
            )
            swapped = attached if interim else None
        ids = [i for i in map(p.instance_id, nodes) if i]
        unreachable = self.security_groups.ensure_node_access(group_ids, desired.name, uid, ids)
        if swapped is None:
            self.security_groups.retire_replaced(desired.name, uid, attached, group_ids, flags.thorough)
        return group_ids, unreachable, swapped

    def _finish_swap(
        self, lb: dict[str, Any], group_ids: list[str], attached: list[str], uid: str, flags: PassFlags
    ) -> None:
        """The listeners changed under the old and the new groups: now only the new ones; then what the old ones
        were retires (its own group and node rule of the previous design, the legacy all-ports group)."""
        assert self.security_groups is not None
        self.clients.elbv2.set_security_groups(LoadBalancerArn=lb["LoadBalancerArn"], SecurityGroups=group_ids)
        self.security_groups.retire_replaced(lb["LoadBalancerName"], uid, attached, group_ids, flags.thorough)

    def update_load_balancer(
        self, service: KubeObject, nodes: Sequence[KubeObject], flags: PassFlags = ROUTINE
    ) -> None:
        """Only the targets: a host update never changes listeners or groups (a Service change does that)."""
        if not p.belongs_to_us(service, self.our_class):
            raise ImplementedElsewhere()
        config = parse_load_balancer_config(service, default_lb_type="nlb")
        desired = m.desired_nlb(service, config, nodes, self.cluster.name, self.vpc_id)
        lb = reads.describe_lb(self.clients, desired.name)
        if lb is None:
            raise RetryError("load balancer not created yet", delay_seconds=5)
        observed = reads.observe(self.clients, lb, p.meta(service)["uid"], flags)
        targets_only = [
            op for op in m.plan(desired, observed) if isinstance(op, m.RegisterTargets | m.DeregisterTargets)
        ]
        writes.apply_plan(
            self.clients,
            self.vpc_id,
            [op for op in targets_only if op.name in {tg.name for tg in observed.target_groups.values()}],
            observed,
            desired,
        )

    def ensure_load_balancer_deleted(self, service: KubeObject) -> None:
        """This driver alone: the NLB, then its security group (LoadBalancers does the same for both types)."""
        uid = p.meta(service)["uid"]
        if self.delete_for_uid(uid) and self.security_groups is not None:
            # After the LB: AWS keeps the group busy a while (RetryError until it lets go).
            self.security_groups.delete_lb_group(names.load_balancer_name(uid), uid)

    # -- deletion by UID (also used for a Service that is already gone) -----------------------------------------
    def delete_for_uid(self, uid: str) -> bool:
        """The NLB (its listeners go with it) and its target groups; never the security group, which a Classic ELB
        of the same Service shares by name (the caller releases it once no LB uses it). False when an NLB of that
        name is left in place (not ours), with everything it uses."""
        name = names.load_balancer_name(uid)
        lb = reads.describe_lb(self.clients, name)
        if lb is not None:
            tags = nlb_tags(self.clients.elbv2, lb["LoadBalancerArn"])
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
            # Deleting the LB deletes its listeners with it.
            self.clients.elbv2.delete_load_balancer(LoadBalancerArn=lb["LoadBalancerArn"])
        for arn in sorted(groups):
            writes.delete_target_group(self.clients, arn)
        return True

    def load_balancer_exists_for_uid(self, uid: str) -> bool:
        return reads.describe_lb(self.clients, names.load_balancer_name(uid)) is not None
