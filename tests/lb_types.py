"""One load balancer type behind the pass (ccm.aws.balancers.LoadBalancers), for the deployer tests.

The pass always serves both types; a deployer test wants only its type's calls counted, so the other type is an
`Absent` deployer (no load balancer of that type, ever; it makes no call)."""

from __future__ import annotations

from dataclasses import replace

from ccm.aws.balancers import LoadBalancers
from ccm.aws.deployer import LoadBalancerDeployer
from ccm.aws.model import LoadBalancerModel
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cloud import Applied, LoadBalancerStatus, PassFlags, Publish
from ccm.contracts.cluster import Cluster, LbType
from ccm.contracts.endpoints import IpTarget, ServicePortKey
from ccm.contracts.readiness_gates import TargetHealth


class Absent:
    """A type with no load balancer: nothing to find, nothing to delete."""

    def deploy(self, model: LoadBalancerModel, flags: PassFlags, publish: Publish | None) -> LoadBalancerStatus:
        raise AssertionError(f"{model.key} asked for a {model.lb_type}, which this test does not serve")

    def deploy_targets(self, model: LoadBalancerModel, flags: PassFlags) -> None:
        raise AssertionError(f"{model.key} asked for a {model.lb_type}, which this test does not serve")

    def status_for_uid(self, uid: str) -> LoadBalancerStatus | None:
        return None

    def apply_ip_targets(self, applied: Applied, model: LoadBalancerModel) -> None:
        return None  # no `ip` targets here

    def ip_health_by_arn(
        self, applied: Applied, model: LoadBalancerModel
    ) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        return {}

    def ip_target_health(self, model: LoadBalancerModel) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        return {}

    def delete_for_uid(self, uid: str) -> bool:
        return True

    def active_hostname(self, applied: Applied) -> str | None:
        return None

    def apply_targets(self, applied: Applied, add: frozenset[str], remove: frozenset[str]) -> list[str]:
        return []

    def delete_applied(self, applied: Applied, confirmed: frozenset[str]) -> None:
        return None


def only(
    lb_type: LbType, deployer: LoadBalancerDeployer, cluster: Cluster, groups: SecurityGroups | None = None
) -> LoadBalancers:
    """The pass with `deployer` as the only type, the cluster's default."""
    pair = (deployer, Absent()) if lb_type == "nlb" else (Absent(), deployer)
    return LoadBalancers(*pair, replace(cluster, default_lb_type=lb_type), security_groups=groups)
