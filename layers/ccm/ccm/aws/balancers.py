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

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws.applied import due_for_full_read
from ccm.aws.errors import error_code
from ccm.aws.lbconfig import LbType, parse_load_balancer_config
from ccm.aws.ownership import tagged_elb_arns
from ccm.aws.refusals import as_refusal
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    ROUTINE,
    Applied,
    AppliedStore,
    ImplementedElsewhere,
    Ingress,
    InvalidServiceConfig,
    KubeObject,
    LoadBalancerDriver,
    LoadBalancerStatus,
    PassFlags,
    Publish,
    RetryError,
)

log = logging.getLogger(__name__)
_GROUP_GONE = ("InvalidSecurityGroup", "InvalidGroup.NotFound")


class LoadBalancers:
    def __init__(
        self,
        nlb: LoadBalancerDriver,
        clb: LoadBalancerDriver,
        default_type: LbType,
        *,
        security_groups: SecurityGroups | None = None,
        applied: AppliedStore | None = None,
        tagging: object | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`applied`: where checkpoints live (None: every pass reads AWS in full, as before checkpoints);
        `tagging`: the Resource Groups Tagging API client a checkpointed delete asks for UID-tagged leftovers."""
        self.drivers: dict[str, LoadBalancerDriver] = {"nlb": nlb, "clb": clb}
        self.security_groups = security_groups
        self.default_type: LbType = default_type
        self.applied = applied
        self.tagging = tagging
        self.clock = clock

    def lb_type(self, service: KubeObject) -> str:
        return parse_load_balancer_config(service, default_lb_type=self.default_type).lb_type

    def _driver(self, service: KubeObject) -> LoadBalancerDriver:
        return self.drivers[self.lb_type(service)]

    # -- contract ---------------------------------------------------------------------------------------------
    def get_load_balancer_name(self, service: KubeObject) -> str:
        return self.drivers["nlb"].get_load_balancer_name(service)

    def get_load_balancer(self, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        try:
            return self._driver(service).get_load_balancer(service)
        except InvalidServiceConfig:
            # On the delete path the annotations may be invalid: look under both APIs.
            for driver in self.drivers.values():
                status, exists = driver.get_load_balancer(service)
                if exists:
                    return status, True
            return None, False

    def ensure_load_balancer(
        self,
        service: KubeObject,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        publish: Publish | None = None,
    ) -> LoadBalancerStatus:
        chosen = self.lb_type(service)
        if self.applied is not None:
            # Before the first write: a tombstone, a half-done delete or a checkpoint of the other type must not
            # outlive what this pass may create (a crash before the new checkpoint is stored would leave a record
            # that says "nothing there" or names only the old LB, and a later delete would trust it). Without a
            # record, a delete looks everything up by name.
            current = self.applied.get(p.meta(service)["uid"])
            if current is not None and (current.deleted or current.released or current.lb_type != chosen):
                self.applied.forget(current.uid)
            switched = current is not None and not current.deleted and current.lb_type != chosen
        else:
            switched = False
        try:
            status = self.drivers[chosen].ensure_load_balancer(service, nodes, flags, publish)
        except ClientError as err:
            if self.security_groups is not None and error_code(err) in _GROUP_GONE:
                self.security_groups.forget_node_groups()  # a cached shared group is gone: found or made again
            # Only an answer the Service author alone can cure is "invalid" (no retry); see ccm.aws.refusals.
            refusal = as_refusal(err)
            if refusal is None:
                raise
            raise refusal from err
        if flags.thorough or switched or _hostname_changed(service, status):
            uid = p.meta(service)["uid"]
            for other, driver in self.drivers.items():
                if other != chosen and driver.load_balancer_exists_for_uid(uid):
                    # The Service switched type: the old LB goes once the new one is up; the group stays (the new
                    # LB uses it under the same name).
                    driver.delete_for_uid(uid)
        if self.applied is not None and status.applied is not None:
            applied = status.applied
            if applied.verified_at > 0:  # 0: the driver wants the next pass to be full
                applied = replace(applied, verified_at=self.clock())
            self.applied.put(applied)
        return status

    # -- the checkpoint (ccm.aws.applied) ----------------------------------------------------------------------
    def _checkpoint(self, service: KubeObject) -> tuple[LoadBalancerDriver, str, Applied] | None:
        """The Service's checkpoint when it matches what the Service asks for now, with its driver and fingerprint."""
        if self.applied is None:
            return None
        try:
            lb_type = self.lb_type(service)
            driver = self.drivers[lb_type]
            fingerprint = driver.fingerprint(service)
        except (InvalidServiceConfig, ImplementedElsewhere):
            return None  # the full pass says why
        applied = self.applied.get(p.meta(service)["uid"])
        if applied is None or applied.deleted or applied.released:
            return None
        if applied.lb_type != lb_type or applied.fingerprint != fingerprint:
            return None
        return driver, fingerprint, applied

    def ensure_unchanged(self, service: KubeObject) -> LoadBalancerStatus | None:
        found = self._checkpoint(service)
        if found is None or due_for_full_read(found[2], self.clock()):
            return None
        driver, _, applied = found
        hostname = driver.active_hostname(applied)
        if hostname is None:
            log.info("%s: the load balancer of the checkpoint is gone or failed: full pass", applied.lb_id)
            return None
        return LoadBalancerStatus((Ingress(hostname=hostname),))

    def applied_for(self, uid: str, service_key: str | None = None) -> bool | None:
        applied = None if self.applied is None else self.applied.get(uid)
        if applied is None:
            return None
        if applied.deleted:
            return False
        return None if service_key is not None and applied.service_key != service_key else True

    def update_load_balancer(
        self, service: KubeObject, nodes: Sequence[KubeObject], flags: PassFlags = ROUTINE
    ) -> None:
        """With a matching checkpoint: only the difference to the stored target set, by the stored ARNs (one call
        per target group and direction, no read). Otherwise the driver reads and converges the targets."""
        found = self._checkpoint(service) if flags.trust_applied else None
        wanted = frozenset(i for i in map(p.instance_id, nodes) if i)
        if found is not None:
            driver, fingerprint, applied = found
            add, remove = wanted - applied.targets, applied.targets - wanted
            if not add and not remove:
                return
            try:
                refused = driver.apply_targets(applied, add, remove)
            except RetryError:
                assert self.applied is not None
                self.applied.forget(applied.uid)  # a stored id is gone: the retry reads everything
                raise
            assert self.applied is not None
            self.applied.put_targets(applied.uid, fingerprint, wanted - frozenset(refused))
            return
        self._driver(service).update_load_balancer(service, nodes, flags)
        if (again := self._checkpoint(service)) is not None and self.applied is not None:
            # The full update converged the targets: the checkpoint's set follows, or the next diff would be wrong.
            self.applied.put_targets(again[2].uid, again[1], wanted)

    def ensure_load_balancer_deleted(self, service: KubeObject) -> None:
        self.delete_for_uid(p.meta(service)["uid"])

    def delete_for_uid(self, uid: str) -> None:
        """With a checkpoint: by its stored ids, plus whatever else carries the UID tag (one tagging read: target
        groups a crash orphaned, an LB of the other type). Without one, every type's LB is looked up by name. Then
        the Service's own security group, and a tombstone, so an echo of this delete costs nothing."""
        applied = None if self.applied is None else self.applied.get(uid)
        if applied is not None and applied.deleted:
            return
        if applied is None or not self._delete_applied(applied):
            self._delete_by_name(uid)
        if self.applied is not None:
            self.applied.tombstone(uid)

    def _delete_applied(self, applied: Applied) -> bool:
        """False when something else carries the UID tag: the by-name path then deletes it too."""
        tagged = tagged_elb_arns(self.tagging, applied.uid) if self.tagging is not None else set()
        if not applied.released:
            self.drivers[applied.lb_type].delete_applied(applied, frozenset(tagged))
        known = {applied.lb_id, *(arn for arn, _ in applied.target_groups)}
        # A Classic ELB is recorded by name; the tagging API answers its ARN (...:loadbalancer/<name>).
        if leftover := sorted(a for a in tagged if a not in known and a.rsplit("loadbalancer/", 1)[-1] not in known):
            log.info("%s: more resources carry its UID tag than it recorded: %s", applied.uid, leftover)
            return False
        if self.security_groups is not None and applied.security_groups:
            name = names.load_balancer_name(applied.uid)
            # What the LB carried, as recorded: the shared groups alone mean no group or node rule of its own (no
            # call); no creation time, so no read-after-create check (the record is durable, unlike a name read).
            # A young LB's own group may not be readable by name yet (EC2 reads are eventually consistent): the
            # recorded creation time lets before_lb_delete wait for it, as for an LB read from AWS.
            created = datetime.fromtimestamp(applied.created_at, UTC) if applied.created_at else None
            self.security_groups.before_lb_delete(
                {"LoadBalancerName": name, "SecurityGroups": list(applied.security_groups), "CreatedTime": created}
            )
            try:
                self.security_groups.delete_lb_group(name, applied.uid)
            except RetryError:
                # AWS holds the group a while: the retry deletes only the group, not the LB a second time.
                if not applied.released and self.applied is not None:
                    self.applied.put(replace(applied, released=True))
                raise
        return True

    def _delete_by_name(self, uid: str) -> None:
        """Every type's LB first (each driver runs even if another must wait), then the shared group. Each driver
        leaves an LB that is not ours in place (`Cluster.claim`), and the group stays with it."""
        waiting: RetryError | None = None
        all_gone = True
        for driver in self.drivers.values():
            try:
                all_gone = driver.delete_for_uid(uid) and all_gone
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
