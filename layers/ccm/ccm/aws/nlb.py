"""The NLB driver: implements ccm.contracts.cloud.LoadBalancer with ELBv2, reading as little as it can.

Reads on a no-op reconcile: DescribeLoadBalancers (by name), DescribeListeners, DescribeTargetGroups (by LB)
and one DescribeTargetHealth per target group. A thorough pass (retries after a crash, periodic resync, and every
delete) additionally asks the Resource Groups Tagging API for everything tagged with the Service's UID, so target
groups orphaned by a crash between two calls are found and deleted: nothing leaks.

Adoption (an NLB cloud-provider-aws made): before the first write on an existing NLB (a non-empty plan, or its
deletion), one DescribeTags over the LB, the target groups and the listeners the plan touches; those carrying a
cluster tag but not our UID tag get it (IAM changes and deletes only UID-tagged resources, and lets us add that tag
to cluster-tagged ones without it: template AdoptClusterLoadBalancers). A listener the plan must change that carries
no cluster tag (cloud-provider-aws tags none) is refused with a Warning naming the one command that fixes it: IAM
cannot tell a listener of our cluster from any other untagged listener, so it is never tagged here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws import nlb_model as m
from ccm.aws import nlb_placement as placed
from ccm.aws import references as refs
from ccm.aws.applied import fingerprint
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.fixed_settings import FIXED_SETTING
from ccm.aws.lbconfig import LoadBalancerConfig, parse_load_balancer_config, validate_against_subnets
from ccm.aws.lbconfig.notices import annotation_notices
from ccm.aws.ownership import nlb_tags, ours_to_delete
from ccm.aws.security_groups import UNTAGGED_NODE_GROUP, SecurityGroups
from ccm.aws.subnets import UNAVAILABLE_SUBNETS, SubnetChoice, forget_discovery, node_zones, resolve_subnets
from ccm.aws.targets import REFUSED_TARGETS, refused_message, register_targets
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    ROUTINE,
    Applied,
    CloudStateError,
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

log = logging.getLogger(__name__)


def _epoch(created: Any) -> float:
    """DescribeLoadBalancers' CreatedTime (a datetime in boto3) as epoch seconds; now when absent."""
    return created.timestamp() if isinstance(created, datetime) else time.time()


