"""The pure parts of the endpoint hints (watcher.endpoints): which Services, what is remembered, the coalescing."""

from __future__ import annotations

from typing import Any

import pytest

from ccm.contracts.messages import endpoints_hint
from devstack.pod_world import FakeClock
from watcher.endpoints import (
    TARGET_TYPE_ANNOTATION,
    Change,
    Coalescer,
    SliceIndex,
    SliceRef,
    ip_mode,
    slice_ref,
)


def endpoint(ip: str, *, ready: bool | None = True, terminating: bool = False, kind: str = "Pod") -> dict[str, Any]:
    conditions: dict[str, Any] = (
        {"terminating": terminating} if ready is None else {"ready": ready, "terminating": terminating}
    )
    return {"addresses": [ip], "conditions": conditions, "targetRef": {"kind": kind, "name": "pod-" + ip}}


def ref(
    name: str,
    rv: str,
    service: str | None = "web",
    namespace: str = "default",
    endpoints: list[dict[str, Any]] | None = None,
    port: int = 8080,
) -> SliceRef:
    labels = {"kubernetes.io/service-name": service} if service else {}
    obj = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "resourceVersion": rv},
        "addressType": "IPv4",
        "endpoints": [endpoint("10.0.0.1")] if endpoints is None else endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": port}],
    }
    return slice_ref(obj)


@pytest.mark.parametrize(
    ("trimmed", "expected"),
    [
        ({"type": "LoadBalancer", "annotations": {TARGET_TYPE_ANNOTATION: "ip"}}, True),
        ({"type": "LoadBalancer", "annotations": {TARGET_TYPE_ANNOTATION: " IP "}}, True),
        ({"type": "LoadBalancer", "annotations": {TARGET_TYPE_ANNOTATION: "instance"}}, False),
        ({"type": "LoadBalancer", "annotations": {}}, False),
        ({"type": "ClusterIP", "annotations": {TARGET_TYPE_ANNOTATION: "ip"}}, False),
        ({"type": "LoadBalancer", "annotations": {TARGET_TYPE_ANNOTATION: "ip"}, "deletionTimestamp": "t"}, False),
        (None, False),
    ],
)
def test_ip_mode(trimmed: dict[str, Any] | None, expected: bool) -> None:
    assert ip_mode(trimmed) is expected


def test_ip_mode_leaves_other_controllers_classes_out() -> None:
    ip = {"type": "LoadBalancer", "annotations": {TARGET_TYPE_ANNOTATION: "ip"}}
    assert ip_mode(ip, "ccm.aws/serverless")  # unclassed: the reconciler decides (SERVICES_WITHOUT_CLASS)
    assert ip_mode({**ip, "loadBalancerClass": "ccm.aws/serverless"}, "ccm.aws/serverless")
    assert not ip_mode({**ip, "loadBalancerClass": "service.k8s.aws/nlb"}, "ccm.aws/serverless")
    # Without a class: ours only when the stack claims those, and never one handed to the LBC by its type.
    assert not ip_mode(ip, "ccm.aws/serverless", claim_unclassed=False)
    lbc = {**ip, "annotations": {**ip["annotations"], "service.beta.kubernetes.io/aws-load-balancer-type": "external"}}
    assert not ip_mode(lbc, "ccm.aws/serverless")


def test_the_index_reports_each_change_once_and_keeps_only_keys_and_versions() -> None:
    index = SliceIndex()
    assert index.apply("SYNC", ref("web-a", "5")) == [Change("default/web")]
    assert index.apply("SYNC", ref("web-a", "5")) == []  # a relist showing what is known
    assert index.apply("MODIFIED", ref("web-a", "6", port=9090)) == [Change("default/web")]  # the pods' port
    assert index.apply("ADDED", ref("other-a", "7", namespace="prod", service="web")) == [Change("prod/web")]
    assert index.apply("ADDED", ref("loose", "8", service=None)) == []  # no Service: not remembered
    assert index.apply("MODIFIED", ref("web-a", "6b", port=9090)) == []  # rewritten, same content: no hint
    assert index.slices_of("default/web") == {"web-a": "6b"} and len(index) == 2
    # Relabelled to another Service: gone from the first (with its last resourceVersion), new in the second.
    assert index.apply("MODIFIED", ref("web-a", "9", service="api")) == [
        Change("default/web", ("web-a", "6b")),
        Change("default/api"),
    ]
    assert index.apply("DELETED", ref("web-a", "10", service="api")) == [Change("default/api", ("web-a", "9"))]
    assert index.vanished(set()) == [Change("prod/web", ("other-a", "7"))]
    assert len(index) == 0 and index.slices_of("default/web") == {}


