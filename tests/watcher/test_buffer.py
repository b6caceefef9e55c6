from __future__ import annotations

import threading
import time

from ccm.contracts.messages import Delta
from watcher.buffer import DeltaBuffer


def delta(key: str, uid: str = "u", rv: str = "1", kind: str = "Service", type_: str = "MODIFIED") -> Delta:
    return Delta(kind=kind, type=type_, key=key, uid=uid, resource_version=rv, observed_at=1.0, object={})


def test_newest_delta_per_object_wins_and_keeps_its_place() -> None:
    buf = DeltaBuffer(10)
    for d in (delta("ns/a", rv="1"), delta("ns/b"), delta("ns/a", rv="2")):
        assert buf.put(d)
    batch = buf.take()
    assert [(d.key, d.resource_version) for d in batch] == [("ns/a", "2"), ("ns/b", "1")]


def test_delete_of_old_incarnation_survives_recreation_and_stays_first() -> None:
    buf = DeltaBuffer(10)
    buf.put(delta("ns/a", uid="old", type_="DELETED"))
    buf.put(delta("ns/a", uid="new", type_="ADDED"))
    first, second = buf.take(), buf.take()
    # One entry per key per batch: SQS cannot reorder them even if one entry of a batch fails.
    assert [(d.uid, d.type) for d in first] == [("old", "DELETED")]
    assert [(d.uid, d.type) for d in second] == [("new", "ADDED")]


def test_full_buffer_refuses_new_keys_marks_overflow_but_still_coalesces() -> None:
    buf = DeltaBuffer(2)
    assert buf.put(delta("ns/a")) and buf.put(delta("ns/b"))
    assert not buf.put(delta("ns/c"))
    assert buf.overflowed == {"Service"}
    assert buf.put(delta("ns/a", rv="9"))  # replacing needs no room
    assert len(buf) == 2
    assert buf.take_overflowed() == {"Service"} and buf.overflowed == frozenset()


def test_in_flight_deltas_count_against_capacity() -> None:
    buf = DeltaBuffer(2)
    buf.put(delta("ns/a"))
    buf.put(delta("ns/b"))
    taken = buf.take()
    assert len(buf) == 2 and not buf.put(delta("ns/c"))
    buf.done(len(taken))
    assert len(buf) == 0 and buf.put(delta("ns/c"))


def test_requeued_failures_go_before_newer_deltas_of_same_key() -> None:
    buf = DeltaBuffer(10)
    buf.put(delta("ns/a", uid="old", type_="DELETED"))
    buf.put(delta("ns/b"))
    taken = buf.take()
    buf.put(delta("ns/a", uid="new", type_="ADDED"))
    buf.put(delta("ns/b", rv="2"))  # newer than the in-flight one: wins when the old one comes back
    buf.requeue_front(taken)
    order = [(d.key, d.uid, d.resource_version) for d in buf.take()]
    assert order == [("ns/a", "old", "1"), ("ns/b", "u", "2")]
    assert [(d.key, d.uid) for d in buf.take()] == [("ns/a", "new")]


def test_batches_hold_one_kind_at_most_ten_and_alternate_kinds() -> None:
    buf = DeltaBuffer(100)
    for i in range(12):
        buf.put(delta(f"ns/s{i}"))
    for i in range(3):
        buf.put(delta(f"n{i}", kind="Node"))
    kinds_and_sizes = []
    while len(buf):
        batch = buf.take(timeout=0)
        assert len({d.kind for d in batch}) == 1
        kinds_and_sizes.append((batch[0].kind, len(batch)))
        buf.done(len(batch))
    assert kinds_and_sizes == [("Service", 10), ("Node", 3), ("Service", 2)]


def test_take_waits_for_a_producer() -> None:
    buf = DeltaBuffer(10)
    assert buf.take(timeout=0.01) == []
    threading.Timer(0.05, buf.put, [delta("ns/a")]).start()
    started = time.monotonic()
    assert [d.key for d in buf.take(timeout=5)] == ["ns/a"]
    assert time.monotonic() - started < 4


def test_an_endpoints_hint_never_replaces_a_pending_change_of_its_service() -> None:
    # A reconcile of an unchanged spec may trust its checkpoint and skip the targets: the hint keeps its own place.
    buf = DeltaBuffer(10)
    buf.put(delta("ns/a", rv="1", type_="MODIFIED"))
    buf.put(delta("ns/a", rv="endpoints-1", type_="ENDPOINTS"))
    buf.put(delta("ns/a", rv="endpoints-2", type_="ENDPOINTS"))  # hints coalesce among themselves
    buf.put(delta("ns/a", rv="2", type_="MODIFIED"))
    assert len(buf) == 2
    first, second = buf.take(), buf.take()
    assert [(d.type, d.resource_version) for d in first + second] == [("MODIFIED", "2"), ("ENDPOINTS", "endpoints-2")]

    # A DELETED drops the pending hint of its Service (same uid): the delete covers it.
    buf.put(delta("ns/a", rv="endpoints-3", type_="ENDPOINTS"))
    buf.put(delta("ns/a", uid="other", rv="endpoints-1", type_="ENDPOINTS"))
    buf.put(delta("ns/a", rv="3", type_="DELETED"))
    assert sorted((d.uid, d.type) for d in buf.take() + buf.take()) == [("other", "ENDPOINTS"), ("u", "DELETED")]
