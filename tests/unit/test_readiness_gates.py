"""Readiness gates without a webhook (ccm.contracts.readiness_gates): which condition each gated pod gets, when
nothing is written, and when a re-check is scheduled."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ccm.contracts.endpoints import DesiredTargets, IpTarget, ServicePortKey
from ccm.contracts.readiness_gates import TargetHealth, gate_condition_type, plan_gates, wanted_condition

HTTP = ServicePortKey(80, "TCP")
TLS = ServicePortKey(443, "TCP")
GATE = gate_condition_type("web")
NOW = "2026-08-01T12:00:00Z"
EARLIER = "2026-08-01T11:00:00Z"
T1 = IpTarget("10.0.0.10", 8080)
T2 = IpTarget("10.0.0.11", 8080)
INITIAL = TargetHealth("initial", "Elb.InitialHealthChecking", "Initial health checks in progress")
HEALTHY = TargetHealth("healthy")
UNHEALTHY = TargetHealth("unhealthy", "Target.FailedHealthChecks", "Health checks failed")


def pod(name: str, *, gates: tuple[str, ...] = (GATE,), conditions: list[dict[str, Any]] | None = None) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"readinessGates": [{"conditionType": g} for g in gates]},
        "status": {"conditions": conditions or [{"type": "Ready", "status": "False"}]},
    }


def desired(pods: dict[str, set[tuple[ServicePortKey, IpTarget]]], pending: Iterable[str] = ()) -> DesiredTargets:
    by_port: dict[ServicePortKey, set[IpTarget]] = {}
    for targets in pods.values():
        for key, target in targets:
            by_port.setdefault(key, set()).add(target)
    return DesiredTargets(
        {k: frozenset(v) for k, v in by_port.items()},
        {n: frozenset(t) for n, t in pods.items()},
        frozenset(pending),
    )


def test_the_gate_is_a_qualified_name_naming_the_service() -> None:
    longest = "s" * 63  # a Service name is a DNS-1035 label: at most 63 characters
    prefix, name = gate_condition_type(longest).split("/")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", prefix)
    assert len(prefix) <= 253 and name == longest
    assert GATE == "target-health.ccm.aws/web"


def test_healthy_targets_set_true_and_others_false_with_awss_reason() -> None:
    plan = plan_gates(
        "web",
        [pod("a"), pod("b")],
        desired({"a": {(HTTP, T1)}, "b": {(HTTP, T2)}}),
        {(HTTP, T1): HEALTHY, (HTTP, T2): INITIAL},
        interval_seconds=10,
        now=NOW,
    )
    assert [(w.pod, w.uid, w.condition) for w in plan.writes] == [
        ("a", "uid-a", {"type": GATE, "status": "True", "lastTransitionTime": NOW}),
        (
            "b",
            "uid-b",
            {
                "type": GATE,
                "status": "False",
                "reason": "Elb.InitialHealthChecking",
                "message": "10.0.0.11:8080 initial: Initial health checks in progress",
                "lastTransitionTime": NOW,
            },
        ),
    ]
    assert plan.recheck_after_seconds == 10  # b's target is still initial


def test_every_port_must_be_healthy_and_the_first_that_is_not_is_named() -> None:
    t443 = IpTarget("10.0.0.10", 8443)
    status = wanted_condition({(HTTP, T1), (TLS, t443)}, {(HTTP, T1): HEALTHY, (TLS, t443): UNHEALTHY})
    assert status == ("False", "Target.FailedHealthChecks", "10.0.0.10:8443 unhealthy: Health checks failed", True)
    # a target planned but not yet listed by DescribeTargetHealth: AWS's words for a registration in progress
    assert wanted_condition({(HTTP, T1)}, {}) == (
        "False",
        "Elb.RegistrationInProgress",
        "10.0.0.10:8080 initial: Target registration is in progress",
        True,
    )
    # a target in a zone the load balancer does not serve stays unused: no re-check can fix it
    unused = TargetHealth("unused", "Target.NotInUse", "Target is in an Availability Zone that is not enabled")
    assert wanted_condition({(HTTP, T1)}, {(HTTP, T1): unused})[3] is False


def test_an_unchanged_condition_is_not_written_and_a_reason_change_keeps_the_transition_time() -> None:
    same = {"type": GATE, "status": "True", "lastTransitionTime": EARLIER}
    plan = plan_gates(
        "web",
        [pod("a", conditions=[same])],
        desired({"a": {(HTTP, T1)}}),
        {(HTTP, T1): HEALTHY},
        interval_seconds=10,
        now=NOW,
    )
    assert plan.writes == () and plan.recheck_after_seconds is None
    was_initial = {
        "type": GATE,
        "status": "False",
        "reason": "Elb.RegistrationInProgress",
        "lastTransitionTime": EARLIER,
    }
    plan = plan_gates(
        "web",
        [pod("a", conditions=[was_initial])],
        desired({"a": {(HTTP, T1)}}),
        {(HTTP, T1): INITIAL},
        interval_seconds=30,
        now=NOW,
    )
    assert plan.writes[0].condition["lastTransitionTime"] == EARLIER  # still False: no transition
    assert plan.writes[0].condition["reason"] == "Elb.InitialHealthChecking"


def test_pods_without_our_gate_or_being_deleted_are_left_alone() -> None:
    deleting = pod("c")
    deleting["metadata"]["deletionTimestamp"] = NOW
    plan = plan_gates(
        "web",
        [pod("a", gates=()), pod("b", gates=(gate_condition_type("api"),)), deleting],
        desired({"a": {(HTTP, T1)}, "b": {(HTTP, T2)}, "c": {(HTTP, IpTarget("10.0.0.12", 8080))}}),
        {},
        interval_seconds=10,
        now=NOW,
    )
    assert plan == plan.__class__((), None)


def test_an_unregistered_pod_gets_no_write_but_a_stale_true_is_taken_back() -> None:
    stale = [{"type": GATE, "status": "True", "lastTransitionTime": EARLIER}, {"type": "Ready", "status": "False"}]
    plan = plan_gates("web", [pod("new"), pod("back", conditions=stale)], desired({}), {}, interval_seconds=10, now=NOW)
    assert [(w.pod, w.condition["status"], w.condition["reason"]) for w in plan.writes] == [
        ("back", "False", "Target.NotRegistered")
    ]
    assert plan.recheck_after_seconds is None  # nothing pending: the next slice change brings them


def test_a_pending_pod_that_is_not_ready_asks_for_a_recheck() -> None:
    """Containers becoming ready under our gate change no EndpointSlice (the pod stays not Ready): only a
    scheduled look sees it."""
    plan = plan_gates("web", [pod("starting")], desired({}, {"starting"}), {}, interval_seconds=10, now=NOW)
    assert plan.writes == () and plan.recheck_after_seconds == 10
    ready = pod("starting", conditions=[{"type": "Ready", "status": "True"}])
    assert (
        plan_gates("web", [ready], desired({}, {"starting"}), {}, interval_seconds=10, now=NOW).recheck_after_seconds
        is None
    )


def test_unhealthy_targets_flip_a_ready_pod_back_and_are_rechecked() -> None:
    was = [{"type": GATE, "status": "True", "lastTransitionTime": EARLIER}, {"type": "Ready", "status": "True"}]
    plan = plan_gates(
        "web",
        [pod("a", conditions=was)],
        desired({"a": {(HTTP, T1)}}),
        {(HTTP, T1): UNHEALTHY},
        interval_seconds=10,
        now=NOW,
    )
    assert plan.writes[0].condition["status"] == "False" and plan.writes[0].condition["lastTransitionTime"] == NOW
    assert plan.recheck_after_seconds == 10