class NetworkLoadBalancers:
    def __init__(
        self, clients: AwsClients, vpc_id: str, our_class: str, security_groups: SecurityGroups | None = None
    ) -> None:
        self.clients = clients
        self.security_groups = security_groups
        self.vpc_id = vpc_id
        self.our_class = our_class
        self.references = refs.ReferenceChecker(clients, vpc_id)

    # -- contract ---------------------------------------------------------------------------------------------
    def get_load_balancer_name(self, cluster_name: str, service: KubeObject) -> str:
        return names.load_balancer_name(p.meta(service)["uid"])

    def get_load_balancer(self, cluster_name: str, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        lb = self._describe_lb(self.get_load_balancer_name(cluster_name, service))
        if lb is None:
            return None, False
        return LoadBalancerStatus((Ingress(hostname=lb["DNSName"]),)), True

    def ensure_load_balancer(
        self,
        cluster_name: str,
        service: KubeObject,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        publish: Publish | None = None,
    ) -> LoadBalancerStatus:
        if not p.belongs_to_us(service, self.our_class):
            raise ImplementedElsewhere()
        config = parse_load_balancer_config(service, default_lb_type="nlb")  # before any AWS call
        desired = m.desired_nlb(service, config, nodes, cluster_name, self.vpc_id)
        # A Service of our class seen for the first time cannot have an LB yet (see PassFlags.first_sight).
        fresh = flags.first_sight and not flags.thorough and p.spec(service).get("loadBalancerClass") == self.our_class
        lb = None if fresh else self._describe_lb(desired.name)
        created = lb is None
        warnings: list[LoadBalancerWarning] = []
        placement: dict[str, Any] = {}
        if lb is None:
            # Subnets and their EIPs / private IPs are checked before the first write: a refusal changes nothing.
            choice = self._subnets(config, cluster_name, nodes, creating=True)
            cidrs = self._cidrs(choice) if config.private_ipv4_addresses else None
            validate_against_subnets(config, choice.ids, cidrs)
            placement = placed.placement(config, choice.ids, cidrs or {})
            warnings += [LoadBalancerWarning(UNAVAILABLE_SUBNETS, choice.warning)] if choice.warning else []
        elif flags.check_attributes:
            wanted_subnets = self._subnets(config, cluster_name, nodes).ids if config.subnets else None
            warnings = [
                LoadBalancerWarning(FIXED_SETTING, w) for w in placed.placement_warnings(lb, config, wanted_subnets)
            ]
        uid = p.meta(service)["uid"]
        # Observed before any write (groups included), so references the listeners already use are not re-read.
        observed = None if lb is None else self._observe(lb, uid, flags, desired)
        used = refs.in_use(lb, (ls.certificate for ls in observed.listeners) if observed else ())
        wanted = refs.wanted(config, creating=lb is None, placement_fixed=True)
        if lb is not None and not lb.get("SecurityGroups"):  # created without groups: they would never be used
            wanted = replace(wanted, security_groups=frozenset())
        self.references.verify(wanted - used, config)
        group_ids, unreachable = self._ensure_groups(service, config, desired, lb, nodes, flags)
        warnings += [LoadBalancerWarning(UNTAGGED_NODE_GROUP, unreachable)] if unreachable else []
        if lb is None:
            lb = self._create_lb(desired, placement, group_ids)
            if publish is not None:
                publish(LoadBalancerStatus((Ingress(hostname=lb["DNSName"]),)))
                if flags.hostname_first:  # crash-safe: the next pass finds the LB by name and makes the rest
                    raise HostnamePublished(desired.name)
            observed = self._observe(lb, uid, flags, desired, created)
        assert observed is not None
        operations = m.plan(desired, observed)
        if not created:
            # Also when converged: the checkpoint lets later passes delete by ARN, which IAM allows only on
            # resources carrying our UID tag (adoption tags them here once).
            self._claim(uid, cluster_name, observed, operations)
        refused, arn_by_name = self._apply(operations, observed, desired)
        warnings += [LoadBalancerWarning(REFUSED_TARGETS, refused_message(refused))] if refused else []
        applied = Applied(
            uid=uid,
            service_key=f"{p.meta(service).get('namespace')}/{p.meta(service).get('name')}",
            lb_type="nlb",
            fingerprint=self.fingerprint(cluster_name, service),
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
    def fingerprint(self, cluster_name: str, service: KubeObject) -> str:
        if not p.belongs_to_us(service, self.our_class):
            raise ImplementedElsewhere()
        config = parse_load_balancer_config(service, default_lb_type="nlb")
        return fingerprint("nlb", config, m.desired_nlb(service, config, (), cluster_name, self.vpc_id), self.vpc_id)

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
            if arn in confirmed or self._target_group_exists(arn):
                self._delete_target_group(arn)

    def _target_group_exists(self, arn: str) -> bool:
        try:
            return bool(self.clients.elbv2.describe_target_groups(TargetGroupArns=[arn])["TargetGroups"])
        except ClientError as err:
            if error_code(err) == "TargetGroupNotFound":
                return False
            raise

    def _subnets(
        self, config: LoadBalancerConfig, cluster_name: str, nodes: Sequence[KubeObject], creating: bool = False
    ) -> SubnetChoice:
        return resolve_subnets(
            self.clients.ec2, self.vpc_id, config, cluster_name, node_zones(nodes), "NLB", creating=creating
        )

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
    ) -> tuple[list[str], str | None]:
        """Security groups (ccm.aws.shared_groups): the frontend (shared, or its own for source ranges) and the
        shared backend group, whose one node rule serves every LB; an existing NLB converges to them and its
        per-LB node rule and group of the previous design go. An NLB created without groups (AWS cannot add them
        later) is left as it is."""
        if (
            self.security_groups is None
            or not flags.check_attributes
            or (lb is not None and not lb.get("SecurityGroups"))
        ):
            return [], None
        uid = p.meta(service)["uid"]
        group_ids = self.security_groups.ensure_lb_group(
            desired.name, service, config, "nlb", dict(config.additional_tags)
        )
        attached = list(lb.get("SecurityGroups") or []) if lb is not None else []
        if lb is not None and sorted(attached) != sorted(group_ids):
            self.clients.elbv2.set_security_groups(LoadBalancerArn=lb["LoadBalancerArn"], SecurityGroups=group_ids)
        ids = [i for i in map(p.instance_id, nodes) if i]
        unreachable = self.security_groups.ensure_node_access(group_ids, desired.name, uid, ids)
        self.security_groups.retire_replaced(desired.name, uid, attached, group_ids, flags.thorough)
        return group_ids, unreachable

    def update_load_balancer(
        self, cluster_name: str, service: KubeObject, nodes: Sequence[KubeObject], flags: PassFlags = ROUTINE
    ) -> None:
        """Only the targets: a host update never changes listeners or groups (a Service change does that)."""
        if not p.belongs_to_us(service, self.our_class):
            raise ImplementedElsewhere()
        config = parse_load_balancer_config(service, default_lb_type="nlb")
        desired = m.desired_nlb(service, config, nodes, cluster_name, self.vpc_id)
        lb = self._describe_lb(desired.name)
        if lb is None:
            raise RetryError("load balancer not created yet", delay_seconds=5)
        observed = self._observe(lb, p.meta(service)["uid"], flags)
        targets_only = [
            op for op in m.plan(desired, observed) if isinstance(op, m.RegisterTargets | m.DeregisterTargets)
        ]
        self._apply(
            [op for op in targets_only if op.name in {tg.name for tg in observed.target_groups.values()}],
            observed,
            desired,
        )

    def ensure_load_balancer_deleted(self, cluster_name: str, service: KubeObject) -> None:
        """This driver alone: the NLB, then its security group (LoadBalancers does the same for both types)."""
        uid = p.meta(service)["uid"]
        if self.delete_for_uid(uid, cluster_name) and self.security_groups is not None:
            # After the LB: AWS keeps the group busy a while (RetryError until it lets go).
            self.security_groups.delete_lb_group(names.load_balancer_name(uid), uid)

    # -- deletion by UID (also used for a Service that is already gone) -----------------------------------------
    def delete_for_uid(self, uid: str, cluster_name: str | None = None) -> bool:
        """The NLB (its listeners go with it) and its target groups; never the security group, which a Classic ELB
        of the same Service shares by name (the caller releases it once no LB uses it). False when an NLB of that
        name is left in place (not ours), with everything it uses."""
        name = names.load_balancer_name(uid)
        lb = self._describe_lb(name)
        if lb is not None:
            tags = nlb_tags(self.clients.elbv2, lb["LoadBalancerArn"])
            if tags is not None and not ours_to_delete(tags, uid, cluster_name):
                log.warning("nlb %s: not tagged for this cluster, left in place", name)
                return False
            lb = None if tags is None else lb  # gone meanwhile: only its target groups are left to delete
        groups = self._tagged_target_groups(uid)
        if lb is not None:
            attached = self._target_groups_of(lb["LoadBalancerArn"])
            unclaimed = [tg["TargetGroupArn"] for tg in attached if tg["TargetGroupArn"] not in groups]
            for tg in attached:
                groups.setdefault(tg["TargetGroupArn"], tg)
            if self.security_groups is not None:
                self.security_groups.before_lb_delete(lb)  # its groups must be readable first
            # The ownership read above already says whether the LB carries our UID tag: only what lacks it is read.
            claimed = tags is not None and names.SERVICE_UID_TAG in tags
            self._tag_unclaimed(uid, [*([] if claimed else [lb["LoadBalancerArn"]]), *unclaimed])
            # Deleting the LB deletes its listeners with it.
            self.clients.elbv2.delete_load_balancer(LoadBalancerArn=lb["LoadBalancerArn"])
        for arn in sorted(groups):
            self._delete_target_group(arn)
        return True

    def load_balancer_exists_for_uid(self, uid: str) -> bool:
        return self._describe_lb(names.load_balancer_name(uid)) is not None

    # -- reads ------------------------------------------------------------------------------------------------
    def _describe_lb(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.clients.elbv2.describe_load_balancers(Names=[name])["LoadBalancers"]
        except ClientError as err:
            if error_code(err) == "LoadBalancerNotFound":
                return None
            raise
        return found[0] if found else None

    def _target_groups_of(self, lb_arn: str) -> list[dict[str, Any]]:
        try:
            groups: list[dict[str, Any]] = self.clients.elbv2.describe_target_groups(LoadBalancerArn=lb_arn)[
                "TargetGroups"
            ]
        except ClientError as err:
            if error_code(err) == "TargetGroupNotFound":  # some implementations say so for an LB without groups
                return []
            raise
        return groups

    def _tagged_target_groups(self, uid: str) -> dict[str, dict[str, Any]]:
        """Target groups tagged with this UID, attached or not (the tagging API is eventually consistent, so
        this complements the by-LB reads; it never replaces them)."""
        found: dict[str, dict[str, Any]] = {}
        paginator = self.clients.tagging.get_paginator("get_resources")
        for page in paginator.paginate(
            TagFilters=[{"Key": names.SERVICE_UID_TAG, "Values": [uid]}],
            ResourceTypeFilters=["elasticloadbalancing:targetgroup"],
        ):
            for item in page.get("ResourceTagMappingList", []):
                found[item["ResourceARN"]] = {"TargetGroupArn": item["ResourceARN"]}
        return found

    def _observe(
        self,
        lb: dict[str, Any],
        uid: str,
        flags: PassFlags,
        desired: m.NLBSpec | None = None,
        created: bool = False,
    ) -> m.ObservedNLB:
        """Read what the plan needs (I/O), then parse it (m.observed_from, pure): read -> parse -> plan -> apply."""
        elbv2, lb_arn = self.clients.elbv2, lb["LoadBalancerArn"]
        attributes = None  # not read: left as they are
        if desired is not None and created and not flags.thorough:
            # Just created in this pass: no listener or target group can be attached yet; trust the answer.
            return m.observed_from(lb, [], [], attributes=m.CREATED_LB_ATTRIBUTES)
        if desired is not None and created:
            attributes = m.CREATED_LB_ATTRIBUTES  # a new LB has the defaults: no read needed
        elif desired is not None and flags.check_attributes:
            attributes = elbv2.describe_load_balancer_attributes(LoadBalancerArn=lb_arn)["Attributes"]
        listeners = elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]
        groups = {tg["TargetGroupArn"]: tg for tg in self._target_groups_of(lb_arn)}
        if flags.thorough:
            orphans = [arn for arn in self._tagged_target_groups(uid) if arn not in groups]
            if orphans:
                for tg in elbv2.describe_target_groups(TargetGroupArns=orphans)["TargetGroups"]:
                    groups[tg["TargetGroupArn"]] = tg
        with_attributes = {
            ls.target_group.name
            for ls in (desired.listeners if desired and flags.check_attributes else ())
            if ls.target_group.attributes
        }
        health: dict[str, Any] = {}
        tg_attributes: dict[str, Any] = {}
        for arn, tg in groups.items():
            health[arn] = elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
            if tg["TargetGroupName"] in with_attributes:
                tg_attributes[arn] = elbv2.describe_target_group_attributes(TargetGroupArn=arn)["Attributes"]
        return m.observed_from(
            lb,
            listeners,
            list(groups.values()),
            attributes=attributes,
            target_health=health,
            target_group_attributes=tg_attributes,
        )

    # -- adoption ---------------------------------------------------------------------------------------------
    def _claim(self, uid: str, cluster_name: str, observed: m.ObservedNLB, operations: list[m.Operation]) -> None:
        """Before changing an existing NLB: the LB, its target groups and the listeners the plan changes carry our
        UID tag (see the module docstring); an untagged listener is refused before any of them is written."""
        listeners = {op.arn for op in operations if isinstance(op, m.ModifyListener | m.DeleteListener)}
        untagged = self._tag_unclaimed(uid, [observed.arn, *sorted(observed.target_groups), *sorted(listeners)])
        if refused := sorted(set(untagged) & listeners):
            key = names.cluster_tag_key(cluster_name)
            raise CloudStateError(
                f"listener {', '.join(refused)} carries no {key} tag (cloud-provider-aws tags no listener) and IAM "
                f"lets this controller change only tagged ones; tag it: aws elbv2 add-tags --resource-arns "
                f"{' '.join(refused)} --tags Key={key},Value=owned"
            )

    def _tag_unclaimed(self, uid: str, arns: Sequence[str]) -> list[str]:
        """Adds our UID tag to those of `arns` that carry a cluster tag and no UID tag (one DescribeTags per 20,
        an AddTags only when one lacks it); returns those carrying no cluster tag at all (left as they are)."""
        elbv2, unclaimed, untagged = self.clients.elbv2, [], []
        for start in range(0, len(arns), 20):
            for found in elbv2.describe_tags(ResourceArns=list(arns[start : start + 20]))["TagDescriptions"]:
                keys = {t["Key"] for t in found.get("Tags", [])}
                if names.SERVICE_UID_TAG in keys:
                    continue
                if any(k.startswith(names.CLUSTER_TAG_PREFIX) for k in keys):
                    unclaimed.append(found["ResourceArn"])
                else:
                    untagged.append(found["ResourceArn"])
        for start in range(0, len(unclaimed), 20):
            batch = unclaimed[start : start + 20]
            elbv2.add_tags(ResourceArns=batch, Tags=[{"Key": names.SERVICE_UID_TAG, "Value": uid}])
            log.info("adopted %s: tagged %s", ", ".join(batch), names.SERVICE_UID_TAG)
        return untagged

    # -- writes -----------------------------------------------------------------------------------------------
    def _create_lb(self, desired: m.NLBSpec, placement: dict[str, Any], group_ids: list[str]) -> dict[str, Any]:
        if group_ids:
            placement = {**placement, "SecurityGroups": group_ids}
        try:
            created = self.clients.elbv2.create_load_balancer(
                Name=desired.name,
                Type="network",
                Scheme=desired.scheme,
                IpAddressType=desired.ip_address_type,
                Tags=names.as_tag_list(desired.tags),
                **placement,
            )["LoadBalancers"][0]
        except ClientError as err:
            if error_code(err) in ("SubnetNotFound", "InvalidSubnet"):
                forget_discovery(self.vpc_id)  # a subnet of the reused discovery is gone: read again next time
            if error_code(err) != "DuplicateLoadBalancerName":
                raise
            # Created without looking and one is there after all (made concurrently): the retry reads it.
            raise RetryError(f"{desired.name} exists already: reading it", delay_seconds=1) from err
        lb: dict[str, Any] = created
        return lb

    def _apply(
        self, operations: list[m.Operation], observed: m.ObservedNLB, desired: m.NLBSpec
    ) -> tuple[list[str], dict[str, str]]:
        """Apply the plan; returns the instances AWS refused as targets (dropped from this pass, reported) and the
        ARN of every target group by name."""
        elbv2 = self.clients.elbv2
        refused: set[str] = set()
        arn_by_name = {tg.name: tg.arn for tg in observed.target_groups.values()}
        held = [op for op in operations if isinstance(op, m.AwaitHealthy)]
        for op in operations:
            log.info("nlb %s: %s", desired.name, type(op).__name__)
            if isinstance(op, m.CreateTargetGroup):
                arn_by_name[op.spec.name] = self._create_target_group(op.spec, desired.tags)
            elif isinstance(op, m.SetTargetGroupAttributes):
                elbv2.modify_target_group_attributes(
                    TargetGroupArn=arn_by_name[op.name], Attributes=[{"Key": k, "Value": v} for k, v in op.attributes]
                )
            elif isinstance(op, m.SetLoadBalancerAttributes):
                elbv2.modify_load_balancer_attributes(
                    LoadBalancerArn=observed.arn, Attributes=[{"Key": k, "Value": v} for k, v in op.attributes]
                )
            elif isinstance(op, m.ModifyTargetGroup):
                elbv2.modify_target_group(TargetGroupArn=arn_by_name[op.name], **m.health_kwargs(op.health))
            elif isinstance(op, m.RegisterTargets):
                refused.update(
                    register_targets(elbv2, self.clients.ec2, arn_by_name[op.name], op.port, op.instance_ids)
                )
            elif isinstance(op, m.DeregisterTargets):
                elbv2.deregister_targets(
                    TargetGroupArn=arn_by_name[op.name], Targets=[{"Id": i, "Port": op.port} for i in op.instance_ids]
                )
            elif isinstance(op, m.CreateListener):
                self._create_listener(observed.arn, op, arn_by_name[op.target_group], desired.tags)
            elif isinstance(op, m.ModifyListener):
                elbv2.modify_listener(
                    ListenerArn=op.arn,
                    Protocol=op.protocol,
                    DefaultActions=[{"Type": "forward", "TargetGroupArn": arn_by_name[op.target_group]}],
                    **m.tls_kwargs(op.certificate, op.ssl_policy),
                )
            elif isinstance(op, m.DeleteListener):
                elbv2.delete_listener(ListenerArn=op.arn)
            elif isinstance(op, m.DeleteTargetGroup):
                self._delete_target_group(op.arn)
        if held:
            # Traffic stays on the old group until the new one has a healthy target; never sleep in a Lambda.
            waiting = ", ".join(f"{op.name} (port {op.port})" for op in held)
            raise RetryError(
                f"waiting for target group {waiting} to report a healthy target before switching its listener",
                delay_seconds=max(op.delay_seconds for op in held),
            )
        return sorted(refused), arn_by_name

    def _create_target_group(self, spec: m.TargetGroupSpec, tags: dict[str, str]) -> str:
        try:
            created = self.clients.elbv2.create_target_group(
                Name=spec.name,
                Protocol=spec.protocol,
                Port=spec.port,
                VpcId=self.vpc_id,
                TargetType="instance",
                Tags=names.as_tag_list(tags),
                **m.health_kwargs(spec.health),
            )
            return str(created["TargetGroups"][0]["TargetGroupArn"])
        except ClientError as err:
            if error_code(err) != "DuplicateTargetGroupName":
                raise
            # AWS returns the existing group for an identical create; some implementations refuse instead.
            found = self.clients.elbv2.describe_target_groups(Names=[spec.name])["TargetGroups"]
            return str(found[0]["TargetGroupArn"])

    def _create_listener(self, lb_arn: str, op: m.CreateListener, tg_arn: str, tags: dict[str, str]) -> None:
        try:
            self.clients.elbv2.create_listener(
                LoadBalancerArn=lb_arn,
                Port=op.port,
                Protocol=op.protocol,
                DefaultActions=[{"Type": "forward", "TargetGroupArn": tg_arn}],
                Tags=names.as_tag_list(tags),
                **m.tls_kwargs(op.certificate, op.ssl_policy),
            )
        except ClientError as err:
            if error_code(err) != "DuplicateListener":
                raise
            raise RetryError(f"listener on port {op.port} appeared concurrently", delay_seconds=5) from err

    def _delete_target_group(self, arn: str) -> None:
        try:
            self.clients.elbv2.delete_target_group(TargetGroupArn=arn)
        except ClientError as err:
            code = error_code(err)
            if code == "TargetGroupNotFound":
                return
            if code == "ResourceInUse":
                # The LB or listener that used it is still being deleted: ask the queue to come back.
                raise RetryError(f"target group {arn} still in use", delay_seconds=10) from err
            raise
