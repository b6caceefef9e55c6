"""What one load balancer type's deployer does for the pass (ccm.aws.balancers) behind the one LoadBalancer contract.

A deployer observes AWS, plans against the pass's model (a pure diff: ccm.aws.nlb_model.plan, clb_model.plan) and
applies; every AWS call for its load balancer is made inside it (ccm.aws.nlb with nlb_reads / nlb_writes,
ccm.aws.clb with clb_writes). The security groups have their own deployer (ccm.aws.security_groups.SecurityGroups),
which both load balancer deployers call. The pass itself (ccm.aws.balancers, ccm.aws.model) makes no AWS call: it
imports no SDK and holds no client (pyproject's import contract `pass-makes-no-aws-call`).
"""

from __future__ import annotations

from typing import Protocol

from ccm.aws.model import LoadBalancerModel
from ccm.contracts.cloud import Applied, LoadBalancerStatus, PassFlags, Publish
from ccm.contracts.endpoints import IpTarget, ServicePortKey
from ccm.contracts.readiness_gates import TargetHealth


class LoadBalancerDeployer(Protocol):
    """One type (ccm.aws.nlb.NetworkLoadBalancers, ccm.aws.clb.ClassicLoadBalancers)."""

    def deploy(self, model: LoadBalancerModel, flags: PassFlags, publish: Publish | None) -> LoadBalancerStatus:
        """Observe, plan, apply: the LB, its listeners, target groups, targets and security groups as the model
        says (its targets set by `with_members`). The status carries the checkpoint to store (`applied`)."""
        ...

    def deploy_targets(self, model: LoadBalancerModel, flags: PassFlags) -> None:
        """Only the targets (a host update): read them and converge them to the model's."""
        ...

    def ip_target_health(self, model: LoadBalancerModel) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        """The health of each `ip` target by the Service port it serves (empty for a type without ip targets)."""
        ...

    def apply_ip_targets(self, applied: Applied, model: LoadBalancerModel) -> None:
        """The `ip` targets by the checkpoint's target-group ARNs (no load balancer read); RetryError when one is
        gone."""
        ...

    def ip_health_by_arn(
        self, applied: Applied, model: LoadBalancerModel
    ) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        """The `ip` targets' health by the checkpoint's target-group ARNs."""
        ...

    def status_for_uid(self, uid: str) -> LoadBalancerStatus | None:
        """One read: this type's LB named for the UID, None when there is none."""
        ...

    def delete_for_uid(self, uid: str) -> bool:
        """Delete this type's LB of the UID and what only it uses, never the Service's security group (the other
        type shares it by name); True when no LB of this type is left under that name (False: one was left in
        place, not ours: `Cluster.claim`)."""
        ...

    # -- by the checkpoint (`Applied`): the pass reads and stores it; the deployer knows what its ids mean --------
    def active_hostname(self, applied: Applied) -> str | None:
        """One read: the LB's DNS name while it exists and is usable, else None."""
        ...

    def apply_targets(self, applied: Applied, add: frozenset[str], remove: frozenset[str]) -> list[str]:
        """Register/deregister only the difference, by the stored ids (one call per target group and direction);
        returns the instances AWS refused. Raises RetryError when a stored id is gone (a full pass follows)."""
        ...

    def delete_applied(self, applied: Applied, confirmed: frozenset[str]) -> None:
        """Delete the LB and its target groups by the stored ids; RetryError while AWS holds one. `confirmed`: ARNs
        the tagging API just listed with our UID tag; any other id is read first, because IAM judges a delete by
        the resource's tags and a resource that is gone has none (AccessDenied, not NotFound)."""
        ...
