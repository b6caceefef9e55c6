"""Pod readiness gates without a webhook (issue 24 item 4; docs/ip-targets.md): the decisions, pure.

A pod that lists `readinessGates: [{conditionType: target-health.ccm.aws/<service-name>}]` in its own spec is Ready
only once that condition is True (the kubelet: Ready = ContainersReady and every gate True). We set it True when
all the pod's targets of that Service (one per Service port, in each port's target group) are `healthy`, False
with AWS's reason otherwise, and ask for a re-check while a target can still become healthy: a scheduled message,
never a polling loop. No webhook injects the gate: the pod (its template) declares it, so nothing of ours sits in
the pod-creation path (LBC #4140).

The condition type names the Service, not a target group: a gate must not change when a target group is replaced
(an instance/ip switch makes a new one), and the Service is what the user writes into the pod template. A qualified
name: the prefix is a DNS subdomain, the name part a Service name (a DNS-1035 label, at most 63 characters: always a
valid name part).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ccm.contracts.endpoints import GATE_PREFIX, DesiredTargets, IpTarget, ServicePortKey, gates_of, is_pod_ready
from ccm.contracts.kube import KubeObject

HEALTHY: Final = "healthy"
# States from which a target can still become healthy on its own: worth a re-check after one health-check interval.
_MAY_CHANGE: Final = frozenset({"initial", "unhealthy"})
# A planned target DescribeTargetHealth did not list yet: AWS's own words for a target just registered.
_NOT_LISTED: Final = ("Elb.RegistrationInProgress", "Target registration is in progress")
NOT_REGISTERED: Final = "Target.NotRegistered"
_NOT_REGISTERED_MESSAGE: Final = "not registered with the load balancer"


def gate_condition_type(service_name: str) -> str:
    """Our readiness gate for a Service: `target-health.ccm.aws/<name>` (the LBC's is
    `target-health.elbv2.k8s.aws/<targetgroupbinding-name>`)."""
    return GATE_PREFIX + service_name


@dataclass(frozen=True)
class TargetHealth:
    """One target's entry of DescribeTargetHealth: state (initial, healthy, unhealthy, unused, draining,
    unavailable), reason code (Elb.InitialHealthChecking, Target.FailedHealthChecks, ...) and description."""

    state: str
    reason: str = ""
    description: str = ""


@dataclass(frozen=True)
class ConditionWrite:
    """A pod condition to patch (pods/status), guarded by the pod's UID."""

    pod: str
    uid: str
    condition: dict[str, str]


@dataclass(frozen=True)
class GatePlan:
    writes: tuple[ConditionWrite, ...]
    recheck_after_seconds: int | None  # None: nothing left that a later look could change


def _existing(pod: KubeObject, kind: str) -> dict[str, str] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return {k: str(v) for k, v in cond.items() if v is not None}
    return None


def wanted_condition(
    targets: Iterable[tuple[ServicePortKey, IpTarget]],
    health: Mapping[tuple[ServicePortKey, IpTarget], TargetHealth],
) -> tuple[str, str, str, bool]:
    """(status, reason, message, may_change) for a pod's registered targets: True when every one is healthy (no
    reason, as the LBC), else False naming the first target that is not, in port order, with AWS's reason code
    and description. may_change: some target can still turn healthy by itself (initial, unhealthy, not listed)."""
    worst: tuple[str, str, str] | None = None
    may_change = False
    for key, target in sorted(targets, key=lambda kt: (kt[0], kt[1].sort_key())):
        seen = health.get((key, target))
        if seen is not None and seen.state == HEALTHY:
            continue
        if seen is None:
            seen = TargetHealth("initial", *_NOT_LISTED)
            may_change = True
        state, description = seen.state, seen.description
        reason = seen.reason or f"Target.{state.capitalize()}"
        may_change = may_change or state in _MAY_CHANGE
        if worst is None:
            message = f"{target.ip}:{target.port} {state}" + (f": {description}" if description else "")
            worst = (reason, message, state)
    if worst is None:
        return "True", "", "", False
    return "False", worst[0], worst[1], may_change


def plan_gates(
    service_name: str,
    pods: Iterable[KubeObject],
    desired: DesiredTargets,
    health: Mapping[tuple[ServicePortKey, IpTarget], TargetHealth],
    *,
    interval_seconds: int,
    now: str,
) -> GatePlan:
    """The condition writes for the Service's gated pods and when to look again.

    `pods`: the pods read for this pass (those of gate_candidates() and any the caller holds); only those that
    declare this Service's gate and are not being deleted count. `health`: DescribeTargetHealth of each port's
    target group, keyed by (port, target). `now`: RFC 3339 time for lastTransitionTime. A pod with no registered
    target gets no write (the kubelet reads a missing condition as not ready), unless its condition says True: that
    is taken back, or the pod could turn Ready unregistered. The re-check comes one health-check interval later
    (AWS moves a target from initial to healthy after HealthyThresholdCount intervals)."""
    gate = gate_condition_type(service_name)
    writes: list[ConditionWrite] = []
    recheck = False
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        meta = pod.get("metadata") or {}
        name = str(meta.get("name"))
        if gate not in gates_of(pod) or meta.get("deletionTimestamp"):
            continue
        existing = _existing(pod, gate)
        targets = desired.pods.get(name, frozenset())
        if targets:
            status, reason, message, may_change = wanted_condition(targets, health)
        elif existing is not None and existing.get("status") == "True":
            status, reason, message, may_change = "False", NOT_REGISTERED, _NOT_REGISTERED_MESSAGE, False
        else:
            recheck = recheck or (name in desired.pending and not is_pod_ready(pod))
            continue
        recheck = recheck or may_change
        if existing and (existing.get("status"), existing.get("reason", ""), existing.get("message", "")) == (
            status,
            reason,
            message,
        ):
            continue
        changed = existing is None or existing.get("status") != status
        condition = {"type": gate, "status": status}
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        condition["lastTransitionTime"] = now if changed or not existing else existing.get("lastTransitionTime", now)
        writes.append(ConditionWrite(name, str(meta.get("uid") or ""), condition))
    return GatePlan(tuple(writes), interval_seconds if recheck else None)
