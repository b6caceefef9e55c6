"""ccm.batch: the message groups of one batch run in parallel, each group in order; a failure skips only the rest of
its own group; the deadline returns records; per-record log keys and metrics stay valid across threads. No AWS: a
fake SQS client records the visibility changes."""

from __future__ import annotations

import io
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ccm import batch
from ccm.aws.queues import SqsQueue
from ccm.batch import BatchFacts, Deferred, FifoBatchRuntime, share_across_threads
from ccm.retry import RETURN_DELAY_SECONDS

ARN = "arn:aws:sqs:us-east-1:123456789012:services.fifo"
WAIT = 10  # seconds a barrier/event waits before the test fails (never reached when it passes)


class FakeSqs:
    def __init__(self) -> None:
        self.visibility: dict[str, int] = {}

    def get_queue_url(self, **_: Any) -> dict[str, str]:
        return {"QueueUrl": "https://sqs/services.fifo"}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> None:
        self.visibility.update({e["Id"]: e["VisibilityTimeout"] for e in Entries})


class FakeClients:
    """The clients contract: a real SqsQueue over a fake SQS client (its calls are what is asserted)."""

    def __init__(self) -> None:
        self.sqs = FakeSqs()

    def client(self, service: str) -> FakeSqs:
        assert service == "sqs"
        return self.sqs

    def queue_of_arn(self, arn: str) -> SqsQueue:
        return SqsQueue(self, self.sqs.get_queue_url(QueueName=arn)["QueueUrl"])


