"""Both load balancer types behind the one LoadBalancer contract: which driver serves a Service is its
`aws-load-balancer-type` annotation (`nlb`, `clb`), else the configured default (template DefaultLoadBalancerType).

A Service that switches type keeps its name (`a` + UID) under the other API: after the new LB is ensured, the one
of the other type is deleted. We look for it only when a switch is possible: the published hostname is not the
new LB's (the Service was served by another LB) or on thorough passes (resyncs, retries after a crash).

Both types of one Service share the managed security group (`k8s-elb-<name>`, after the common LB name). So a
driver deletes only its own load balancer and what only that uses (target groups); the group and its node rule
are released here, once no load balancer of either type is left, and AWS answers DependencyViolation until the
deleted LB's network interfaces let go (RetryError: the queue comes back).
"""

from __future__ import annotations

from collections.abc import Sequence

from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws.errors import error_code
from ccm.aws.lbconfig import LbType, parse_load_balancer_config
from ccm.aws.refusals import as_refusal
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    ROUTINE,
    InvalidServiceConfig,
    KubeObject,
    LoadBalancerDriver,
    LoadBalancerStatus,
    PassFlags,
    RetryError,
)

_GROUP_GONE = ("InvalidSecurityGroup", "InvalidGroup.NotFound")


class LoadBalancers:
    def __init__(
        self,
        nlb: LoadBalancerDriver,
        clb: LoadBalancerDriver,
        default_type: LbType,
        *,
        security_groups: SecurityGroups | None = None,
    ) -> None:
        self.drivers: dict[str, LoadBalancerDriver] = {"nlb": nlb, "clb": clb}
        self.security_groups = security_groups
        self.default_type: LbType = default_type

    def lb_type(self, service: KubeObject) -> str:
        return parse_load_balancer_config(service, default_lb_type=self.default_type).lb_type

    def _driver(self, service: KubeObject) -> LoadBalancerDriver:
        return self.drivers[self.lb_type(service)]

    # -- contract ---------------------------------------------------------------------------------------------
    def get_load_balancer_name(self, cluster_name: str, service: KubeObject) -> str:
        return self.drivers["nlb"].get_load_balancer_name(cluster_name, service)

    def get_load_balancer(self, cluster_name: str, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        try:
            return self._driver(service).get_load_balancer(cluster_name, service)
        except InvalidServiceConfig:
            # On the delete path the annotations may be invalid: look under both APIs.
            for driver in self.drivers.values():
                status, exists = driver.get_load_balancer(cluster_name, service)
                if exists:
                    return status, True
            return None, False

    def ensure_load_balancer(
        self, cluster_name: str, service: KubeObject, nodes: Sequence[KubeObject], flags: PassFlags = ROUTINE
    ) -> LoadBalancerStatus:
        chosen = self.lb_type(service)
        try:
            status = self.drivers[chosen].ensure_load_balancer(cluster_name, service, nodes, flags)
        except ClientError as err:
            if self.security_groups is not None and error_code(err) in _GROUP_GONE:
                self.security_groups.forget_node_groups()  # a cached shared group is gone: found or made again
            # Only an answer the Service author alone can cure is "invalid" (no retry); see ccm.aws.refusals.
            refusal = as_refusal(err)
            if refusal is None:
                raise
            raise refusal from err
        if flags.thorough or _hostname_changed(service, status):
            uid = p.meta(service)["uid"]
            for other, driver in self.drivers.items():
                if other != chosen and driver.load_balancer_exists_for_uid(uid):
                    # The Service switched type: the old LB goes once the new one is up; the group stays (the new
                    # LB uses it under the same name).
                    driver.delete_for_uid(uid)
        return status

    def update_load_balancer(
        self, cluster_name: str, service: KubeObject, nodes: Sequence[KubeObject], flags: PassFlags = ROUTINE
    ) -> None:
        self._driver(service).update_load_balancer(cluster_name, service, nodes, flags)

    def ensure_load_balancer_deleted(self, cluster_name: str, service: KubeObject) -> None:
        self.delete_for_uid(p.meta(service)["uid"], cluster_name)

    def delete_for_uid(self, uid: str, cluster_name: str | None = None) -> None:
        """Every type's LB first (each driver runs even if another must wait), then the shared group. Each driver
        leaves an LB that is not ours in place (ccm.aws.ownership.ours_to_delete), and the group stays with it."""
        waiting: RetryError | None = None
        all_gone = True
        for driver in self.drivers.values():
            try:
                all_gone = driver.delete_for_uid(uid, cluster_name) and all_gone
            except RetryError as err:
                waiting, all_gone = waiting or err, False
        if waiting is not None:
            raise waiting
        if self.security_groups is not None and all_gone:
            self.security_groups.delete_lb_group(names.load_balancer_name(uid), uid)

    def load_balancer_exists_for_uid(self, uid: str) -> bool:
        return any(driver.load_balancer_exists_for_uid(uid) for driver in self.drivers.values())


def _hostname_changed(service: KubeObject, status: LoadBalancerStatus) -> bool:
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    published = {i.get("hostname") for i in ingress if i.get("hostname")}
    return bool(published) and published != {i.hostname for i in status.ingress if i.hostname}
