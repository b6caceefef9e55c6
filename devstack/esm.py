"""The rules of the Lambda SQS event source mapping the runner applies, as pure functions over plain data: which
mappings Lambda would refuse, and what an invocation's answer means for its records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from devstack.queues import batch_item_failures
from devstack.template import FunctionFacts, TemplateFacts


@dataclass(frozen=True, slots=True)
class Invocation:
    function: str
    event_source: str
    request_id: str
    batch_size: int
    groups: tuple[str, ...]  # distinct MessageGroupIds in batch order
    message_ids: tuple[str, ...]
    started_at: float  # time.time()
    duration: float  # seconds
    outcome: str  # success | partial | error | invalid-response | timeout
    failed_ids: tuple[str, ...]  # records left on the queue for redelivery
    error: str | None = None


def check_mappings(
    functions: Iterable[FunctionFacts], facts: TemplateFacts, queue_urls: Mapping[str, str], env: Mapping[str, str]
) -> None:
    """Raise for what Lambda (or the runner) could not run: unresolved variables, a missing handler file or queue,
    a queue whose visibility timeout is shorter than the function's Timeout, a FIFO batch size above 10."""
    for fn in functions:
        missing = [k for k in fn.unresolved if k not in env]
        if missing:
            raise ValueError(f"{fn.logical_id}: environment {missing} unresolved; pass the parameters/queues")
        if not fn.handler_path.is_file():
            raise FileNotFoundError(f"{fn.logical_id}: handler file {fn.handler_path} does not exist")
        for event in fn.sqs_events:
            queue = facts.queues[event.queue_logical_id]
            if event.queue_logical_id not in queue_urls:
                raise ValueError(f"no URL for queue {event.queue_logical_id}; create the queues first")
            # Lambda refuses such an ESM: a batch could reappear while the first invocation still runs.
            if queue.visibility_timeout < fn.timeout:
                raise ValueError(
                    f"{queue.logical_id} VisibilityTimeout {queue.visibility_timeout}s < {fn.logical_id} "
                    f"Timeout {fn.timeout}s"
                )
            if queue.fifo and event.batch_size > 10:
                raise ValueError(f"{fn.logical_id}/{event.name}: BatchSize > 10 on a FIFO queue")


def classify(
    answer: Mapping[str, Any] | None, abandoned: bool, timeout: int, report_failures: bool, ids: set[str]
) -> tuple[str, set[str] | None, str | None]:
    """(outcome, records to leave on the queue (None: all), error) of an invocation whose environment answered
    `answer` ({"response"} or {"error"}; None: it ran past the Timeout). ReportBatchItemFailures: every record not
    listed is deleted, an invalid response fails the whole batch; without it, success deletes all."""
    if answer is None or abandoned:
        return "timeout", None, f"Task timed out after {timeout} seconds"
    if answer.get("error") is not None:
        return "error", None, str(answer["error"])
    response = answer.get("response")
    if not report_failures:
        return "success", set(), None
    failed = batch_item_failures(response, ids)
    if failed is None:
        return "invalid-response", None, f"invalid batch response: {response!r:.200}"
    return ("partial" if failed else "success"), failed, None
