"""The pass: both load balancer types behind the one LoadBalancer contract (ccm.contracts.cloud).

`desire` builds the Service's model once (ccm.aws.model.build: the only parse of the pass); which deployer serves
it is its `aws-load-balancer-type` annotation (`nlb`, `clb`), else the cluster's default (template
DefaultLoadBalancerType). The pass keeps the checkpoint (ccm.aws.applied) and hands the model to the deployer
(ccm.aws.deployer), which observes, plans and applies; this module makes no AWS call itself.

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

from ccm.aws import names
from ccm.aws.applied import due_for_full_read
from ccm.aws.deployer import LoadBalancerDeployer
from ccm.aws.model import LoadBalancerModel, build
from ccm.aws.ownership import Ownership
from ccm.aws.refusals import refusals_raised
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    ROUTINE,
    Applied,
    AppliedStore,
    Desired,
    ImplementedElsewhere,
    Ingress,
    InvalidServiceConfig,
    KubeObject,
    LoadBalancerStatus,
    PassFlags,
    Publish,
    RetryError,
)
from ccm.contracts.cluster import Cluster
from ccm.contracts.endpoints import IpBackends, IpTarget, ServicePortKey
from ccm.contracts.readiness_gates import TargetHealth

log = logging.getLogger(__name__)


class LoadBalancers:
    def __init__(
        self,
        nlb: LoadBalancerDeployer,
        clb: LoadBalancerDeployer,
        cluster: Cluster,
        *,
        security_groups: SecurityGroups | None = None,
        applied: AppliedStore | None = None,
        ownership: Ownership | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`applied`: where checkpoints live (None: every pass reads AWS in full, as before checkpoints);
        `ownership`: asked by a checkpointed delete for UID-tagged leftovers (the Resource Groups Tagging API)."""
        self.deployers: dict[str, LoadBalancerDeployer] = {"nlb": nlb, "clb": clb}
        self.cluster = cluster
        self.security_groups = security_groups
        self.applied = applied
        self.ownership = ownership
        self.clock = clock

    def desire(self, service: KubeObject) -> LoadBalancerModel:
        return build(service, self.cluster)

    def _model(self, desired: Desired | KubeObject) -> LoadBalancerModel:
        """The pass's model; a plain Service (tools, tests) is built here, once."""
        if isinstance(desired, LoadBalancerModel):
            return desired
        if isinstance(desired, dict):
            return self.desire(desired)
        raise TypeError(f"not a desired state of this provider: {type(desired).__name__}")

    # -- contract ---------------------------------------------------------------------------------------------
    def get_load_balancer(self, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        """Under the type the Service asks for first; under both when it asks for nothing valid (a delete path)."""
        uid = str(p.meta(service)["uid"])
        try:
            chosen = self.desire(service).lb_type
        except (InvalidServiceConfig, ImplementedElsewhere):
            chosen = None
        order = sorted(self.deployers, key=lambda t: t != chosen)
        for lb_type in order if chosen is None else [chosen]:
            status = self.deployers[lb_type].status_for_uid(uid)
            if status is not None:
                return status, True
        return None, False

    def ensure_load_balancer(
        self,
        desired: Desired | KubeObject,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        publish: Publish | None = None,
        endpoints: IpBackends | Sequence[KubeObject] = (),
    ) -> LoadBalancerStatus:
        model = self._model(desired).with_members(nodes).with_endpoints(endpoints)
        chosen = model.lb_type
        if self.applied is not None:
            # Before the first write: a tombstone, a half-done delete or a checkpoint of the other type must not
            # outlive what this pass may create (a crash before the new checkpoint is stored would leave a record
            # that says "nothing there" or names only the old LB, and a later delete would trust it). Without a
            # record, a delete looks everything up by name.
            current = self.applied.get(model.uid)
            if current is not None and (current.deleted or current.released or current.lb_type != chosen):
                self.applied.forget(current.uid)
            switched = current is not None and not current.deleted and current.lb_type != chosen
        else:
            switched = False
        forget = self.security_groups.forget_node_groups if self.security_groups is not None else _nothing
        with refusals_raised(on_group_gone=forget):  # only the author can cure it: invalid, no retry
            status = self.deployers[chosen].deploy(model, flags, publish)
        if flags.thorough or switched or _hostname_changed(model.service, status):
            for other, deployer in self.deployers.items():
                if other != chosen and deployer.status_for_uid(model.uid) is not None:
                    # The Service switched type: the old LB goes once the new one is up; the group stays (the new
                    # LB uses it under the same name).
                    deployer.delete_for_uid(model.uid)
        if self.applied is not None and status.applied is not None:
            applied = status.applied
            if applied.verified_at > 0:  # 0: the deployer wants the next pass to be full
                applied = replace(applied, verified_at=self.clock())
            self.applied.put(applied)
        return status

    # -- the checkpoint (ccm.aws.applied) ----------------------------------------------------------------------
    def _checkpoint(self, model: LoadBalancerModel) -> Applied | None:
        """The Service's checkpoint when it matches what the Service asks for now."""
        if self.applied is None:
            return None
        applied = self.applied.get(model.uid)
        if applied is None or applied.deleted or applied.released:
            return None
        if applied.lb_type != model.lb_type or applied.fingerprint != model.fingerprint:
            return None
        return applied

    def ensure_unchanged(self, desired: Desired | KubeObject) -> LoadBalancerStatus | None:
        model = self._model(desired)
        # An `ip` Service too: the checkpoint holds no endpoints, but its target groups' ARNs, by which the caller
        # converges the targets next (update_load_balancer with trust_applied: one DescribeTargetHealth a group).
        applied = self._checkpoint(model)
        if applied is None or due_for_full_read(applied, self.clock()):
            return None
        hostname = self.deployers[model.lb_type].active_hostname(applied)
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
        self,
        desired: Desired | KubeObject,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        endpoints: IpBackends | Sequence[KubeObject] = (),
    ) -> None:
        """With a matching checkpoint: only the difference to the stored target set, by the stored ARNs (one call
        per target group and direction, no read). Otherwise (and always for `ip` targets, which the checkpoint
        does not hold) the deployer reads and converges the targets."""
        model = self._model(desired).with_members(nodes).with_endpoints(endpoints)
        deployer = self.deployers[model.lb_type]
        applied = self._checkpoint(model) if flags.trust_applied else None
        if model.target_type == "ip":
            if applied is None:
                deployer.deploy_targets(model, flags)
                return
            try:  # by the stored ARNs: one DescribeTargetHealth per group instead of reading the load balancer
                deployer.apply_ip_targets(applied, model)
            except RetryError:
                assert self.applied is not None
                self.applied.forget(applied.uid)  # a stored group is gone: the retry reads everything
                raise
            return
        wanted = model.instances
        if applied is not None:
            add, remove = wanted - applied.targets, applied.targets - wanted
            if not add and not remove:
                return
            try:
                refused = deployer.apply_targets(applied, add, remove)
            except RetryError:
                assert self.applied is not None
                self.applied.forget(applied.uid)  # a stored id is gone: the retry reads everything
                raise
            assert self.applied is not None
            self.applied.put_targets(applied.uid, model.fingerprint, wanted - frozenset(refused))
            return
        deployer.deploy_targets(model, flags)
        if self._checkpoint(model) is not None and self.applied is not None:
            # The full update converged the targets: the checkpoint's set follows, or the next diff would be wrong.
            self.applied.put_targets(model.uid, model.fingerprint, wanted)

    def ip_target_health(self, desired: Desired | KubeObject) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        model = self._model(desired)
        if model.target_type != "ip":
            return {}
        applied = self._checkpoint(model)
        deployer = self.deployers[model.lb_type]
        return deployer.ip_health_by_arn(applied, model) if applied is not None else deployer.ip_target_health(model)

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
        tagged = self.ownership.elb_arns_for_uid(applied.uid) if self.ownership is not None else set()
        if not applied.released:
            self.deployers[applied.lb_type].delete_applied(applied, frozenset(tagged))
        known = {applied.lb_id, *(arn for arn, _ in applied.target_groups)}
        # A Classic ELB is recorded by name; the tagging API answers its ARN (...:loadbalancer/<name>).
        if leftover := sorted(a for a in tagged if a not in known and a.rsplit("loadbalancer/", 1)[-1] not in known):
            log.info("%s: more resources carry its UID tag than it recorded: %s", applied.uid, leftover)
            return False
        if self.security_groups is not None and applied.lb_type == "nlb" and not applied.security_groups:
            # An NLB without groups: its CIDR rules on the node groups (ccm.aws.nlb_node_rules) go with it.
            self.security_groups.revoke_node_access(names.load_balancer_name(applied.uid), None)
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
        """Every type's LB first (each deployer runs even if another must wait), then the shared group. Each
        deployer leaves an LB that is not ours in place (`Cluster.claim`), and the group stays with it."""
        waiting: RetryError | None = None
        all_gone = True
        for deployer in self.deployers.values():
            try:
                all_gone = deployer.delete_for_uid(uid) and all_gone
            except RetryError as err:
                waiting, all_gone = waiting or err, False
        if waiting is not None:
            raise waiting
        if self.security_groups is not None and all_gone:
            self.security_groups.delete_lb_group(names.load_balancer_name(uid), uid)

    def load_balancer_exists_for_uid(self, uid: str) -> bool:
        """Either type (tools and tests; the controller asks `applied_for` and the tags)."""
        return any(deployer.status_for_uid(uid) is not None for deployer in self.deployers.values())


def _nothing() -> None:
    return None


def _hostname_changed(service: KubeObject, status: LoadBalancerStatus) -> bool:
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    published = {i.get("hostname") for i in ingress if i.get("hostname")}
    return bool(published) and published != {i.hostname for i in status.ingress if i.hostname}
