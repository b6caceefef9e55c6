"""Sender against SQS FIFO served by moto over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from ccm.contracts.messages import Delta, parse_delta
from tests.watcher.conftest import free_port, receive_all, sqs_client, wait_until
from watcher.backoff import Backoff
from watcher.buffer import DeltaBuffer
from watcher.fit import fit
from watcher.metrics import Metrics
from watcher.sender import Sender


def delta(key: str, uid: str = "uid-1", rv: str = "1", kind: str = "Service", type_: str = "ADDED") -> Delta:
    return Delta(
        kind=kind,
        type=type_,
        key=key,
        uid=uid,
        resource_version=rv,
        observed_at=time.time(),
        object={"type": "LoadBalancer"},
    )


def entries(*deltas: Delta) -> list[dict[str, str]]:
    return [
        {
            "Id": str(i),
            "MessageBody": d.to_body(),
            "MessageGroupId": d.group_id,
            "MessageDeduplicationId": d.deduplication_id,
        }
        for i, d in enumerate(deltas)
    ]


def accepted(n: int) -> dict[str, Any]:
    return {
        "Successful": [{"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(n)],
        "Failed": [],
    }


class Harness:
    def __init__(self, client: Any, queues: dict[str, str], capacity: int = 100) -> None:
        self.buffer = DeltaBuffer(capacity)
        self.metrics = Metrics()
        self.relists: list[str] = []
        self.calls: list[int] = []
        client.meta.events.register("before-call.sqs.SendMessageBatch", self._count_call)
        self.sender = Sender(
            client,
            queues,
            self.buffer,
            self.metrics,
            backoff=Backoff(0.05, 0.3),
            probe_seconds=0.2,
            ready_window_seconds=30,
            on_relist_needed=self.relists.append,
        )

    def _count_call(self, params: dict[str, Any], **_: Any) -> None:
        # `params` is the serialised HTTP request; SQS speaks the JSON protocol.
        self.calls.append(len(json.loads(params["body"])["Entries"]))

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def put_all(self, deltas: list[Delta]) -> None:
        for d in deltas:
            assert self.buffer.put(d)


@pytest.fixture
def harness(sqs: Any, queues: dict[str, str]) -> Iterator[Harness]:
    h = Harness(sqs, queues)
    yield h
    h.sender.stop(1)


def test_batches_of_ten_routed_by_kind_with_group_and_dedup_ids(harness: Harness, sqs: Any, queues: dict) -> None:
    services = [delta(f"default/svc-{i}", uid=f"s{i}") for i in range(25)]
    nodes = [delta(f"node-{i}", uid=f"n{i}", kind="Node") for i in range(3)]
    harness.put_all(services + nodes)
    harness.sender.start()
    assert harness.buffer.wait_empty(10)
    assert harness.calls == [10, 3, 10, 5]

    got = {kind: receive_all(sqs, url, expect=n) for (kind, url), n in zip(queues.items(), (25, 3), strict=True)}
    for kind, expected in (("Service", services), ("Node", nodes)):
        by_key = {parse_delta(m["Body"]).key: m for m in got[kind]}
        assert sorted(by_key) == sorted(d.key for d in expected)
        for d in expected:
            attributes = by_key[d.key]["Attributes"]
            assert attributes["MessageGroupId"] == d.group_id == d.key
            assert attributes["MessageDeduplicationId"] == d.deduplication_id
            # Every Service creation carries the burst hint: the creations sent in the last 2 s (watcher.burst).
            parsed = parse_delta(by_key[d.key]["Body"])
            assert parsed == (replace(d, burst=parsed.burst) if kind == "Service" else d)
    bursts = sorted(parse_delta(m["Body"]).burst for m in got["Service"])
    assert bursts == [10] * 10 + [20] * 10 + [25] * 5  # three SendMessageBatch calls of 10, 10 and 5 creations
    assert harness.metric("watcher_deltas_sent_total", kind="Service") == 25
    assert harness.metric("watcher_queue_lag_seconds_count", kind="Node") == 3
    assert harness.metric("watcher_last_successful_send_timestamp_seconds") > 0


def test_a_lone_creation_waits_once_for_the_burst_behind_it(harness: Harness, sqs: Any, queues: dict) -> None:
    """A burst's first creation is held LINGER_SECONDS and goes out with the next ones, all carrying the count;
    a creation alone is still sent, after that wait."""
    harness.sender.start()
    assert harness.buffer.put(delta("default/first", uid="f"))
    time.sleep(0.01)  # the sender has taken it and holds it
    harness.put_all([delta(f"default/next-{i}", uid=f"n{i}") for i in range(3)])
    assert harness.buffer.wait_empty(10)
    assert harness.calls == [4]
    got = [parse_delta(m["Body"]) for m in receive_all(sqs, queues["Service"], expect=4)]
    assert {d.burst for d in got} == {4}

    time.sleep(2.1)  # the window is over: a creation alone again
    assert harness.buffer.put(delta("default/alone", uid="a"))
    assert harness.buffer.wait_empty(10)
    (alone,) = [parse_delta(m["Body"]) for m in receive_all(sqs, queues["Service"], expect=1)]
    assert alone.burst == 1 and harness.calls == [4, 1]


def test_same_observation_sent_twice_collapses_in_the_fifo_window(harness: Harness, sqs: Any, queues: dict) -> None:
    harness.sender.start()
    first = delta("default/web", uid="u1", rv="5", type_="ADDED")
    again = delta("default/web", uid="u1", rv="5", type_="SYNC")  # a relisting watcher's view of the same rv
    newer = delta("default/web", uid="u1", rv="6", type_="MODIFIED")
    for d in (first, again, newer):
        assert harness.buffer.put(d)
        assert harness.buffer.wait_empty(10)  # one at a time, so the buffer cannot coalesce them
    assert harness.metric("watcher_deltas_sent_total", kind="Service") == 3
    received = [parse_delta(m["Body"]) for m in receive_all(sqs, queues["Service"], expect=2)]
    assert [(d.type, d.resource_version) for d in received] == [("ADDED", "5"), ("MODIFIED", "6")]


def test_deltas_of_one_key_keep_their_order(harness: Harness, sqs: Any, queues: dict) -> None:
    harness.put_all(
        [
            delta("default/web", uid="old", type_="DELETED"),
            delta("default/other"),
            delta("default/web", uid="new", type_="ADDED"),
        ]
    )
    harness.sender.start()
    assert harness.buffer.wait_empty(10)
    web = [parse_delta(m["Body"]) for m in receive_all(sqs, queues["Service"], expect=3)]
    assert [(d.uid, d.type) for d in web if d.key == "default/web"] == [("old", "DELETED"), ("new", "ADDED")]


def test_unreachable_endpoint_keeps_deltas_and_retries_until_sqs_is_back(sqs: Any, queues: dict) -> None:
    port = free_port()
    h = Harness(sqs_client(f"http://127.0.0.1:{port}"), queues)
    deltas = [delta(f"default/svc-{i}", uid=f"u{i}") for i in range(3)]
    h.put_all(deltas)
    h.sender.start()
    wait_until(lambda: h.metric("watcher_deltas_failed_total", kind="Service") >= 6)  # at least two attempts
    assert len(h.buffer) == 3 and not h.sender.reachable
    assert receive_all(sqs, queues["Service"]) == []

    late_server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    late_server.start()
    try:
        assert h.buffer.wait_empty(15)
        received = [parse_delta(m["Body"]) for m in receive_all(sqs, queues["Service"], expect=3)]
        assert sorted(d.key for d in received) == sorted(d.key for d in deltas)
        assert h.sender.reachable
        assert h.metric("watcher_deltas_sent_total", kind="Service") == 3
    finally:
        h.sender.stop(1)
        late_server.stop()


def test_overflow_while_unreachable_requests_one_relist_once_sqs_works(sqs: Any, queues: dict) -> None:
    port = free_port()
    h = Harness(sqs_client(f"http://127.0.0.1:{port}"), queues, capacity=3)
    accepted = [h.buffer.put(delta(f"default/svc-{i}", uid=f"u{i}")) for i in range(5)]
    assert accepted == [True, True, True, False, False]
    assert h.buffer.overflowed == {"Service"}
    h.sender.start()
    wait_until(lambda: h.metric("watcher_deltas_failed_total", kind="Service") >= 3)
    time.sleep(0.3)
    assert h.relists == []  # relisting while SQS is down would only overflow again

    late_server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    late_server.start()
    try:
        wait_until(lambda: h.relists == ["Service"], timeout=15)
        assert len(receive_all(sqs, queues["Service"], expect=3)) == 3
        time.sleep(0.3)
        assert h.relists == ["Service"] and h.buffer.overflowed == frozenset()
    finally:
        h.sender.stop(1)
        late_server.stop()


def test_idle_sender_probes_sqs_for_readiness(harness: Harness) -> None:
    assert not harness.sender.reachable
    harness.sender.start()
    wait_until(lambda: harness.sender.reachable, timeout=5)
    assert harness.calls == []


def test_stop_flushes_what_it_holds(harness: Harness, sqs: Any, queues: dict) -> None:
    harness.sender.start()
    harness.put_all([delta(f"default/svc-{i}", uid=f"u{i}") for i in range(15)])
    assert harness.sender.stop(10) is True
    assert not harness.sender.alive
    assert len(receive_all(sqs, queues["Service"], expect=15)) == 15


def test_stop_gives_up_after_its_timeout_when_sqs_is_down(queues: dict) -> None:
    h = Harness(sqs_client(f"http://127.0.0.1:{free_port()}"), queues)
    h.put_all([delta("default/web")])
    h.sender.start()
    started = time.monotonic()
    assert h.sender.stop(0.5) is False
    assert time.monotonic() - started < 8
    assert len(h.buffer) == 1


def test_failed_entries_are_retried_alone_and_sender_faults_are_dropped_loudly(queues: dict) -> None:
    """Per-entry failures need an SQS that fails selectively; botocore's Stubber plays that SQS."""
    client = sqs_client("http://127.0.0.1:1")
    h = Harness(client, queues)
    # Changes, not creations: the bodies are exactly these deltas' (no burst hint, watcher.burst).
    a, b, c = (delta(f"default/{name}", uid=name, type_="MODIFIED") for name in ("a", "b", "c"))
    with Stubber(client) as stub:
        stub.add_response(
            "send_message_batch",
            {
                "Successful": [{"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "x"}],
                "Failed": [
                    {"Id": "1", "SenderFault": False, "Code": "InternalError"},
                    {"Id": "2", "SenderFault": True, "Code": "InvalidParameterValue", "Message": "bad"},
                ],
            },
            {"QueueUrl": queues["Service"], "Entries": entries(a, b, c)},
        )
        stub.add_response(
            "send_message_batch",
            accepted(1),
            {"QueueUrl": queues["Service"], "Entries": entries(b)},
        )
        h.put_all([a, b, c])
        assert h.sender.send_batch(h.buffer.take()) is False
        assert len(h.buffer) == 1
        assert h.sender.send_batch(h.buffer.take()) is True
        stub.assert_no_pending_responses()
    assert len(h.buffer) == 0
    assert h.metric("watcher_deltas_sent_total", kind="Service") == 2
    assert h.metric("watcher_deltas_failed_total", kind="Service") == 2
    assert h.metric("watcher_deltas_dropped_total", kind="Service", reason="rejected") == 1


def test_message_sizes_stay_within_the_sqs_batch_limit(queues: dict) -> None:
    client = sqs_client("http://127.0.0.1:1")
    h = Harness(client, queues)
    big = {"annotations": {"service.beta.kubernetes.io/x": "y" * 100_000}}
    deltas = [Delta("Service", "MODIFIED", f"default/big-{i}", f"u{i}", "1", 1.0, big) for i in range(3)]
    huge = Delta("Service", "MODIFIED", "default/huge", "uh", "1", 1.0, {"x": "y" * 300_000})
    h.put_all([huge, *deltas])
    trimmed = fit(huge)
    assert trimmed.object == {"trimmedToFit": ["x"]} and trimmed.uid == "uh"
    with Stubber(client) as stub:
        # The 300 KB one goes trimmed (it used to be dropped: a delete lost), with 2 x ~100 KB in one 256 KiB batch;
        # the third goes in the next.
        stub.add_response(
            "send_message_batch",
            accepted(3),
            {"QueueUrl": queues["Service"], "Entries": entries(trimmed, *deltas[:2])},
        )
        stub.add_response(
            "send_message_batch", accepted(1), {"QueueUrl": queues["Service"], "Entries": entries(deltas[2])}
        )
        assert h.sender.send_batch(h.buffer.take()) is True
        assert h.sender.send_batch(h.buffer.take()) is True
        stub.assert_no_pending_responses()
    assert h.metric("watcher_deltas_dropped_total", kind="Service", reason="rejected") == 0
    assert h.metric("watcher_deltas_trimmed_total", kind="Service") == 1
    assert len(h.buffer) == 0
