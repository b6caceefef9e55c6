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


def ref(name: str, rv: str, service: str | None = "web", namespace: str = "default") -> SliceRef:
    labels = {"kubernetes.io/service-name": service} if service else {}
    obj = {"metadata": {"name": name, "namespace": namespace, "labels": labels, "resourceVersion": rv}}
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


def test_the_index_reports_each_change_once_and_keeps_only_keys_and_versions() -> None:
    index = SliceIndex()
    assert index.apply("SYNC", ref("web-a", "5")) == [Change("default/web")]
    assert index.apply("SYNC", ref("web-a", "5")) == []  # a relist showing what is known
    assert index.apply("MODIFIED", ref("web-a", "6")) == [Change("default/web")]
    assert index.apply("ADDED", ref("other-a", "7", namespace="prod", service="web")) == [Change("prod/web")]
    assert index.apply("ADDED", ref("loose", "8", service=None)) == []  # no Service: not remembered
    assert index.slices_of("default/web") == {"web-a": "6"} and len(index) == 2
    # Relabelled to another Service: gone from the first (with its last resourceVersion), new in the second.
    assert index.apply("MODIFIED", ref("web-a", "9", service="api")) == [
        Change("default/web", ("web-a", "6")),
        Change("default/api"),
    ]
    assert index.apply("DELETED", ref("web-a", "10", service="api")) == [Change("default/api", ("web-a", "9"))]
    assert index.vanished(set()) == [Change("prod/web", ("other-a", "7"))]
    assert len(index) == 0 and index.slices_of("default/web") == {}


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
