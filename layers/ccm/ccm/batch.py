"""SQS FIFO batch handling shared by the Lambda runtimes (services, nodes).

The records of one batch are split by MessageGroupId. A group is one Service or Node, so different groups are
independent: they run in parallel, on at most CCM_GROUP_CONCURRENCY threads (default 2; the calls are I/O waits).
Inside a group the records run in order, and a failure fails the rest of its group. Then every failed record's
visibility is set to the retry delay its handler chose (`defer`, see ccm.retry), and the records skipped after it in
the same group get the same delay, so the group resumes as one. Nothing sleeps.

Why not Powertools' SqsFifoPartialProcessor (used before): it runs the whole batch in one loop, one record after the
other, so the tenth record of a batch waited for the nine Services before it. What it gave us is the group skip and
the response shape, {"batchItemFailures": [{"itemIdentifier": id}]}: both are a few lines here.

Facts about the whole batch (e.g. how many Services it creates) are computed once, by `batch_facts`, before any
record runs, and handed to every `handle_record` as an argument: a frozen value, so the record threads share it
without a lock, and a record handled outside a batch (tests, bench) says explicitly what batch it pretends to be in.

The invocation's deadline (ccm.deadline): a record starts only while enough time is left, and one cut short by it
(OutOfTime) is returned too; both come back after ccm.retry.RETURN_DELAY_SECONDS, and neither is a failure.

Thread safety of what a record touches: the AWS call counter and the deadline are per thread (each worker enters
the invocation's deadline itself); `_delays` gets distinct keys from distinct threads (atomic dict stores); the
clients are made under a lock (ccm.aws.clients); the Powertools Logger and Metrics are made safe once per process
by `share_across_threads` (the handler modules call it). Each record runs in a copy of the caller's contextvars, so
it sees the invocation's log keys (request id, cold start) and its own keys stay its own.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ccm import deadline
from ccm.contracts.cloud import CloudClients
from ccm.contracts.queues import HandedBack
from ccm.retry import RETURN_DELAY_SECONDS

log = logging.getLogger(__name__)

# 2 threads x the ESM's MaximumConcurrency 10 = 20 reconciles at once, about the burst of the ELB API's token bucket
# for creations (20, then 5 a second): more only trades waiting on the queue for throttled calls, and a throttled
# record backs off 5 s doubling (bench/lambda_model.py puts 10-24 at once near the floor, 80 at twice it; a 200-
# Service burst on the devstack with 80 at once did not converge in 15 minutes).
DEFAULT_GROUP_CONCURRENCY: Final = 2
GROUP_CONCURRENCY_ENV: Final = "CCM_GROUP_CONCURRENCY"


class Deferred(Exception):
    """The record is to be processed later (its visibility is set to the delay); not an error."""


class Returned(Deferred):
    """The invocation's time ran out before (or while) this record was processed."""


def group_concurrency() -> int:
    """Groups of one batch run on at most this many threads (CCM_GROUP_CONCURRENCY; 1 = one after the other)."""
    # Process-level like CCM_RECORD_RESERVE_SECONDS: read per batch so a test can change it while a runtime lives.
    raw = os.environ.get(GROUP_CONCURRENCY_ENV, "")
    try:
        return max(1, int(raw)) if raw else DEFAULT_GROUP_CONCURRENCY
    except ValueError:
        return DEFAULT_GROUP_CONCURRENCY


def share_across_threads(logger: Logger, metrics: Metrics) -> None:
    """Make a function's Powertools Logger and Metrics safe for records running in parallel threads.

    Logger: the runtimes set per-record keys (correlation id, kind, ...) with append_keys/remove_keys, which change
    keys shared by every thread; routed to Powertools' thread-safe (contextvar) keys instead, each record logs its
    own. Metrics: add_metric reads, changes and writes back a shared dict (and flushes at 100 values): one lock."""
    logger.append_keys = logger.thread_safe_append_keys  # type: ignore[method-assign]
    logger.remove_keys = logger.thread_safe_remove_keys  # type: ignore[method-assign]
    lock = threading.Lock()
    add_metric = metrics.add_metric

    @functools.wraps(add_metric)
    def locked_add_metric(*args: Any, **kwargs: Any) -> None:
        with lock:
            add_metric(*args, **kwargs)

    metrics.add_metric = locked_add_metric  # type: ignore[method-assign]


@dataclass(frozen=True)
class BatchFacts:
    """What the records of one batch learn from the batch as a whole. Empty here: a runtime that needs something
    subclasses it (e.g. ccm.service.runtime.ServiceBatch). Frozen: shared read-only by the record threads."""


NO_FACTS: Final = BatchFacts()

FactsT = TypeVar("FactsT", bound=BatchFacts)


