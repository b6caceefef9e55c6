"""The Classic ELB deployer (ccm.aws.deployer): the pass's model of a CLB made true with the `elb` API, reading as
little as it can.

A CLB describes itself in one call (listeners, policies, health check, subnets, groups, instances), so an ordinary
pass reads DescribeLoadBalancers, DescribeTags (ownership) and DescribeLoadBalancerAttributes, plus subnet
discovery, and writes nothing when converged. A creation sends listeners, subnets, groups and tags inline and
plans the rest against what CreateLoadBalancer is known to leave, without reading it back. Names and tags are those
of cloud-provider-aws, so its CLBs are adopted in place.

There is nothing a crash can orphan: the LB's name is derived from the Service UID and everything else lives
inside it; the managed security group is found by name too. So the `thorough` flag changes nothing here.

Observe (`clb_reads`, parsed by `clb_observed`) -> plan (`clb_model.plan`, pure) -> apply (`clb_writes`). This
module is that flow and calls AWS only through those; the security groups are the security-group deployer's.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ccm.aws import clb_model as m
from ccm.aws import clb_reads as reads
from ccm.aws import clb_writes as writes
from ccm.aws import names
from ccm.aws import references as refs
from ccm.aws.clb_observed import observed_from_api
from ccm.aws.clients import AwsClients
from ccm.aws.fixed_settings import FIXED_SETTING, scheme_kept
from ccm.aws.lbconfig import LoadBalancerConfig
from ccm.aws.model import LoadBalancerModel
from ccm.aws.security_groups import UNTAGGED_NODE_GROUP, SecurityGroups
from ccm.aws.subnets import UNAVAILABLE_SUBNETS, SubnetChoice, node_zones, resolve_subnets
from ccm.aws.targets import REFUSED_TARGETS, refused_message
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    Applied,
    CloudStateError,
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
    """DescribeLoadBalancers' CreatedTime (a datetime in boto3) as epoch seconds; now for one just created."""
    return created.timestamp() if isinstance(created, datetime) else time.time()


def _status(dns_name: str) -> LoadBalancerStatus:
    return LoadBalancerStatus((Ingress(hostname=dns_name),))


