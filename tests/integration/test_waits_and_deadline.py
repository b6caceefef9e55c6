"""The service runtime against moto and the emulator: waits on AWS are not failures, and no record outlives the
invocation's deadline (a context object whose remaining time is short stands in for Lambda's)."""

# ruff: noqa: F811  (the stack/emulator fixtures are imported from test_service_reconciler)

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from kubernetes import client

from ccm import batch, deadline
from ccm.contracts.messages import delta_for
from ccm.service import runtime as service_runtime
from devstack.k8s_emulator import Emulator
from tests.aws_holds import held_security_groups, throttled_describe_load_balancers
from tests.integration.conftest import World
from tests.integration.test_service_reconciler import (  # noqa: F401  (fixtures)
    Ctx,
    create_service,
    emulator,
    invoke,
    read,
    sqs_event,
    stack,
)


class ShortCtx(Ctx):
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def metric_names() -> set[str]:
    return set(service_runtime.metrics.metric_set)


def events(core: client.CoreV1Api) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(core.list_namespaced_event("default", _preload_content=False).data)[
        "items"
    ]
    return items


def visible_again(stack: dict[str, Any], count: int, within: float) -> list[dict[str, Any]]:
    """Poll until `count` messages are visible (they were returned with a short delay), or give up."""
    seen: list[dict[str, Any]] = []
    end = time.monotonic() + within
    while len(seen) < count and time.monotonic() < end:
        got = stack["sqs"].receive_message(QueueUrl=stack["queue_url"], MaxNumberOfMessages=10, WaitTimeSeconds=1)
        seen += got.get("Messages", [])
    return seen


def test_a_held_security_group_is_a_wait_logged_at_info_not_a_failure(
    stack: dict[str, Any], world: World, caplog: pytest.LogCaptureFixture
):
    core = stack["core"]
    # Source ranges: a security group of its own, which AWS holds after the LB is deleted (a default-range LB uses
    # the cluster's shared groups and has none to delete).
    svc = create_service(core, loadBalancerSourceRanges=["203.0.113.0/24"])
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    core.delete_namespaced_service("web", "default")
    deleting = read(core)
    service_runtime.metrics.clear_metrics()
    caplog.set_level(logging.INFO)
    with held_security_groups(times=1) as hold:
        response = invoke(stack, [delta_for("Service", "MODIFIED", deleting).to_body()])
        assert len(response["batchItemFailures"]) == 1  # comes back later: the finalizer stays
        assert hold.refused and read(core) is not None
        # Not a failure: counted apart, no Warning event, an INFO line saying what is waited on and the delay.
        assert "ReconcileWaiting" in metric_names() and "ReconcileFailed" not in metric_names()
        assert not [e for e in events(core) if e["type"] == "Warning"]
        waits = [r for r in caplog.records if r.getMessage() == "waiting on AWS"]
        assert waits and waits[0].levelno == logging.INFO
        assert hold.refused[0] in waits[0].waiting_on  # type: ignore[attr-defined]
        assert waits[0].retry_in_seconds == 15  # type: ignore[attr-defined]
        assert "Messages" not in stack["sqs"].receive_message(QueueUrl=stack["queue_url"])

        # Once AWS lets the group go, the next attempt converges (sent in another group: the first is in flight).
        event = sqs_event(stack, [delta_for("Service", "MODIFIED", deleting).to_body()], group="retry")
        assert stack["runtime"].handle_batch(event, Ctx()) == {"batchItemFailures": []}
    assert read(core) is None and hold.deleted == hold.refused


def test_records_are_not_started_when_the_invocation_is_almost_over(stack: dict[str, Any], world: World):
    core = stack["core"]
    services = [create_service(core, name) for name in ("a", "b", "c")]
    event = {"Records": []}
    for svc in services:
        body = delta_for("Service", "ADDED", svc).to_body()
        event["Records"] += sqs_event(stack, [body], group=f"default/{svc['metadata']['name']}")["Records"]
    service_runtime.metrics.clear_metrics()
    world.clients.counter.reset_thread()

    response = stack["runtime"].handle_batch(event, ShortCtx(remaining_ms=10_000))  # reserve: 25 s

    assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == {r["messageId"] for r in event["Records"]}
    # Not started: no AWS call but handing them back (SQS), the Services untouched, no failure counted.
    assert [op for op in world.clients.counter.thread_calls() if not op.startswith("sqs:")] == []
    assert all(not (read(core, s["metadata"]["name"])["metadata"].get("finalizers")) for s in services)
    assert "ReconcileFailed" not in metric_names()
    # Back within seconds (RETURN_DELAY_SECONDS), not after the queue's 360 s visibility timeout.
    assert len(visible_again(stack, 3, within=15)) == 3


