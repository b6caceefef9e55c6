"""An SQS event source mapping (ESM) stand-in that invokes the real Lambda handlers as Lambda runs them.

Why not moto's own SQS->Lambda trigger: it needs Docker and ignores ReportBatchItemFailures. What this copies from
the Lambda ESM for SQS (AWS Lambda Developer Guide, "Using Lambda with Amazon SQS"):
- up to ScalingConfig.MaximumConcurrency concurrent invocations per event source (one poller thread each, so a
  poller receives, invokes and deletes before it receives again);
- batches of at most BatchSize (<= 10 for FIFO), records shaped exactly like Lambda's SQS records;
- ReportBatchItemFailures: delete every record not listed; an invalid response (unknown or empty itemIdentifier,
  not a JSON object) fails the whole batch. Without it: delete all on success. An exception or a run longer than
  the function Timeout deletes nothing. Failed records come back when their visibility timeout expires (SQS does
  that, as does moving them to the DLQ after maxReceiveCount receives).

And from Lambda itself (devstack/lambda_service.py): each execution environment is its own process with only the
function's environment, serving one invocation at a time; one running past the function's Timeout is killed with
its environment and its records come back after the visibility timeout. What they print is kept per function
(logs(), log_records()). One environment per function is created at start(), more when invocations overlap.

For chaos tests: pause()/resume() stop and restart receiving (pause waits until nothing is in flight), and
abandon_next(n) makes the next n invocations time out mid-batch (see tests/chaos).

Use::

    server, url = start_moto_server()
    facts = load_template("template.yaml", {"ClusterName": "dev", "VpcId": world.vpc_id})
    urls = create_queues(client("sqs", url, facts.region), facts, "dev")
    with EventSourceRunner(facts, urls, endpoint_url=url, env_overrides={"AWS_ENDPOINT_URL": url, ...}) as r:
        ...send deltas...
        r.drain(30)
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from botocore.config import Config

from devstack.aws import client as aws_client
from devstack.environments import LogLine, Pool
from devstack.esm import Invocation, check_mappings, classify
from devstack.lambda_env import LambdaContext
from devstack.lambda_service import LambdaService, fresh_modules
from devstack.queues import lambda_record, queue_arn
from devstack.template import FunctionFacts, SqsEventSource, TemplateFacts

log = logging.getLogger(__name__)

__all__ = ["EventSourceRunner", "Invocation", "LambdaContext", "LogLine"]
_QUEUE_COUNTS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


@dataclass(slots=True)
class _Source:
    function: FunctionFacts
    event: SqsEventSource
    queue_url: str
    queue_arn: str
    pool: Pool
    concurrency: int
    active: int = 0
    threads: list[threading.Thread] = field(default_factory=list)


class EventSourceRunner:
    def __init__(
        self,
        facts: TemplateFacts,
        queue_urls: Mapping[str, str],
        *,
        sqs_client: Any = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        env_overrides: Mapping[str, str] | None = None,
        function_env: Mapping[str, Mapping[str, str]] | None = None,
        functions: Iterable[str] | None = None,
        wait_time_seconds: int = 1,
        default_concurrency: int = 5,
        echo_logs: TextIO | None = None,
    ) -> None:
        """facts: the template (parameters applied); queue_urls: {queue logical id: URL} from create_queues.

        sqs_client or endpoint_url: where the queues live. env_overrides go on top of the template environment
        (e.g. AWS_ENDPOINT_URL, KUBECONFIG); function_env: logical id -> variables on top of those for that
        function only (its own identity, e.g. its KUBECONFIG).
        functions: logical ids to run (default: all with SQS events).
        default_concurrency: pollers for an event without ScalingConfig (Lambda would scale up to 1000).
        echo_logs: also write every log line of the functions there ("<logical id> <line>"), e.g. sys.stdout.
        """
        if sqs_client is None and endpoint_url is None:
            raise ValueError("give sqs_client or endpoint_url (the runner never talks to real AWS by default)")
        self.facts = facts.with_resources(dict(queue_urls))
        self.queue_urls = dict(queue_urls)
        self.region = region or facts.region
        self.env_overrides = dict(env_overrides or {})
        self.function_env = {name: dict(env) for name, env in (function_env or {}).items()}
        self.wait_time_seconds = wait_time_seconds
        self.default_concurrency = default_concurrency
        self._functions = self._functions_of(self.facts, functions)
        self.fresh_modules = fresh_modules(self._functions)  # what every execution environment imports afresh
        self._lambda = LambdaService(self.facts, self.region, self.env_overrides, self.function_env, echo_logs)
        pollers = sum(self._concurrency(e) for f in self._functions for e in f.sqs_events)
        # boto3 clients are thread-safe; the pool must fit every poller or urllib3 discards connections.
        self._sqs = sqs_client or aws_client(
            "sqs", str(endpoint_url), self.region, config=Config(max_pool_connections=pollers + 4)
        )
        self._sources: list[_Source] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._running = threading.Event()  # cleared by pause(): pollers stop receiving
        self._running.set()
        self._receiving = 0  # pollers inside ReceiveMessage (pause() waits for them too)
        self._abandon: dict[str | None, int] = {}  # function logical id (None: any) -> invocations to time out
        self._started = False
        self._log: list[Invocation] = []
        self.invocations = 0
        self.records = 0
        self.failures = 0  # records not deleted (reported failed, or their whole batch failed)
        self.errors = 0  # invocations that failed as a whole (exception, timeout, invalid response)
        self.peak_concurrency: dict[str, int] = {}

    # ---- lifecycle ----

    def start(self) -> None:
        if self._started:
            raise RuntimeError("runner already started")
        check_mappings(self._functions, self.facts, self.queue_urls, self.env_overrides)
        self._sources = []
        self._stopping.clear()
        self._lambda.open(self._functions)
        try:
            for fn in self._functions:
                for event in fn.sqs_events:
                    url = self.queue_urls[event.queue_logical_id]
                    pool, concurrency = self._lambda.pool(fn.logical_id), self._concurrency(event)
                    self._sources.append(_Source(fn, event, url, queue_arn(self._sqs, url), pool, concurrency))
        except BaseException:
            self._lambda.close()
            raise
        self._started = True
        for source in self._sources:
            for i in range(source.concurrency):
                name = f"esm-{source.function.logical_id}-{source.event.name}-{i}"
                thread = threading.Thread(target=self._poll, args=(source,), name=name, daemon=True)
                source.threads.append(thread)
                thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop polling; waits for in-flight invocations to finish (and delete), then ends the environments."""
        if not self._started:
            return
        self._stopping.set()
        for source in self._sources:
            for thread in source.threads:
                thread.join(timeout)
        still = [t.name for s in self._sources for t in s.threads if t.is_alive()]
        if still:
            log.warning("invocations still running after stop(timeout=%s): %s", timeout, still)
        self._started = False
        self._lambda.close()

    def __enter__(self) -> EventSourceRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def drain(self, timeout: float) -> None:
        """Return once every source queue is empty (nothing visible, in flight or delayed) and no invocation is
        running; raises TimeoutError otherwise. Messages waiting out a visibility timeout count as not drained."""
        if not self._started:
            raise RuntimeError("start the runner first")
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            if self._idle() and all(sum(c.values()) == 0 for c in self._queue_counts().values()) and self._idle():
                quiet += 1
                if quiet >= 2:  # twice in a row: counts are approximate and move between calls
                    return
            else:
                quiet = 0
            time.sleep(0.05)
        raise TimeoutError(f"not drained after {timeout}s: in flight={self._in_flight()}, {self._queue_counts()}")

    def pause(self, timeout: float = 60) -> None:
        """Stop receiving and wait until no invocation runs (chaos tests fast-forward the queues meanwhile)."""
        self._running.clear()
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._receiving == 0 and all(s.active == 0 for s in self._sources):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"invocations still running after {timeout}s")
            time.sleep(0.02)

    def resume(self) -> None:
        self._running.set()

    def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any] | None:
        """A direct (synchronous) invocation of any function of the template, e.g. what the sweeper's schedule
        sends, in one of its execution environments: {"response": ...} or {"error": "..."}; None if it ran past
        the function's Timeout (its environment was killed)."""
        if not self._started:
            raise RuntimeError("start the runner first")
        return self._lambda.invoke(function, event, str(uuid.uuid4()))

    def abandon_next(self, n: int, function: str | None = None) -> None:
        """Simulate Lambda timeouts: the next n invocations (of `function`, or any) are killed mid-batch: the
        handler sees only the first half of the records, nothing is deleted, and every record comes back after
        the queue's visibility timeout, as after a real timeout."""
        with self._lock:
            self._abandon[function] = self._abandon.get(function, 0) + n

    def clear_faults(self) -> None:
        with self._lock:
            self._abandon.clear()
        self._running.set()

    @property
    def log(self) -> list[Invocation]:
        with self._lock:
            return list(self._log)

    def logs(self, function: str | None = None) -> list[str]:
        """What the execution environments of `function` (a logical id; None: all) printed, line by line."""
        return self._lambda.logs.texts(function)

    def log_records(self, function: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines (LogFormat JSON, Powertools, EMF) of `function`, parsed."""
        return [record for _, record in self.timed_log_records(function)]

    def timed_log_records(self, function: str | None = None) -> list[tuple[float, dict[str, Any]]]:
        """log_records with the time each line was read (CloudWatch Logs' ingestion time, Logs Insights' bins)."""
        return self._lambda.timed_log_records(function)

    def probe(self, function: str, path: str | Path, name: str, *args: Any, every_new: bool = False) -> list[Any]:
        """For tests: the results of `name`(*args) from the file at `path`, run inside every live execution
        environment of `function` between its invocations (every_new: and in each environment created later)."""
        return self._lambda.pool(function).probe(str(path), name, list(args), every_new=every_new)

    def prewarm(self, function: str, count: int) -> int:
        """Bench only: `count` idle environments of `function` before a burst (see Pool.prewarm)."""
        return self._lambda.pool(function).prewarm(count)

    def environments(self, function: str) -> list[int]:
        """The pids of every execution environment `function` had so far (a cold start each)."""
        return self._lambda.pool(function).pids

    # ---- polling and invoking ----

    def _poll(self, source: _Source) -> None:
        while not self._stopping.is_set():
            with self._lock:
                receiving = self._running.is_set()
                self._receiving += receiving
            if not receiving:  # paused
                self._running.wait(0.1)
                continue
            try:
                messages = self._sqs.receive_message(
                    QueueUrl=source.queue_url,
                    MaxNumberOfMessages=min(source.event.batch_size, 10),
                    WaitTimeSeconds=self.wait_time_seconds,
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                ).get("Messages", [])
            except Exception:
                with self._lock:
                    self._receiving -= 1
                if self._stopping.is_set():
                    return
                log.exception("ReceiveMessage failed on %s", source.queue_url)
                time.sleep(0.5)
                continue
            if not messages:
                with self._lock:
                    self._receiving -= 1
                continue
            try:
                self._invoke(source, messages)
            except Exception:  # a runner bug must not kill the poller; SQS redelivers the batch
                log.exception("runner failed around an invocation of %s", source.function.logical_id)

    def _invoke(self, source: _Source, messages: list[dict[str, Any]]) -> None:
        fn = source.function
        with self._lock:
            self._receiving -= 1  # active from here on: pause() never sees a gap
            source.active += 1
            key = fn.logical_id
            self.peak_concurrency[key] = max(self.peak_concurrency.get(key, 0), self._active_for(key))
        try:
            invocation = self._run_batch(source, messages)
        finally:
            with self._lock:  # even if the runner itself failed: drain() must not wait forever
                source.active -= 1
        with self._lock:
            self._log.append(invocation)
            self.invocations += 1
            self.records += invocation.batch_size
            self.failures += len(invocation.failed_ids)
            self.errors += invocation.outcome not in ("success", "partial")

    def _run_batch(self, source: _Source, messages: list[dict[str, Any]]) -> Invocation:
        fn = source.function
        request_id = str(uuid.uuid4())
        records = [lambda_record(m, source.queue_arn, self.region) for m in messages]
        ids = [r["messageId"] for r in records]
        started, t0 = time.time(), time.monotonic()
        abandoned = self._take_abandon(fn.logical_id)
        seen = records[: max(1, len(records) // 2)] if abandoned else records
        answer = self._lambda.invoke_in(source.pool, {"Records": seen}, request_id)
        duration = time.monotonic() - t0
        outcome, failed, error = classify(
            answer, abandoned, fn.timeout, source.event.report_batch_item_failures, set(ids)
        )
        if outcome == "error":
            log.warning("%s raised (%s); the whole batch will be retried", fn.logical_id, error)
        delete = [] if failed is None else [r for r in records if r["messageId"] not in failed]
        if delete:
            self._delete(source, delete)
        left = tuple(ids) if failed is None else tuple(i for i in ids if i in failed)

        return Invocation(
            function=fn.logical_id,
            event_source=source.event.name,
            request_id=request_id,
            batch_size=len(records),
            groups=tuple(dict.fromkeys(r["attributes"].get("MessageGroupId", "") for r in records)),
            message_ids=tuple(ids),
            started_at=started,
            duration=duration,
            outcome=outcome,
            failed_ids=left,
            error=error,
        )

    def _delete(self, source: _Source, records: list[dict[str, Any]]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(records)]
        try:
            result = self._sqs.delete_message_batch(QueueUrl=source.queue_url, Entries=entries)
        except Exception:
            log.exception("DeleteMessageBatch failed; the records will be redelivered")
            return
        for failure in result.get("Failed", []):
            log.warning("could not delete a record: %s", failure)

    # ---- helpers ----

    @staticmethod
    def _functions_of(facts: TemplateFacts, names: Iterable[str] | None) -> list[FunctionFacts]:
        wanted = set(names) if names is not None else None
        return [f for f in facts.functions.values() if f.sqs_events and (wanted is None or f.logical_id in wanted)]

    def _concurrency(self, event: SqsEventSource) -> int:
        return event.maximum_concurrency or self.default_concurrency

    def _take_abandon(self, function: str) -> bool:
        with self._lock:
            for key in (function, None):
                if self._abandon.get(key, 0) > 0:
                    self._abandon[key] -= 1
                    return True
        return False

    def _active_for(self, function: str) -> int:
        return sum(s.active for s in self._sources if s.function.logical_id == function)

    def _in_flight(self) -> int:
        with self._lock:
            return sum(s.active for s in self._sources)

    def _idle(self) -> bool:
        return self._in_flight() == 0

    def _queue_counts(self) -> dict[str, dict[str, int]]:
        counts = {}
        for url in dict.fromkeys(s.queue_url for s in self._sources):
            attrs = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(_QUEUE_COUNTS))["Attributes"]
            counts[url] = {k: int(attrs.get(k, 0)) for k in _QUEUE_COUNTS}
        return counts
