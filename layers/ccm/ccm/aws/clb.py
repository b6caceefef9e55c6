"""The Classic ELB driver: implements ccm.contracts.cloud.LoadBalancer with the `elb` API, reading as little as it can.

A CLB describes itself in one call (listeners, policies, health check, subnets, groups, instances), so an ordinary
pass reads DescribeLoadBalancers, DescribeTags (ownership) and DescribeLoadBalancerAttributes, plus subnet
discovery, and writes nothing when converged. A creation sends listeners, subnets, groups and tags inline and
plans the rest against what CreateLoadBalancer is known to leave, without reading it back. Names and tags are those
of cloud-provider-aws, so its CLBs are adopted in place.

There is nothing a crash can orphan: the LB's name is derived from the Service UID and everything else lives
inside it; the managed security group is found by name too. So the `thorough` flag changes nothing here.

This module is the reconcile flow; the writes are in `clb_writes`, the parsing of a description in `clb_observed`,
the pure planning in `clb_model`.
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

from ccm.aws import clb_model as m
from ccm.aws import clb_writes as writes
from ccm.aws import names
from ccm.aws import references as refs
from ccm.aws.applied import fingerprint
from ccm.aws.clb_observed import observed_from_api
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.fixed_settings import FIXED_SETTING, scheme_kept
from ccm.aws.lbconfig import LoadBalancerConfig, parse_load_balancer_config
from ccm.aws.lbconfig.notices import annotation_notices
from ccm.aws.ownership import clb_tags
from ccm.aws.security_groups import UNTAGGED_NODE_GROUP, SecurityGroups
from ccm.aws.subnets import UNAVAILABLE_SUBNETS, SubnetChoice, node_zones, resolve_subnets
from ccm.aws.targets import REFUSED_TARGETS, refused_message, register_instances
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    ROUTINE,
    Applied,
    CloudStateError,
    ImplementedElsewhere,
    Ingress,
    InvalidServiceConfig,
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
    """DescribeLoadBalancers' CreatedTime (a datetime in boto3) as epoch seconds; now for one just created."""
    return created.timestamp() if isinstance(created, datetime) else time.time()


def _status(dns_name: str) -> LoadBalancerStatus:
    return LoadBalancerStatus((Ingress(hostname=dns_name),))


