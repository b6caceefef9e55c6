"""One service reconcile: re-read the live Service, decide (pure), then act through the contracts.

Level-triggered: the delta only names the object (and hints at its previous UID); everything is re-read, every
step is idempotent, and a crash at any line is repaired by the retry (which runs a thorough pass).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

from ccm.contracts import kube as p
from ccm.contracts.cloud import (
    ROUTINE,
    Desired,
    HostnamePublished,
    ImplementedElsewhere,
    InvalidServiceConfig,
    KubeObject,
    LoadBalancer,
    LoadBalancerStatus,
    OwnershipReader,
    PassFlags,
    RetryError,
)
from ccm.contracts.cluster import Cluster
from ccm.contracts.endpoints import IpBackends, address_type, gate_candidates, gates_of
from ccm.contracts.kube import KubeEndpoints, KubeServices, Members
from ccm.contracts.messages import Delta
from ccm.contracts.readiness_gates import gate_condition_type, plan_gates
from ccm.retry import CONTINUATION_DELAY_SECONDS
from ccm.service.decisions import Action, confirm_delete, decide, hint_delete_refusal, ingress_equal

log = logging.getLogger(__name__)

# Upstream's reason for every failed ensure or delete (alerts of cloud-provider-aws users key on it); the message
# says what failed, naming the annotation and the value for bad input.
FAILED = "SyncLoadBalancerFailed"
# A pass that waits on its pods' targets to turn healthy (readiness gates) comes back while its record has been
# received fewer times than this: below the queue's maxReceiveCount (10), so a pod that never turns healthy (a
# crash loop) does not send the record to the DLQ; the next endpoint change or resync looks again.
GATE_RECHECK_ATTEMPTS: Final = 8


class SyncFailed(Exception):
    """A reconcile failed; the event was recorded. `retry_after` is set for RetryError-style fixed delays."""

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(slots=True)
class Outcome:
    action: Action
    status_written: bool = False
    events: list[str] = field(default_factory=list)
    invalid: str | None = None
    refused: list[str] = field(default_factory=list)  # deletes a message asked for that its resources refuted
    status_written_at: float = 0.0  # when the first status write of this pass landed (the hostname's latency)
    # Set when the pass stopped after publishing a new LB's hostname (PassFlags.hostname_first): the record is to
    # come back after this many seconds for the rest, neither a failure nor a wait.
    continue_in: int | None = None
    reason: str = ""  # why the decision table chose `action`: said on the pass's one "reconciled" line


class ServiceReconciler:
    def __init__(
        self,
        kube: KubeServices,
        balancer: LoadBalancer,
        by_uid: LoadBalancer,
        members: Members,
        cluster: Cluster,
        *,
        ownership: OwnershipReader,
        endpoints: KubeEndpoints | None = None,
    ) -> None:
        """`endpoints`: where EndpointSlices are read for `ip` targets (None: no `ip` Service is served)."""
        self.kube = kube
        self.members = members
        self.balancer = balancer
        self.by_uid = by_uid
        self.cluster = cluster
        self.ownership = ownership
        self.endpoints = endpoints

    def reconcile(self, delta: Delta, flags: PassFlags = ROUTINE) -> Outcome:
        """`flags`: how much the drivers look at in this pass (the runtime decides them per record)."""
        namespace, name = delta.namespace_name
        live = self.kube.get_service(namespace, name)
        decision = decide(delta, live, self.cluster.load_balancer_class, self.cluster.claim_unclassed)
        outcome = Outcome(decision.action, reason=decision.reason)
        # DEBUG: the runtime's "reconciled" line carries the action and its reason (one INFO line a pass, the
        # largest share of the log bill in an `ip` rollout).
        log.debug("decision %s: %s", decision.action.value, decision.reason)
        try:
            if decision.delete_previous_uid:
                self._delete_on_hint(delta.key, decision.delete_previous_uid, live, outcome)
            if decision.action is Action.DELETE_GONE:
                self._delete_on_hint(delta.key, delta.uid, live, outcome)
        except RetryError as err:  # e.g. the old LB's security group still held by its network interfaces
            log.info("%s: waiting: %s", delta.key, err)
            raise SyncFailed(str(err), retry_after=err.delay_seconds) from err
        except Exception as err:
            message = f"deleting the load balancer of an earlier UID: {err}"
            log.warning("%s: sync failed: %s", delta.key, message, extra={"service_key": delta.key})
            if live is not None:  # the Service re-created under the same name sees why it waits
                self._event(live, outcome, "Warning", FAILED, f"Error syncing load balancer: {message}")
            raise SyncFailed(message) from err
        if live is None or decision.action is Action.NOTHING or decision.action is Action.DELETE_GONE:
            return outcome
        try:
            if decision.action is Action.ENSURE:
                # A periodic SYNC of a Service that already has its status stays quiet (no Normal events every
                # resync); a first sight through SYNC (watcher relist) is announced as usual.
                has_status = bool(((live.get("status") or {}).get("loadBalancer") or {}).get("ingress"))
                self._ensure(
                    live,
                    outcome,
                    flags,
                    quiet=delta.type == "SYNC" and has_status,
                    register=delta.type in ("ADDED", "MODIFIED"),
                )
            elif decision.action is Action.UPDATE_HOSTS:
                self._update_hosts(live, outcome, flags)
            elif decision.action is Action.UPDATE_ENDPOINTS:
                self._update_endpoints(live, outcome, flags)
            else:
                self._delete(live, outcome, write_status=decision.action is Action.DELETE)
        except InvalidServiceConfig as err:
            # Only the Service author can cure it: tell them (upstream's reason), change nothing in AWS, and do not
            # retry until the Service changes.
            outcome.invalid = str(err)
            log.warning("%s: invalid configuration, not retried: %s", delta.key, err, extra={"service_key": delta.key})
            self._event(live, outcome, "Warning", FAILED, f"Error syncing load balancer: {err}")
        except RetryError as err:  # waiting on AWS (provisioning, a target's health) is not failing
            log.info("%s: waiting %d s: %s", delta.key, err.delay_seconds, err)
            raise SyncFailed(str(err), retry_after=err.delay_seconds) from err
        except SyncFailed as err:
            log.warning("%s: sync failed: %s", delta.key, err, extra={"service_key": delta.key})
            raise  # its event was recorded
        except Exception as err:
            # Every other failure, AWS-side ones (ccm.aws.refusals) included: Warning + log, retried with backoff.
            log.warning("%s: sync failed: %s", delta.key, err, extra={"service_key": delta.key})
            self._event(live, outcome, "Warning", FAILED, f"Error syncing load balancer: {err}")
            raise SyncFailed(str(err)) from err
        return outcome

    # -- ENSURE path ----------------------------------------------------------------------------------------------
    def _ensure(self, svc: KubeObject, outcome: Outcome, flags: PassFlags, quiet: bool, register: bool) -> None:
        desired: Desired | None = None
        if flags.trust_applied and p.has_finalizer(svc):
            # What was applied still stands (one AWS read): nothing changed, so nothing is said or registered.
            try:
                desired = self.balancer.desire(svc)  # the pass's one parse of the Service
            except (InvalidServiceConfig, ImplementedElsewhere):
                desired = None  # the full pass below says why, where it always did
            unchanged = None if desired is None else self.balancer.ensure_unchanged(desired)
            if unchanged is not None and desired is not None:
                backends = self._endpoints_of(svc, desired)  # no read unless `ip`
                if desired.target_type == "ip":
                    # Its targets are not in the checkpoint: converged from the slices, by the stored group ARNs.
                    self.balancer.update_load_balancer(desired, (), flags, backends)
                self._write_status(svc, unchanged.to_api().get("ingress", []), outcome)
                self._readiness_gates(svc, desired, backends, outcome, flags)
                return
        flags = replace(flags, first_sight=not p.has_finalizer(svc))
        if not quiet:
            self._event(svc, outcome, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
        current_ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")
        if not p.has_finalizer(svc):
            # Before any cloud call: a delete racing the creation must find the finalizer and clean up.
            svc = self.kube.set_finalizers(svc, [*(p.meta(svc).get("finalizers") or []), p.FINALIZER])
        try:
            # Before the members are read: an invalid annotation (a node selector among them) is said alone.
            desired = desired or self.balancer.desire(svc)
        except ImplementedElsewhere:
            return
        # Register before reading the members: a node change after this point finds the Service registered and
        # sends it a host update; one before it is in the table when we read (the updater tells again after
        # storing). Registering after the ensure left targets stale when a node left in between (chaos test).
        registered = register or not current_ingress
        if registered:
            self.members.register(svc, first_time=not current_ingress)
        nodes = self.members.for_service(svc)
        if not nodes:
            self._event(
                svc, outcome, "Warning", "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer"
            )
        published: list[list[dict[str, Any]]] = []

        def publish(early: LoadBalancerStatus) -> None:
            # The hostname as soon as AWS gives it; the listeners and targets follow in this same pass.
            published.append(early.to_api().get("ingress", []))
            self._write_status(svc, published[-1], outcome)

        endpoints = self._endpoints_of(svc, desired)
        try:
            status = self.balancer.ensure_load_balancer(desired, nodes, flags, publish, endpoints)
        except ImplementedElsewhere:
            return
        except HostnamePublished:
            # A hostname-first pass: the status is written; the rest comes with the record's next receive (a
            # thorough retry). No checkpoint was stored, so a delete meanwhile looks everything up by name.
            outcome.continue_in = CONTINUATION_DELAY_SECONDS
            return
        if status is None:
            raise RuntimeError("failed to ensure load balancer: no status returned")
        for warning in status.warnings:
            self._event(svc, outcome, "Warning", warning.reason, warning.message)
        if not quiet:  # what the annotations mean here: said when the Service changed, not on every resync
            for notice in status.notices:
                self._event(svc, outcome, "Warning", notice.reason, notice.message)
        if not quiet:
            self._event(svc, outcome, "Normal", "EnsuredLoadBalancer", "Ensured load balancer")
        final = status.to_api().get("ingress", [])
        if not (published and ingress_equal(published[-1], final)):
            self._write_status(svc, final, outcome)
        if not registered and outcome.status_written:
            # Only when the Service changed: a no-op resync writes nothing anywhere.
            self.members.register(svc)
        self._readiness_gates(svc, desired, endpoints, outcome, flags)

    # -- node-driven host update (UpdateLoadBalancer) ------------------------------------------------------------
    def _update_hosts(self, svc: KubeObject, outcome: Outcome, flags: PassFlags) -> None:
        nodes = self.members.for_service(svc)
        if not nodes:
            self._event(
                svc, outcome, "Warning", "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer"
            )
        try:
            desired = self.balancer.desire(svc)
            self.balancer.update_load_balancer(desired, nodes, flags, self._endpoints_of(svc, desired))
        except ImplementedElsewhere:
            return
        except (InvalidServiceConfig, RetryError):
            raise  # bad input is a Warning without retries; a RetryError keeps its delay (see reconcile)
        except Exception as err:
            names = [n["metadata"]["name"] for n in nodes]
            shown = ", ".join(names[:20]) + (f", <{len(names) - 20} more>" if len(names) > 20 else "")
            message = f"Error updating load balancer with new hosts {shown}: {err}"
            self._event(svc, outcome, "Warning", "UpdateLoadBalancerFailed", message)
            raise SyncFailed(message) from err
        self._event(svc, outcome, "Normal", "UpdatedLoadBalancer", "Updated load balancer with new hosts")

    # -- ip targets: the Service's EndpointSlices changed (the watcher's ENDPOINTS hint) ------------------------------
    def _update_endpoints(self, svc: KubeObject, outcome: Outcome, flags: PassFlags) -> None:
        """Only the `ip` targets, re-read from the API (the hint says nothing itself); no event: a rolling update
        changes endpoints hundreds of times. A hint for a Service no longer in `ip` mode changes nothing."""
        try:
            desired = self.balancer.desire(svc)
        except ImplementedElsewhere:
            return
        if desired.target_type != "ip":
            return
        backends = self._endpoints_of(svc, desired)
        self.balancer.update_load_balancer(desired, (), flags, backends)
        self._readiness_gates(svc, desired, backends, outcome, flags)

    def _endpoints_of(self, svc: KubeObject, desired: Desired) -> IpBackends:
        """What `ip` targets need from the API: the Service's EndpointSlices and, only when some endpoint is not
        ready, its pods (one may wait only on our readiness gate: registered so that the gate can turn true)."""
        if desired.target_type != "ip" or self.endpoints is None:
            return IpBackends()
        namespace, name = p.meta(svc)["namespace"], p.meta(svc)["name"]
        slices = tuple(self.endpoints.list_endpoint_slices(namespace, name))
        candidates = gate_candidates(slices, address_type(svc))
        if not candidates:
            return IpBackends(slices)
        gate = gate_condition_type(name)
        pods = self.endpoints.pods_by_name(namespace, candidates, p.spec(svc).get("selector") or None)
        if not any(gate in gates_of(pod) for pod in pods.values()):
            return IpBackends(slices)  # an ordinary not-ready pod: nothing holds it for us, no member read
        ready_nodes = frozenset(str(p.meta(n).get("name")) for n in self.members.for_service(svc))
        return IpBackends(slices, pods, ready_nodes, gate)

    def _readiness_gates(
        self, svc: KubeObject, desired: Desired, backends: IpBackends, outcome: Outcome, flags: PassFlags
    ) -> None:
        """Pods declaring our gate (`target-health.ccm.aws/<service>`) get its condition from their targets' health;
        while one can still turn healthy, the record comes back after one health-check interval (no polling loop,
        no webhook), at most until the queue's receive budget is nearly spent (then the next change or resync)."""
        if self.endpoints is None or not backends.pods:
            return
        gate = gate_condition_type(p.meta(svc)["name"])
        gated = [pod for pod in backends.pods.values() if gate in gates_of(pod)]
        if not gated:
            return
        plan = plan_gates(
            p.meta(svc)["name"],
            gated,
            backends.targets(svc),
            self.balancer.ip_target_health(desired),
            interval_seconds=desired.health_check_interval,
            now=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        for write in plan.writes:
            self.endpoints.patch_pod_condition(p.meta(svc)["namespace"], write.pod, write.uid, write.condition)
        if plan.recheck_after_seconds is not None and flags.attempt < GATE_RECHECK_ATTEMPTS:
            outcome.continue_in = plan.recheck_after_seconds

    # -- DELETE path ----------------------------------------------------------------------------------------------
    def _delete(self, svc: KubeObject, outcome: Outcome, write_status: bool) -> None:
        key, uid = f"{p.meta(svc).get('namespace')}/{p.meta(svc).get('name')}", str(p.meta(svc)["uid"])
        applied = self.balancer.applied_for(uid, key)
        if applied is not None and write_status:
            # Our own record says what we made (True) or that we deleted it all (False): no ownership read. (The
            # IAM policy lets us delete only resources carrying our UID tag, so AWS confirms it at the delete.)
            if applied:
                self._event(svc, outcome, "Normal", "DeletingLoadBalancer", "Deleting load balancer")
                self.balancer.ensure_load_balancer_deleted(svc)
            self._finish_delete(svc, outcome, write_status)
            return
        shared = not p.spec(svc).get("loadBalancerClass") and not self.cluster.claim_unclassed
        verdict = confirm_delete(outcome.action, key, uid, self.ownership.tags_for_uid(uid), shared_finalizer=shared)
        outcome.action, refusal = verdict.action, verdict.refusal
        if outcome.action is Action.NOTHING:
            return  # what exists is the other controller's: its finalizer, its load balancer
        if refusal is not None:
            # Never ours to delete (a load balancer of another Service under this name): the finalizer stays.
            outcome.refused.append(refusal)
            self._event(svc, outcome, "Warning", "DeleteRefused", f"Not deleting a load balancer: {refusal}")
            return
        try:
            _, exists = self.balancer.get_load_balancer(svc)
        except Exception as err:
            raise RuntimeError(f"failed to check if load balancer exists before cleanup: {err}") from err
        if exists:
            self._event(svc, outcome, "Normal", "DeletingLoadBalancer", "Deleting load balancer")
        # Always run: it also removes target groups a crash orphaned after the LB itself was gone.
        self.balancer.ensure_load_balancer_deleted(svc)
        self._finish_delete(svc, outcome, write_status)

    def _finish_delete(self, svc: KubeObject, outcome: Outcome, write_status: bool) -> None:
        self.members.unregister(svc)
        if write_status:
            # Status first: once the finalizer goes, a Service being deleted is gone and its status PATCH would only
            # get a 404 (upstream patches after and ignores that 404; clearing first spends no call on it). The
            # finalizer patch then carries the resourceVersion the status write made.
            cleared = self._write_status(svc, [], outcome)
            if cleared is None:
                return  # the Service is gone or another one now: its finalizer is not ours to touch
            svc = cleared
        remaining = [f for f in p.meta(svc).get("finalizers") or [] if f != p.FINALIZER]
        svc = self.kube.set_finalizers(svc, remaining)
        self._event(svc, outcome, "Normal", "DeletedLoadBalancer", "Deleted load balancer")

    def _delete_on_hint(self, key: str, uid: str, live: KubeObject | None, outcome: Outcome) -> None:
        """The API confirmed that no live Service has `uid` (decide); the resources must say they are that
        Service's (decisions.hint_delete_refusal), else nothing is deleted: a message is a hint, never an order. Our
        own record of what we applied for the UID under this very key is such a proof (and a tombstone says there is
        nothing left); a record under another key proves nothing, and the tags decide."""
        applied = self.balancer.applied_for(uid, key)
        if applied is False:
            return
        if applied:
            self.by_uid.delete_for_uid(uid)
            return
        refusal = hint_delete_refusal(key, uid, self.ownership.tags_for_uid(uid))
        if refusal is None:
            self.by_uid.delete_for_uid(uid)
            return
        outcome.refused.append(refusal)
        log.warning("not deleting on a message about %s: %s", key, refusal)
        if live is not None:
            self._event(live, outcome, "Warning", "DeleteRefused", f"Not deleting a load balancer: {refusal}")

    # -- helpers --------------------------------------------------------------------------------------------------
    def _write_status(self, svc: KubeObject, ingress: list[dict[str, Any]], outcome: Outcome) -> KubeObject | None:
        """The Service after the write (as it was when nothing needed writing); None when it is gone or another."""
        current = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")
        if ingress_equal(current, ingress):
            return svc
        written = self.kube.patch_load_balancer_status(svc, ingress)
        if written is not None and not outcome.status_written_at:
            outcome.status_written_at = time.time()
        outcome.status_written = outcome.status_written or written is not None
        return written

    def _event(self, svc: KubeObject, outcome: Outcome, event_type: str, reason: str, message: str) -> None:
        outcome.events.append(reason)
        try:
            self.kube.record_event(svc, event_type, reason, message)
        except Exception:  # events are best effort, as upstream's asynchronous recorder
            log.warning("could not record event %s", reason, exc_info=True)