class FifoBatchRuntime(Generic[FactsT]):
    """Runs a batch's groups (see the module docstring); a subclass says what one record does (`handle_record`)
    and what its records need to know of their batch (`batch_facts`; `FactsT`, NO_FACTS when nothing)."""

    def __init__(self, clients: CloudClients) -> None:
        self.clients = clients
        self._delays: dict[str, int] = {}

    def batch_facts(self, event: dict[str, Any]) -> FactsT:
        """Called once per batch, before any record runs, with the whole SQS event; must not raise for a malformed
        record (`handle_record` rejects it). No default: a generic one could not be typed as `FactsT`."""
        raise NotImplementedError

    def handle_record(self, record: SQSRecord, batch: FactsT) -> None:
        """Process one record; `batch` is what `batch_facts` returned for the batch it came in. Raise to fail it
        (and the rest of its group), Deferred to hand it back without counting a failure."""
        raise NotImplementedError

    def defer(self, message_id: str, seconds: int) -> None:
        """Retry this (failing) record after `seconds`; 0 = visible again at once (poison -> DLQ quickly)."""
        self._delays[message_id] = seconds

    def handle_batch(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for raw in event.get("Records", []):
            groups.setdefault(_group_of(raw), []).append(raw)
        remaining = deadline.remaining_of(context)
        facts = self.batch_facts(event)
        run = functools.partial(self._run_group, remaining, deadline.record_reserve_seconds(), facts)
        workers = min(len(groups), group_concurrency())
        if workers <= 1:
            outcomes = [run(records) for records in groups.values()]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="record") as pool:
                # A copy of this thread's context per group: the invocation's log keys, its own keys stay its own.
                tasks = [pool.submit(contextvars.copy_context().run, run, records) for records in groups.values()]
                outcomes = [task.result() for task in tasks]
        failed = [message_id for group_failed, _ in outcomes for message_id in group_failed]
        returned = [message_id for _, group_returned in outcomes for message_id in group_returned]
        if returned:
            log.info(
                "time running out: %d record(s) returned for the next invocation",
                len(returned),
                extra={"returned": returned, "retry_in_seconds": RETURN_DELAY_SECONDS},
            )
        order = {raw["messageId"]: i for i, raw in enumerate(event.get("Records", []))}
        response = {"batchItemFailures": [{"itemIdentifier": i} for i in sorted(failed, key=order.__getitem__)]}
        self.defer_failures(event, response)
        return response

    def _run_group(
        self, remaining: Callable[[], float] | None, reserve: float, facts: FactsT, records: list[dict[str, Any]]
    ) -> tuple[list[str], list[str]]:
        """Run one group's records in order: (failed ids: the failing record and the rest of the group, returned)."""
        returned: list[str] = []
        with deadline.invocation(remaining):  # a context variable: set in the context that runs the records
            for i, raw in enumerate(records):
                message_id = raw["messageId"]
                try:
                    if not deadline.can_start(remaining() if remaining else None, reserve):
                        raise Returned("not started: the invocation's time is running out")
                    try:
                        self.handle_record(SQSRecord(raw), facts)
                    except deadline.OutOfTime as err:
                        raise Returned(f"cut short: {err}") from None
                except Returned:
                    returned.append(message_id)
                    self.defer(message_id, RETURN_DELAY_SECONDS)
                    return [r["messageId"] for r in records[i:]], returned
                except Exception as err:
                    # The runtimes log their own failures; a Deferred is not one.
                    log.debug("record %s not done: %r; the rest of its group follows", message_id, err, exc_info=True)
                    return [r["messageId"] for r in records[i:]], returned
        return [], returned

    def defer_failures(self, event: dict[str, Any], response: dict[str, Any]) -> None:
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        if not failed:
            return
        entries_by_queue: dict[str, list[HandedBack]] = {}
        group_delay: dict[str, int] = {}
        for raw in event.get("Records", []):
            if raw["messageId"] not in failed:
                continue
            group = _group_of(raw)
            delay = self._delays.pop(raw["messageId"], group_delay.get(group, 0))
            group_delay.setdefault(group, delay)
            entries_by_queue.setdefault(raw["eventSourceARN"], []).append(
                HandedBack(raw["messageId"], raw["receiptHandle"], delay)
            )
        hand_back(self.clients, entries_by_queue)


def _group_of(raw: dict[str, Any]) -> str:
    return str(raw.get("attributes", {}).get("MessageGroupId", ""))


def hand_back(clients: CloudClients, by_queue_arn: dict[str, list[HandedBack]]) -> None:
    """Each queue's records made visible again after their delays (ccm.contracts.queues.MessageQueue.hand_back)."""
    for arn, messages in by_queue_arn.items():
        try:
            queue = clients.queue_of_arn(arn)
        except Exception:  # the queue's own visibility timeout still brings them back
            log.warning("could not find the queue to set retry delays", exc_info=True)
            continue
        queue.hand_back(messages)