class ClassicLoadBalancers:
    def __init__(self, clients: AwsClients, cluster: Cluster, security_groups: SecurityGroups | None = None) -> None:
        self.clients = clients
        self.cluster = cluster
        self.vpc_id = cluster.vpc_id
        self.our_class = cluster.load_balancer_class
        self.security_groups = security_groups  # None: leave security groups alone (AWS's default group)
        self.references = refs.ReferenceChecker(clients, cluster.vpc_id)

    @property
    def elb(self) -> Any:
        return self.clients.client("elb")

    # -- contract ---------------------------------------------------------------------------------------------
    def get_load_balancer_name(self, service: KubeObject) -> str:
        return names.load_balancer_name(p.meta(service)["uid"])

    def get_load_balancer(self, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        lb = self._describe_lb(self.get_load_balancer_name(service))
        return (None, False) if lb is None else (_status(lb["DNSName"]), True)

    def ensure_load_balancer(
        self,
        service: KubeObject,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        publish: Publish | None = None,
    ) -> LoadBalancerStatus:
        config = self._config(service)  # before any AWS call: invalid input changes nothing
        notices = annotation_notices(config, p.annotations_of(service))  # on what the Service asks for
        uid = p.meta(service)["uid"]
        name = names.load_balancer_name(uid)
        # A Service of our class seen for the first time cannot have an LB yet (see PassFlags.first_sight).
        fresh = flags.first_sight and not flags.thorough and p.spec(service).get("loadBalancerClass") == self.our_class
        lb = None if fresh else self._describe_lb(name)
        tags: dict[str, str] = {}
        warnings: list[LoadBalancerWarning] = []
        if lb is not None:
            found = self._tags(name)
            if found is None:
                raise RetryError(f"{name} disappeared while being read", delay_seconds=5)
            tags = found
            self._check_adoptable(lb, tags)
            if kept := scheme_kept("Classic ELB", lb.get("Scheme") or "", config):
                warnings.append(LoadBalancerWarning(FIXED_SETTING, kept))
                config = replace(config, scheme=lb["Scheme"])  # converged as it is: subnets found for its scheme
        # Everything that can refuse the Service happens above and here, before the first write.
        subnets, scanned = self._subnets_and_groups(config, nodes, creating=lb is None)
        desired = m.desired_clb(service, config, nodes, self.cluster.name, subnets.ids)
        self.references.verify(refs.wanted(config, creating=lb is None) - refs.in_use(lb), config)
        groups: list[str] = []
        if self.security_groups is not None:
            groups = self.security_groups.ensure_lb_group(name, service, config, "clb", dict(desired.tags), scanned)
            desired = replace(desired, security_groups=tuple(groups))
        if lb is None:
            observed = m.observed_after_create(desired, writes.create_lb(self.clients, self.vpc_id, desired))
            if publish is not None:
                publish(_status(observed.dns_name))
        else:
            attributes = None  # not read: attributes are left as they are
            if flags.check_attributes:
                described = self.elb.describe_load_balancer_attributes(LoadBalancerName=name)
                attributes = described["LoadBalancerAttributes"]
            observed = observed_from_api(lb, tags, attributes)
        refused = writes.apply_plan(self.clients, name, m.plan(desired, observed, self.cluster.name))
        warnings += [LoadBalancerWarning(UNAVAILABLE_SUBNETS, subnets.warning)] if subnets.warning else []
        warnings += [LoadBalancerWarning(REFUSED_TARGETS, refused_message(refused))] if refused else []
        unreachable = None
        if self.security_groups is not None and groups:
            ids = [i for i in map(p.instance_id, nodes) if i]
            if unreachable := self.security_groups.ensure_node_access(groups, name, uid, ids):
                warnings.append(LoadBalancerWarning(UNTAGGED_NODE_GROUP, unreachable))
            # Applied above (ApplySecurityGroups): the per-LB node rule and group of the previous design go.
            attached = (lb or {}).get("SecurityGroups") or []
            self.security_groups.retire_replaced(name, uid, attached, groups, flags.thorough)
        applied = Applied(
            uid=uid,
            service_key=f"{p.meta(service).get('namespace')}/{p.meta(service).get('name')}",
            lb_type="clb",
            fingerprint=self.fingerprint(service),
            lb_id=name,
            hostname=observed.dns_name,
            targets=desired.instances - frozenset(refused),
            security_groups=tuple(groups or (lb or {}).get("SecurityGroups") or ()),
            created_at=_epoch((lb or {}).get("CreatedTime")),
            # Refused instances and an unreachable node group are retried by the next pass, which must be full.
            verified_at=0.0 if refused or unreachable else time.time(),
        )
        return replace(_status(observed.dns_name), warnings=tuple(warnings), notices=notices, applied=applied)

    # -- the checkpoint (ccm.aws.applied; LoadBalancers keeps it) -------------------------------------------------
    def fingerprint(self, service: KubeObject) -> str:
        config = self._config(service)
        return fingerprint("clb", config, m.desired_clb(service, config, (), self.cluster.name), self.vpc_id)

    def active_hostname(self, applied: Applied) -> str | None:
        lb = self._describe_lb(applied.lb_id)
        return None if lb is None else str(lb["DNSName"])

    def apply_targets(self, applied: Applied, add: frozenset[str], remove: frozenset[str]) -> list[str]:
        try:
            refused = register_instances(self.elb, self.clients.ec2, applied.lb_id, sorted(add)) if add else []
            if remove:
                self.elb.deregister_instances_from_load_balancer(
                    LoadBalancerName=applied.lb_id, Instances=[{"InstanceId": i} for i in sorted(remove)]
                )
        except ClientError as err:
            if error_code(err) != "LoadBalancerNotFound":
                raise
            raise RetryError(f"{applied.lb_id} is gone: reading it in full", delay_seconds=1) from err
        return refused

    def delete_applied(self, applied: Applied, confirmed: frozenset[str]) -> None:
        # The API deletes a missing Classic ELB without complaint, but IAM would deny it (no tags to judge).
        listed = any(arn.endswith(f":loadbalancer/{applied.lb_id}") for arn in confirmed)
        if listed or self._describe_lb(applied.lb_id) is not None:
            self.elb.delete_load_balancer(LoadBalancerName=applied.lb_id)

    def update_load_balancer(
        self, service: KubeObject, nodes: Sequence[KubeObject], flags: PassFlags = ROUTINE
    ) -> None:
        """Only the instances: a host update never changes anything else (a Service change does that)."""
        config = self._config(service)
        desired = m.desired_clb(service, config, nodes, self.cluster.name)
        lb = self._describe_lb(desired.name)
        if lb is None:
            raise RetryError("load balancer not created yet", delay_seconds=5)
        writes.apply_plan(self.clients, desired.name, m.instance_changes(desired, observed_from_api(lb, {}, None)))

    def ensure_load_balancer_deleted(self, service: KubeObject) -> None:
        """This driver alone: the CLB, then its managed group, which AWS keeps busy for a while after the LB is
        gone (delete_lb_group raises RetryError meanwhile). LoadBalancers does the same for both types."""
        uid = p.meta(service)["uid"]
        if self.delete_for_uid(uid) and self.security_groups is not None:
            self.security_groups.delete_lb_group(names.load_balancer_name(uid), uid)

    # -- deletion by UID (also used for a Service that is already gone) -----------------------------------------
    def delete_for_uid(self, uid: str) -> bool:
        """Listeners, policies, health check and registrations go with the LB; never the security group, which an
        NLB of the same Service shares by name. False when a CLB of that name is left in place (not ours)."""
        name = names.load_balancer_name(uid)
        tags = self._tags(name)
        if tags is not None:
            if self.cluster.claim(tags, uid) is Claim.NOT_OURS:
                log.warning("clb %s: not tagged for this cluster, left in place", name)
                return False
            if self.security_groups is not None:
                # Its groups must be readable before it goes (security_groups.before_lb_delete).
                self.security_groups.before_lb_delete(self._describe_lb(name) or {})
            if names.SERVICE_UID_TAG not in tags:
                # Made by cloud-provider-aws and never reconciled here: IAM deletes only UID-tagged LBs, and lets
                # us add that tag to a cluster-tagged LB without one (template: AdoptClusterLoadBalancers).
                self.elb.add_tags(LoadBalancerNames=[name], Tags=[{"Key": names.SERVICE_UID_TAG, "Value": uid}])
            self.elb.delete_load_balancer(LoadBalancerName=name)
        return True

    def load_balancer_exists_for_uid(self, uid: str) -> bool:
        return self._describe_lb(names.load_balancer_name(uid)) is not None

    # -- checks -----------------------------------------------------------------------------------------------
    def _config(self, service: KubeObject) -> LoadBalancerConfig:
        if not p.belongs_to_us(service, self.our_class):
            raise ImplementedElsewhere()
        config = parse_load_balancer_config(service, default_lb_type="clb")
        if config.lb_type != "clb":
            raise InvalidServiceConfig("the Service asks for an NLB; the Classic ELB driver cannot make one")
        return config

    def _check_adoptable(self, lb: dict[str, Any], tags: dict[str, str]) -> None:
        name = lb["LoadBalancerName"]
        if self.cluster.tag_key not in tags:
            # Cured on the AWS side (tag or delete it): retried, not "invalid".
            raise CloudStateError(
                f"a Classic ELB named {name} exists but is not tagged {self.cluster.tag_key}; "
                "tag it (value owned) to let this controller adopt it, or delete it"
            )

    # -- reads ------------------------------------------------------------------------------------------------
    def _describe_lb(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"]
        except ClientError as err:
            if error_code(err) == "LoadBalancerNotFound":
                return None
            raise
        return found[0] if found else None

    def _tags(self, name: str) -> dict[str, str] | None:
        """The LB's tags, or None when it does not exist."""
        return clb_tags(self.elb, name)

    def _subnets_and_groups(
        self, config: LoadBalancerConfig, nodes: Sequence[KubeObject], creating: bool
    ) -> tuple[SubnetChoice, bool]:
        """The subnets; for a creation, beside them what `ensure_lb_group` reads first in a new environment
        (SecurityGroups.beside). (subnets, whether the groups were read)"""
        find = functools.partial(self._subnets, config, nodes, creating=creating)
        if not creating or self.security_groups is None:
            return find(), False
        return self.security_groups.beside(find, config)

    def _subnets(self, config: LoadBalancerConfig, nodes: Sequence[KubeObject], creating: bool = False) -> SubnetChoice:
        """Rediscovered on every full pass over an existing LB, so new or retagged subnets are attached and removed
        ones detached; a creation may reuse a recent clean discovery (ccm.aws.subnets)."""
        return resolve_subnets(
            self.clients, self.vpc_id, config, self.cluster.name, node_zones(nodes), "Classic ELB", creating=creating
        )
