"""Which passes may trust the checkpoint of what was applied (ccm.aws.applied): the services runtime decides it per
record. A first attempt may; a retry, and the sweeper's SYNC after it saw drift, must read AWS in full."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ccm.config import Settings
from ccm.contracts.cloud import PassFlags
from ccm.contracts.messages import BURST_CREATIONS, REPAIR, delta_for, endpoints_hint
from ccm.service.decisions import Action
from ccm.service.reconciler import Outcome
from ccm.service.runtime import ServiceBatch, ServiceRuntime, attempt_of, creations_in, pass_flags, superseded_in
from tests.factories import service


class Counting:
    def reset_thread(self) -> None: ...
    def thread_calls(self) -> Counter[str]:
        return Counter()

    def thread_throttles(self) -> int:
        return 0

    def mutating(self, calls: Mapping[str, int]) -> int:
        return 0


class Clients:
    counter = Counting()

    def queue(self, url: str) -> Any:
        raise AssertionError("no queue call expected")

    def queue_of_arn(self, arn: str) -> Any:
        raise AssertionError("no queue call expected")


class Recording:
    def __init__(self) -> None:
        self.flags: list[PassFlags] = []

    def reconcile(self, delta: Any, flags: PassFlags) -> Outcome:
        self.flags.append(flags)
        return Outcome(Action.NOTHING)


def record(body: str, receive_count: int) -> SQSRecord:
    now = str(int(time.time() * 1000))
    return SQSRecord(
        {
            "messageId": "m",
            "receiptHandle": "r",
            "body": body,
            "attributes": {
                "ApproximateReceiveCount": str(receive_count),
                "SentTimestamp": now,
                "SenderId": "AROAEXAMPLE:watcher",
            },
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q.fifo",
        }
    )


@pytest.mark.parametrize(
    ("event_type", "receive_count", "repair", "trusted"),
    [
        ("SYNC", 1, False, True),
        ("MODIFIED", 1, False, True),
        ("SYNC", 2, False, False),  # a retry: an earlier attempt may have crashed between two calls
        ("SYNC", 1, True, False),  # the sweeper saw drift: the checkpoint is what drifted from AWS
    ],
)
def test_only_first_attempts_without_drift_trust_the_checkpoint(
    event_type: str, receive_count: int, repair: bool, trusted: bool
) -> None:
    reconciler = Recording()
    runtime = ServiceRuntime(Settings("c", "vpc-1"), Clients(), reconciler, None)  # type: ignore[arg-type]
    delta = delta_for("Service", event_type, service())
    if repair:
        delta.object[REPAIR] = True
    runtime.handle_record(record(delta.to_body(), receive_count), ServiceBatch(creations=1))
    (flags,) = reconciler.flags
    assert flags.trust_applied is trusted


def test_hostname_first_only_in_a_batch_that_creates_several_services() -> None:
    """A burst is a batch with ADDED deltas of BURST_CREATIONS Services (message groups) or more; a malformed
    body, another type or a second ADDED of the same group does not count."""

    def raw(event_type: str, name: str, group: str | None = None) -> dict[str, Any]:
        body = delta_for("Service", event_type, service(name=name)).to_body()
        shaped = dict(record(body, 1).raw_event)
        shaped["messageId"] = f"{name}-{event_type}"
        shaped["attributes"] = {**shaped["attributes"], "MessageGroupId": group or f"default/{name}"}
        return shaped

    def flags_of(records: list[dict[str, Any]]) -> list[bool]:
        reconciler = Recording()
        runtime = ServiceRuntime(Settings("c", "vpc-1"), Clients(), reconciler, None)  # type: ignore[arg-type]
        assert runtime.handle_batch({"Records": records}, None) == {"batchItemFailures": []}
        return [flags.hostname_first for flags in reconciler.flags]

    assert creations_in({"Records": [raw("ADDED", "a"), raw("ADDED", "b"), raw("MODIFIED", "c")]}) == 2
    assert creations_in({"Records": [raw("ADDED", "a"), raw("ADDED", "a2", group="default/a")]}) == 1
    assert creations_in({"Records": [raw("ADDED", "a"), {"body": "{not json", "attributes": {}}]}) == 1
    burst = [raw("ADDED", f"s{i}") for i in range(BURST_CREATIONS)]
    assert flags_of(burst) == [True] * BURST_CREATIONS
    assert flags_of([*burst[:-1], raw("SYNC", "b")]) == [False] * BURST_CREATIONS
    assert flags_of([raw("ADDED", "a"), raw("ADDED", "b")]) == [False, False]  # both complete creates fit the bucket
    assert flags_of([raw("ADDED", "a")]) == [False]


@pytest.mark.parametrize(
    ("event_type", "burst", "hostname_first"),
    [("ADDED", 1, False), ("ADDED", 4, False), ("ADDED", 5, True), ("ADDED", 200, True), ("MODIFIED", 5, False)],
)
def test_a_creation_alone_in_its_batch_follows_the_watchers_burst_hint(
    event_type: str, burst: int, hostname_first: bool
) -> None:
    """A burst's first messages often come one per batch: the watcher's count (Delta.burst, BURST_CREATIONS or
    more) makes them hostname first too; the hint means nothing on anything but a creation."""
    reconciler = Recording()
    runtime = ServiceRuntime(Settings("c", "vpc-1"), Clients(), reconciler, None)  # type: ignore[arg-type]
    body = delta_for("Service", event_type, service()).with_burst(burst).to_body()
    runtime.handle_record(record(body, 1), ServiceBatch(creations=1 if event_type == "ADDED" else 0))
    (flags,) = reconciler.flags
    assert flags.hostname_first is hostname_first


@pytest.mark.parametrize(("creations", "hostname_first"), [(0, False), (1, False), (4, False), (5, True), (10, True)])
def test_hostname_first_is_what_the_batch_facts_say(creations: int, hostname_first: bool) -> None:
    """handle_record reads the burst from its argument alone (no state left by an earlier batch), any delta type."""
    reconciler = Recording()
    runtime = ServiceRuntime(Settings("c", "vpc-1"), Clients(), reconciler, None)  # type: ignore[arg-type]
    runtime.handle_record(record(delta_for("Service", "SYNC", service()).to_body(), 1), ServiceBatch(creations))
    (flags,) = reconciler.flags
    assert flags.hostname_first is hostname_first


@pytest.mark.parametrize(
    ("event_type", "receive_count", "attempt", "thorough", "check_attributes"),
    [
        ("MODIFIED", 1, 1, False, True),
        ("MODIFIED", 3, 3, True, True),
        ("SYNC", 1, 1, True, True),
        ("DELETED", 1, 1, True, True),
        ("HOSTS", 2, 1, False, False),  # the bucket deferral took one receive: still a first attempt
        ("HOSTS", 3, 2, True, False),
    ],
)
def test_pass_flags_are_a_pure_function_of_the_delta_and_its_attempt(
    event_type: str, receive_count: int, attempt: int, thorough: bool, check_attributes: bool
) -> None:
    delta = delta_for("Service", event_type, service())
    assert attempt_of(record(delta.to_body(), receive_count), delta) == attempt
    flags = pass_flags(delta, attempt, batch_creations=0)
    assert (flags.thorough, flags.check_attributes, flags.trust_applied) == (thorough, check_attributes, attempt == 1)


def test_a_services_endpoint_hints_in_one_batch_make_one_pass() -> None:
    """A rolling update queues a Service's ENDPOINTS hints behind its running pass; the next batch brings them
    together. Every pass re-reads the slices, so only the last pass of the Service in the batch is made; a hint of
    another Service, a HOSTS (it may wait for its bucket) or a later record from a sender not allowed to send it
    supersedes nothing."""
    svc, other = service(name="a"), service(name="b")

    def hint(of: dict[str, Any], n: int, sender: str = "AROAWATCHER:pod") -> dict[str, Any]:
        uid = of["metadata"]["uid"]
        body = endpoints_hint(f"default/{of['metadata']['name']}", uid, {"s": str(n)}, {}, 0.0).to_body()
        shaped = dict(record(body, 1).raw_event)
        shaped["messageId"] = f"{of['metadata']['name']}-{n}"
        shaped["attributes"] = {
            **shaped["attributes"],
            "MessageGroupId": f"default/{of['metadata']['name']}",
            "SenderId": sender,
        }
        return shaped

    senders = {"watcher": frozenset({"AROAWATCHER"}), "nodes": frozenset(), "sweeper": frozenset()}
    batch = {"Records": [hint(svc, 1), hint(other, 1), hint(svc, 2), hint(svc, 3)]}
    assert superseded_in(batch, senders) == {"a-1", "a-2"}
    forged_last = {"Records": [hint(svc, 1), hint(svc, 2, sender="AROAINTRUDER:x")]}
    assert superseded_in(forged_last, senders) == frozenset()
    modified = dict(record(delta_for("Service", "MODIFIED", svc).to_body(), 1).raw_event)
    modified["attributes"] = {**modified["attributes"], "MessageGroupId": "default/a", "SenderId": "AROAWATCHER:p"}
    assert superseded_in({"Records": [hint(svc, 1), modified]}, senders) == {"a-1"}  # a full pass covers it
    assert superseded_in({"Records": [modified, hint(svc, 1)]}, senders) == frozenset()

    # And the runtime makes no pass for a superseded hint.
    reconciler = Recording()
    runtime = ServiceRuntime(Settings("c", "vpc-1"), Clients(), reconciler, None)  # type: ignore[arg-type]
    assert runtime.handle_batch({"Records": [hint(svc, 1), hint(svc, 2), hint(other, 1)]}, None) == {
        "batchItemFailures": []
    }
    assert len(reconciler.flags) == 2