def test_an_aws_call_that_could_outlive_the_invocation_is_not_started(
    stack: dict[str, Any], world: World, monkeypatch: pytest.MonkeyPatch
):
    core = stack["core"]
    svc = create_service(core)
    event = sqs_event(stack, [delta_for("Service", "ADDED", svc).to_body()])
    monkeypatch.setenv(deadline.RECORD_RESERVE_ENV, "0")  # the record starts...
    service_runtime.metrics.clear_metrics()
    world.clients.counter.reset_thread()

    # ...but 15 s minus the 6 s kept to hand the batch back is less than one bounded AWS attempt (14 s).
    response = stack["runtime"].handle_batch(event, ShortCtx(remaining_ms=15_000))

    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [event["Records"][0]["messageId"]]
    # The first AWS call (counted when asked for) was refused before it was sent; nothing was created.
    assert [op for op in world.clients.counter.thread_calls() if not op.startswith("sqs:")] == [
        "elbv2:DescribeLoadBalancers"
    ]
    assert world.clients.session.client("elbv2").describe_load_balancers()["LoadBalancers"] == []
    assert "ReconcileFailed" not in metric_names()
    assert not [e for e in events(core) if e["type"] == "Warning"]
    assert len(visible_again(stack, 1, within=15)) == 1


class CountdownCtx(Ctx):
    """A real countdown from `seconds`, as Lambda's context counts it."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.end - time.monotonic()) * 1000))


def test_the_batch_stops_starting_records_when_its_time_runs_out(
    stack: dict[str, Any], world: World, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(batch.GROUP_CONCURRENCY_ENV, "1")  # the groups one after the other: "a" first
    core = stack["core"]
    services = [create_service(core, name) for name in ("a", "b", "c")]
    event = {"Records": []}
    for svc in services:
        body = delta_for("Service", "ADDED", svc).to_body()
        event["Records"] += sqs_event(stack, [body], group=f"default/{svc['metadata']['name']}")["Records"]
    service_runtime.metrics.clear_metrics()
    emulator.clear_log()

    runtime = stack["runtime"]
    finished: list[str] = []
    handle = runtime.handle_record

    def counted(record: Any, facts: Any) -> None:  # the record's status is written early (after CreateLoadBalancer)
        try:
            handle(record, facts)
        finally:  # done also when handed back (a continuation would be: 3 creations are below BURST_CREATIONS)
            finished.append(record.message_id)

    monkeypatch.setattr(runtime, "handle_record", counted)

    class AlmostOverAfterFirst(Ctx):
        """Plenty of time until the first record is done; then only 10 s (under the 25 s reserve)."""

        def get_remaining_time_in_millis(self) -> int:
            return 10_000 if finished else 60_000

    response = stack["runtime"].handle_batch(event, AlmostOverAfterFirst())

    rest = event["Records"][1:]
    # 3 creations are no burst (below BURST_CREATIONS): "a" is made in one pass, only the two not started come back.
    assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == {r["messageId"] for r in rest}
    assert read(core, "a")["status"]["loadBalancer"]["ingress"]  # the first one was reconciled
    assert not read(core, "b")["metadata"].get("finalizers") and not read(core, "c")["metadata"].get("finalizers")
    assert "ReconcileFailed" not in metric_names()
    assert len(visible_again(stack, 2, within=15)) == 2


@pytest.mark.filterwarnings("ignore:Exception\\(ELBClientError\\) with code Throttling:UserWarning")
def test_a_throttled_call_does_not_outlive_the_invocation(stack: dict[str, Any], world: World):
    """AWS throttles every DescribeLoadBalancers, answering after 3 s. With 26 s left the record starts (reserve
    25 s) and the batch hands it back well before the deadline: the calls get 26 - 6 = 20 s, so two bounded
    attempts (14 s each at worst) start, a third would not fit. The old client (adaptive mode, 8 attempts, backoff
    up to 20 s each, plus its client-side rate limiter) kept retrying past the function's timeout."""
    core = stack["core"]
    svc = create_service(core)
    event = sqs_event(stack, [delta_for("Service", "ADDED", svc).to_body()])
    service_runtime.metrics.clear_metrics()
    started = time.monotonic()
    with throttled_describe_load_balancers(latency=3.0) as attempts:
        response = stack["runtime"].handle_batch(event, CountdownCtx(26))
    elapsed = time.monotonic() - started

    assert len(attempts) == 2
    assert elapsed < 26 - deadline.FINISH_RESERVE_SECONDS, elapsed
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [event["Records"][0]["messageId"]]
    assert "ReconcileFailed" not in metric_names()  # returned for lack of time, not failed
    assert not [e for e in events(core) if e["type"] == "Warning"]
    assert len(visible_again(stack, 1, within=15)) == 1