def test_only_writes_that_change_targets_or_waiting_endpoints_are_changes() -> None:
    """A rolling update's slice writes, one pod at a time: its appearance (not ready) and readiness change what may
    be registered; its removal after it began terminating, or a slice that never held a Pod-backed endpoint, do
    not. A change of waiting endpoints only is not urgent (the longer window)."""
    index = SliceIndex()
    old = endpoint("10.0.0.1")
    assert index.apply("ADDED", ref("s", "1", endpoints=[old])) == [Change("default/web")]
    new_waiting = endpoint("10.0.0.2", ready=False)
    assert index.apply("MODIFIED", ref("s", "2", endpoints=[old, new_waiting])) == [Change("default/web", urgent=False)]
    assert index.apply("MODIFIED", ref("s", "3", endpoints=[old, endpoint("10.0.0.2")])) == [Change("default/web")]
    leaving = endpoint("10.0.0.1", ready=False, terminating=True)
    assert index.apply("MODIFIED", ref("s", "4", endpoints=[leaving, endpoint("10.0.0.2")])) == [Change("default/web")]
    assert index.apply("MODIFIED", ref("s", "5", endpoints=[endpoint("10.0.0.2")])) == []  # the terminated pod
    # `ready` absent reads as ready: the same targets.
    assert index.apply("MODIFIED", ref("s", "6", endpoints=[endpoint("10.0.0.2", ready=None)])) == []
    # Not backed by a Pod: never a target.
    assert index.apply("ADDED", ref("ext", "7", endpoints=[endpoint("10.9.9.9", kind="Node")])) == []
    assert index.apply("DELETED", ref("ext", "8", endpoints=[])) == []
    # A slice that held targets going away is a change, with its last resourceVersion.
    assert index.apply("DELETED", ref("s", "9", endpoints=[])) == [Change("default/web", ("s", "6"))]
    waiting_only = ref("w", "10", endpoints=[endpoint("10.0.0.3", ready=False)])
    assert index.apply("ADDED", waiting_only) == [Change("default/web", urgent=False)]
    assert index.vanished(set()) == [Change("default/web", ("w", "10"), urgent=False)]


def test_a_target_change_takes_a_pending_waiting_hint_into_the_short_window() -> None:
    clock = FakeClock()
    hints = Coalescer(window=0.25, clock=clock, waiting_window=5.0)
    assert hints.mark(Change("default/web", urgent=False), seen_at=100.0)
    clock.advance(1.0)
    assert hints.take_due() == []  # waiting endpoints alone wait the long window
    assert hints.mark(Change("default/web"), seen_at=101.0)  # a target change: the window moves earlier
    clock.advance(0.25)
    [(_, pending)] = hints.take_due()
    assert (pending.changes, pending.first_seen, pending.urgent) == (2, 101.0, True)  # latency from the target change
    assert hints.mark(Change("default/web", urgent=False), seen_at=200.0)
    clock.advance(4.9)
    assert hints.take_due() == []
    clock.advance(0.1)
    assert [s for s, _ in hints.take_due()] == ["default/web"]
    # A waiting window shorter than the short one acts as the short one.
    assert Coalescer(window=0.25, clock=clock, waiting_window=0.0).waiting_window == 0.25


def test_changes_within_a_window_merge_and_churn_cannot_starve_a_service() -> None:
    clock = FakeClock()
    hints = Coalescer(window=0.25, clock=clock)
    assert hints.mark(Change("default/web"), seen_at=100.0)  # the first change arms the window
    clock.advance(0.125)
    assert not hints.mark(Change("default/web", ("web-b", "3")), seen_at=100.1)
    assert hints.mark(Change("default/api"), seen_at=100.1)  # another Service: its own window
    clock.advance(0.0625)
    assert hints.take_due() == []
    clock.advance(0.0625)
    [(service, pending)] = hints.take_due()
    assert (service, pending.changes, pending.deleted, pending.first_seen) == ("default/web", 2, {"web-b": "3"}, 100.0)
    # A change every 125 ms for 2 s: a window is never extended, so one hint per window comes out.
    sent = []
    for _ in range(16):
        hints.mark(Change("default/web"), seen_at=0.0)
        clock.advance(0.125)
        sent += [s for s, _ in hints.take_due() if s == "default/web"]
    assert len(sent) == 8
    hints.mark(Change("default/web"), seen_at=0.0)
    assert [s for s, _ in hints.take_due(everything=True)] == ["default/web"]  # shutdown: whatever is pending
    assert len(hints) == 0 and hints.next_due() is None


def test_the_deduplication_id_follows_the_slice_state() -> None:
    """Equal for the same state whoever builds it (two replicas), different for any later change, including a
    deletion that brings the live slices back to an earlier set."""

    def hint(slices: dict[str, str], deleted: dict[str, str] | None = None, uid: str = "u1") -> str:
        return endpoints_hint("default/web", uid, slices, deleted or {}, observed_at=1.0).deduplication_id

    assert hint({"a": "5", "b": "7"}) == hint({"b": "7", "a": "5"})
    assert hint({"a": "5"}) != hint({"a": "6"})
    assert hint({"a": "5"}) != hint({"a": "5"}, {"b": "7"})  # {a} -> {a, b} -> b deleted: not the first {a}
    assert hint({"a": "5"}) != hint({"a": "5"}, uid="u2")
    assert hint({}, {"a": "5"}) != hint({}, {"a": "6"})