def record(message_id: str, group: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": message_id,
        "attributes": {"MessageGroupId": group, "ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": ARN,
        "awsRegion": "us-east-1",
    }


@dataclass(frozen=True)
class Sized(BatchFacts):
    records: int  # a fact of the whole batch, computed before its first record


class Runtime(FifoBatchRuntime[Sized]):
    def __init__(self, handle: Callable[[SQSRecord], None]) -> None:
        super().__init__(FakeClients())  # type: ignore[arg-type]
        self.handle = handle
        self.order: list[str] = []
        self.facts_made: list[Sized] = []
        self.facts_seen: list[Sized] = []
        self._order_lock = threading.Lock()

    def batch_facts(self, event: dict[str, Any]) -> Sized:
        self.facts_made.append(Sized(len(event["Records"])))
        return self.facts_made[-1]

    def handle_record(self, record: SQSRecord, batch: Sized) -> None:
        with self._order_lock:
            self.order.append(record.message_id)
            self.facts_seen.append(batch)
        self.handle(record)

    @property
    def visibility(self) -> dict[str, int]:
        return self.clients.sqs.visibility  # type: ignore[attr-defined,no-any-return]


def failed_ids(response: dict[str, Any]) -> list[str]:
    assert set(response) == {"batchItemFailures"}
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


class Ctx:
    def __init__(self, remaining_ms: int = 600_000) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_two_groups_run_at_the_same_time():
    """Each group's record waits at a barrier only both can pass: serial processing would time it out."""
    barrier = threading.Barrier(2, timeout=WAIT)
    runtime = Runtime(lambda r: barrier.wait())
    response = runtime.handle_batch({"Records": [record("a1", "default/a"), record("b1", "default/b")]}, Ctx())
    assert failed_ids(response) == []


def test_the_batch_facts_are_made_once_and_every_record_gets_them() -> None:
    """Computed before any record runs and passed to each one, in every worker thread; a new batch, new facts."""
    barrier = threading.Barrier(2, timeout=WAIT)

    def handle(r: SQSRecord) -> None:
        if r.message_id in ("a1", "b1"):
            barrier.wait()  # a1 and b1 in two threads at once

    runtime = Runtime(handle)
    records = [record("a1", "a"), record("b1", "b"), record("a2", "a"), record("c1", "c")]
    assert failed_ids(runtime.handle_batch({"Records": records}, Ctx())) == []
    (made,) = runtime.facts_made
    assert made == Sized(4) and len(runtime.facts_seen) == 4 and all(seen is made for seen in runtime.facts_seen)
    assert failed_ids(runtime.handle_batch({"Records": [record("d1", "d")]}, Ctx())) == []
    assert runtime.facts_made[1:] == [Sized(1)] and runtime.facts_seen[-1] is runtime.facts_made[1]


def test_one_group_keeps_its_order_while_another_runs():
    """Group a's records run in order even while group b is blocked in the middle of its first record."""
    b_started, a_done = threading.Event(), threading.Event()
    seen_a: list[str] = []

    def handle(r: SQSRecord) -> None:
        if r.message_id == "b1":
            b_started.set()
            assert a_done.wait(WAIT)  # b1 finishes only after all of group a did: they overlapped
        elif r.message_id.startswith("a"):
            assert b_started.wait(WAIT)
            seen_a.append(r.message_id)
            if r.message_id == "a3":
                a_done.set()

    runtime = Runtime(handle)
    records = [record("a1", "a"), record("b1", "b"), record("a2", "a"), record("a3", "a"), record("b2", "b")]
    assert failed_ids(runtime.handle_batch({"Records": records}, Ctx())) == []
    assert seen_a == ["a1", "a2", "a3"]
    assert [i for i in runtime.order if i.startswith("b")] == ["b1", "b2"]


def test_a_failure_skips_only_the_rest_of_its_own_group_with_its_delay():
    def handle(r: SQSRecord) -> None:
        if r.message_id == "a2":
            runtime.defer(r.message_id, 40)
            raise RuntimeError("AWS said no")

    runtime = Runtime(handle)
    records = [record(i, i[0]) for i in ("a1", "b1", "a2", "b2", "a3", "c1", "a4")]
    response = runtime.handle_batch({"Records": records}, Ctx())
    assert failed_ids(response) == ["a2", "a3", "a4"]  # in batch order
    assert "a3" not in runtime.order and "a4" not in runtime.order
    assert {"b1", "b2", "c1"} <= set(runtime.order)
    assert runtime.visibility == {"a2": 40, "a3": 40, "a4": 40}  # the skipped ones resume with it


def test_a_deferred_record_is_reported_without_running_the_rest_of_its_group():
    def handle(r: SQSRecord) -> None:
        if r.message_id == "a1":
            runtime.defer(r.message_id, 7)
            raise Deferred("host update deferred 7 s")

    runtime = Runtime(handle)
    response = runtime.handle_batch({"Records": [record("a1", "a"), record("a2", "a"), record("b1", "b")]}, Ctx())
    assert failed_ids(response) == ["a1", "a2"] and runtime.visibility == {"a1": 7, "a2": 7}


def test_no_record_starts_with_too_little_time_left_and_none_is_a_failure():
    runtime = Runtime(lambda r: None)
    records = [record("a1", "a"), record("a2", "a"), record("b1", "b")]
    response = runtime.handle_batch({"Records": records}, Ctx(remaining_ms=5_000))  # under the 25 s reserve
    assert failed_ids(response) == ["a1", "a2", "b1"] and runtime.order == []
    assert set(runtime.visibility.values()) == {RETURN_DELAY_SECONDS}


def test_a_record_cut_short_by_the_deadline_is_returned_in_its_worker_thread():
    """The deadline is thread-local: each worker enters the invocation's, so a call in a worker is refused too."""
    from ccm import deadline

    def handle(r: SQSRecord) -> None:
        if r.message_id == "b1":
            deadline.check(60, "CreateLoadBalancer")  # 30 s left minus the finish reserve: refused

    runtime = Runtime(handle)
    response = runtime.handle_batch({"Records": [record("a1", "a"), record("b1", "b"), record("b2", "b")]}, Ctx(30_000))
    assert failed_ids(response) == ["b1", "b2"]
    assert runtime.visibility == {"b1": RETURN_DELAY_SECONDS, "b2": RETURN_DELAY_SECONDS}


def test_group_concurrency_bounds_the_threads(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(batch.GROUP_CONCURRENCY_ENV, "2")
    running, peak, lock = [0], [0], threading.Lock()
    both = threading.Barrier(2, timeout=WAIT)

    def handle(r: SQSRecord) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if r.message_id in ("a1", "b1"):
            both.wait()  # the first two overlap for sure
        with lock:
            running[0] -= 1

    runtime = Runtime(handle)
    records = [record(f"{g}1", g) for g in "abcdef"]
    assert failed_ids(runtime.handle_batch({"Records": records}, Ctx())) == []
    assert peak[0] == 2 and sorted(runtime.order) == sorted(r["messageId"] for r in records)
    monkeypatch.setenv(batch.GROUP_CONCURRENCY_ENV, "junk")
    assert batch.group_concurrency() == batch.DEFAULT_GROUP_CONCURRENCY


def test_log_keys_and_metrics_stay_per_record_across_threads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """Per-record keys set by parallel records land on their own lines; the invocation's keys on all of them; no
    metric value is lost and the EMF output is one valid document."""
    # The level is this test's own: a level variable another test left in the process must not silence it.
    for variable in ("AWS_LAMBDA_LOG_LEVEL", "POWERTOOLS_LOG_LEVEL", "LOG_LEVEL"):
        monkeypatch.delenv(variable, raising=False)
    stream = io.StringIO()
    # A name of its own: Powertools configures a logging.Logger of a given name once per process.
    service = f"batch-test-{uuid.uuid4().hex[:8]}"
    logger = Logger(service=service, level="INFO", logger_handler=__import__("logging").StreamHandler(stream))
    # Whatever an earlier test did to logging in this process (a logging.disable, a level): this logger writes.
    monkeypatch.setattr(__import__("logging").root.manager, "disable", 0)
    logger.setLevel("INFO")
    metrics = Metrics(namespace="BatchTest", service=service)
    share_across_threads(logger, metrics)
    logger.structure_logs(function_request_id="req-1")  # what inject_lambda_context(clear_state=True) does
    monkeypatch.setenv(batch.GROUP_CONCURRENCY_ENV, "4")
    barrier = threading.Barrier(4, timeout=WAIT)

    def handle(r: SQSRecord) -> None:
        logger.set_correlation_id(r.attributes.message_group_id)
        logger.append_keys(kind="Service")
        barrier.wait()  # all four set their keys before any logs
        for _ in range(50):
            metrics.add_metric(name="AwsCalls", unit=MetricUnit.Count, value=1)
        logger.info("reconciled", extra={"message_id": r.message_id})
        logger.remove_keys(["kind"])

    runtime = Runtime(handle)
    records = [record(f"{g}1", f"default/{g}") for g in "abcd"]
    assert failed_ids(runtime.handle_batch({"Records": records}, Ctx())) == []
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 4
    for line in lines:
        assert line["correlation_id"] == f"default/{line['message_id'][0]}"
        assert line["function_request_id"] == "req-1" and line["kind"] == "Service"
    metrics.flush_metrics()
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    values = [v for doc in emf for v in (doc["AwsCalls"] if isinstance(doc["AwsCalls"], list) else [doc["AwsCalls"]])]
    assert len(values) == 200  # 4 x 50: none lost (Powertools flushes every 100 values of one metric)
    assert all(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "BatchTest" for doc in emf)