class ClassicLoadBalancers:
    def __init__(self, clients: AwsClients, cluster: Cluster, security_groups: SecurityGroups | None = None) -> None:
        self.clients = clients
        self.cluster = cluster
        self.vpc_id = cluster.vpc_id
        self.security_groups = security_groups  # None: leave security groups alone (AWS's default group)
        self.references = refs.ReferenceChecker(clients, cluster.vpc_id)

    def status_for_uid(self, uid: str) -> LoadBalancerStatus | None:
        lb = reads.describe_lb(self.clients, names.load_balancer_name(uid))
        return None if lb is None else _status(lb["DNSName"])

    def deploy(self, model: LoadBalancerModel, flags: PassFlags, publish: Publish | None) -> LoadBalancerStatus:
        assert model.clb is not None
        config, uid, name, nodes = model.config, model.uid, model.name, model.nodes
        # A Service of our class seen for the first time cannot have an LB yet (see PassFlags.first_sight).
        fresh = flags.first_sight and not flags.thorough and model.of_our_class
        lb = None if fresh else reads.describe_lb(self.clients, name)
        tags: dict[str, str] = {}
        warnings: list[LoadBalancerWarning] = []
        if lb is not None:
            found = reads.lb_tags(self.clients, name)
            if found is None:
                raise RetryError(f"{name} disappeared while being read", delay_seconds=5)
            tags = found
            self._check_adoptable(lb, tags)
            if kept := scheme_kept("Classic ELB", lb.get("Scheme") or "", config):
                warnings.append(LoadBalancerWarning(FIXED_SETTING, kept))
                config = replace(config, scheme=lb["Scheme"])  # converged as it is: subnets found for its scheme
        # Everything that can refuse the Service happens above and here, before the first write.
        subnets, scanned = self._subnets_and_groups(config, nodes, creating=lb is None)
        desired = replace(model.clb, scheme=config.scheme, subnets=tuple(sorted(set(subnets.ids))))
        self.references.verify(refs.wanted(config, creating=lb is None) - refs.in_use(lb), config)
        groups: list[str] = []
        if self.security_groups is not None:
            tags_wanted = dict(desired.tags)
            groups = self.security_groups.ensure_lb_group(
                name, model.service, config, "clb", tags_wanted, scanned, model.frontend
            )
            desired = replace(desired, security_groups=tuple(groups))
        if lb is None:
            observed = m.observed_after_create(desired, writes.create_lb(self.clients, self.vpc_id, desired))
            if publish is not None:
                publish(_status(observed.dns_name))
        else:
            attributes = reads.attributes(self.clients, name) if flags.check_attributes else None  # None: left
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
            service_key=model.key,
            lb_type="clb",
            fingerprint=model.fingerprint,
            lb_id=name,
            hostname=observed.dns_name,
            targets=desired.instances - frozenset(refused),
            security_groups=tuple(groups or (lb or {}).get("SecurityGroups") or ()),
            created_at=_epoch((lb or {}).get("CreatedTime")),
            # Refused instances and an unreachable node group are retried by the next pass, which must be full.
            verified_at=0.0 if refused or unreachable else time.time(),
        )
        return replace(_status(observed.dns_name), warnings=tuple(warnings), notices=model.notices, applied=applied)

    def apply_ip_targets(self, applied: Applied, model: LoadBalancerModel) -> None:
        return None  # no `ip` targets here

    def ip_health_by_arn(
        self, applied: Applied, model: LoadBalancerModel
    ) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        return {}

    def ip_target_health(self, model: LoadBalancerModel) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        return {}  # a Classic ELB has instance targets only

    # -- by the checkpoint ------------------------------------------------------------------------------------
    def active_hostname(self, applied: Applied) -> str | None:
        lb = reads.describe_lb(self.clients, applied.lb_id)
        return None if lb is None else str(lb["DNSName"])

    def apply_targets(self, applied: Applied, add: frozenset[str], remove: frozenset[str]) -> list[str]:
        return writes.apply_instances_by_name(self.clients, applied.lb_id, add, remove)

    def delete_applied(self, applied: Applied, confirmed: frozenset[str]) -> None:
        # The API deletes a missing Classic ELB without complaint, but IAM would deny it (no tags to judge).
        listed = any(arn.endswith(f":loadbalancer/{applied.lb_id}") for arn in confirmed)
        if listed or reads.describe_lb(self.clients, applied.lb_id) is not None:
            writes.claim_and_delete(self.clients, applied.lb_id, applied.uid, claimed=True)

    def deploy_targets(self, model: LoadBalancerModel, flags: PassFlags) -> None:
        """Only the instances: a host update never changes anything else (a Service change does that)."""
        assert model.clb is not None
        lb = reads.describe_lb(self.clients, model.name)
        if lb is None:
            raise RetryError("load balancer not created yet", delay_seconds=5)
        changes = m.instance_changes(model.clb, observed_from_api(lb, {}, None))
        writes.apply_plan(self.clients, model.name, changes)

    # -- deletion by UID (also used for a Service that is already gone) -----------------------------------------
    def delete_for_uid(self, uid: str) -> bool:
        """Listeners, policies, health check and registrations go with the LB; never the security group, which an
        NLB of the same Service shares by name. False when a CLB of that name is left in place (not ours)."""
        name = names.load_balancer_name(uid)
        tags = reads.lb_tags(self.clients, name)
        if tags is not None:
            if self.cluster.claim(tags, uid) is Claim.NOT_OURS:
                log.warning("clb %s: not tagged for this cluster, left in place", name)
                return False
            if self.security_groups is not None:
                # Its groups must be readable before it goes (security_groups.before_lb_delete).
                self.security_groups.before_lb_delete(reads.describe_lb(self.clients, name) or {})
            writes.claim_and_delete(self.clients, name, uid, claimed=names.SERVICE_UID_TAG in tags)
        return True

    # -- checks -----------------------------------------------------------------------------------------------
    def _check_adoptable(self, lb: dict[str, Any], tags: dict[str, str]) -> None:
        name = lb["LoadBalancerName"]
        if self.cluster.tag_key not in tags:
            # Cured on the AWS side (tag or delete it): retried, not "invalid".
            raise CloudStateError(
                f"a Classic ELB named {name} exists but is not tagged {self.cluster.tag_key}; "
                "tag it (value owned) to let this controller adopt it, or delete it"
            )

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
