"""An SQS event source mapping (ESM) stand-in that invokes the real Lambda handlers in this process.

Why not moto's own SQS->Lambda trigger: it needs Docker and ignores ReportBatchItemFailures. What this copies from
the Lambda ESM for SQS (see /work/shared/spec/serverless-notes.md):
- up to ScalingConfig.MaximumConcurrency concurrent invocations per event source (one poller thread each, so a
  poller receives, invokes and deletes before it receives again);
- batches of at most BatchSize (<= 10 for FIFO), records shaped exactly like Lambda's SQS records;
- ReportBatchItemFailures: delete every record not listed; an invalid response (unknown or empty itemIdentifier,
  not a JSON object) fails the whole batch. Without it: delete all on success. An exception or a run longer than
  the function Timeout deletes nothing. Failed records come back when their visibility timeout expires (SQS does
  that, as does moving them to the DLQ after maxReceiveCount receives).

Deliberate differences: the runner is ONE process standing in for every Lambda function, so os.environ is set
once at start from the merged environment of all functions (a key two functions set differently gets the last
value, with a warning); handlers share sys.modules and sys.path (sibling modules with the same name in two code
dirs would collide); a timed-out handler is not killed, its result is just ignored. Lambda's own variables
(AWS_LAMBDA_FUNCTION_NAME, AWS_LAMBDA_LOG_LEVEL, ...) are not set, only AWS_REGION/AWS_DEFAULT_REGION.

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

import importlib.util
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.config import Config

from devstack.aws import client as aws_client
from devstack.queues import batch_item_failures, lambda_record, queue_arn
from devstack.template import FunctionFacts, SqsEventSource, TemplateFacts

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
_QUEUE_COUNTS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


@dataclass(slots=True)
class LambdaContext:
    """The attributes and method of the Python runtime's context object that handlers and Powertools use."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    deadline: float  # time.monotonic() value at which the function times out
    identity: Any = None
    client_context: Any = None

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


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


@dataclass(slots=True)
class _Source:
    function: FunctionFacts
    event: SqsEventSource
    queue_url: str
    queue_arn: str
    handler: Handler
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
        functions: Iterable[str] | None = None,
        wait_time_seconds: int = 1,
        default_concurrency: int = 5,
        fresh_modules: Iterable[str] | None = None,
    ) -> None:
        """facts: the template (parameters applied); queue_urls: {queue logical id: URL} from create_queues.

        sqs_client or endpoint_url: where the queues live. env_overrides go on top of the template environment
        (e.g. AWS_ENDPOINT_URL, KUBECONFIG). functions: logical ids to run (default: all with SQS events).
        default_concurrency: pollers for an event without ScalingConfig (Lambda would scale up to 1000).
        fresh_modules: top-level package names to import afresh at start and put back at stop (default: the
        packages of the functions' layers, e.g. "ccm"), so module-level state (Powertools Metrics read POWERTOOLS_*
        at construction, cached runtimes and clients) is built inside the function environment, as in a new
        Lambda execution environment, whatever this process (a test session) imported before. () disables it.
        """
        if sqs_client is None and endpoint_url is None:
            raise ValueError("give sqs_client or endpoint_url (the runner never talks to real AWS by default)")
        self.facts = facts.with_resources(dict(queue_urls))
        self.queue_urls = dict(queue_urls)
        self.region = region or facts.region
        self.env_overrides = dict(env_overrides or {})
        self.wait_time_seconds = wait_time_seconds
        self.default_concurrency = default_concurrency
        self._functions = self._functions_of(self.facts, functions)
        layer_packages: set[str] = set().union(*(_top_level_names(d) for f in self._functions for d in f.layer_dirs))
        self.fresh_modules = tuple(sorted(layer_packages) if fresh_modules is None else fresh_modules)
        self._set_aside_modules: dict[str, Any] = {}
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
        self._saved_env: dict[str, str | None] = {}
        self._added_paths: list[str] = []
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
        self._check()
        self._sources = []
        self._stopping.clear()
        self._set_environment()
        self._set_aside_modules = _pop_modules(self.fresh_modules)
        try:
            for fn in self._functions:
                for path in (fn.code_dir, *fn.layer_dirs):  # like Lambda: /var/task before /opt/python
                    if str(path) not in sys.path:
                        sys.path.insert(len(self._added_paths), str(path))
                        self._added_paths.append(str(path))
            for fn in self._functions:
                handler = _load_handler(fn)  # init phase: module code runs once, with the environment set
                for event in fn.sqs_events:
                    url = self.queue_urls[event.queue_logical_id]
                    self._sources.append(
                        _Source(fn, event, url, queue_arn(self._sqs, url), handler, self._concurrency(event))
                    )
        except BaseException:
            self._restore()
            raise
        self._started = True
        for source in self._sources:
            for i in range(source.concurrency):
                name = f"esm-{source.function.logical_id}-{source.event.name}-{i}"
                thread = threading.Thread(target=self._poll, args=(source,), name=name, daemon=True)
                source.threads.append(thread)
                thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop polling; waits for in-flight invocations to finish (and delete), then restores env/sys.path."""
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
        self._restore()

    def _restore(self) -> None:
        for key, old in self._saved_env.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        self._saved_env.clear()
        for path in self._added_paths:
            if path in sys.path:
                sys.path.remove(path)
        self._added_paths.clear()
        if self.fresh_modules:
            _pop_modules(self.fresh_modules)  # drop this runner's copies, then bring back what was there before
            sys.modules.update(self._set_aside_modules)
            self._set_aside_modules = {}

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
        context = self._context(fn, request_id)
        started, t0 = time.time(), time.monotonic()
        error: str | None = None
        response: Any = None
        abandoned = self._take_abandon(fn.logical_id)
        try:
            seen = records[: max(1, len(records) // 2)] if abandoned else records
            response = source.handler({"Records": seen}, context)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("%s raised; the whole batch will be retried", fn.logical_id, exc_info=True)
        duration = time.monotonic() - t0

        failed: set[str] | None  # None = the whole batch failed
        if error is not None:
            outcome, failed = "error", None
        elif duration > fn.timeout or abandoned:
            outcome, failed, error = "timeout", None, f"Task timed out after {fn.timeout} seconds"
        elif source.event.report_batch_item_failures:
            failed = batch_item_failures(response, set(ids))
            if failed is None:
                outcome, error = "invalid-response", f"invalid batch response: {response!r:.200}"
            else:
                outcome = "partial" if failed else "success"
        else:
            outcome, failed = "success", set()
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

    def _context(self, fn: FunctionFacts, request_id: str) -> LambdaContext:
        name = f"{self.facts.stack_name}-{fn.logical_id}"
        return LambdaContext(
            function_name=name,
            function_version="$LATEST",
            invoked_function_arn=f"arn:aws:lambda:{self.region}:{self.facts.account_id}:function:{name}",
            memory_limit_in_mb=fn.memory_size,
            aws_request_id=request_id,
            log_group_name=f"/aws/lambda/{name}",
            log_stream_name=time.strftime("%Y/%m/%d/[$LATEST]") + uuid.uuid4().hex,
            deadline=time.monotonic() + fn.timeout,
        )

    # ---- helpers ----

    @staticmethod
    def _functions_of(facts: TemplateFacts, names: Iterable[str] | None) -> list[FunctionFacts]:
        wanted = set(names) if names is not None else None
        return [f for f in facts.functions.values() if f.sqs_events and (wanted is None or f.logical_id in wanted)]

    def _concurrency(self, event: SqsEventSource) -> int:
        return event.maximum_concurrency or self.default_concurrency

    def _check(self) -> None:
        for fn in self._functions:
            missing = [k for k in fn.unresolved if k not in self.env_overrides]
            if missing:
                raise ValueError(f"{fn.logical_id}: environment {missing} unresolved; pass the parameters/queues")
            if not fn.handler_path.is_file():
                raise FileNotFoundError(f"{fn.logical_id}: handler file {fn.handler_path} does not exist")
            for event in fn.sqs_events:
                queue = self.facts.queues[event.queue_logical_id]
                if event.queue_logical_id not in self.queue_urls:
                    raise ValueError(f"no URL for queue {event.queue_logical_id}; create the queues first")
                # Lambda refuses such an ESM: a batch could reappear while the first invocation still runs.
                if queue.visibility_timeout < fn.timeout:
                    raise ValueError(
                        f"{queue.logical_id} VisibilityTimeout {queue.visibility_timeout}s < {fn.logical_id} "
                        f"Timeout {fn.timeout}s"
                    )
                if queue.fifo and event.batch_size > 10:
                    raise ValueError(f"{fn.logical_id}/{event.name}: BatchSize > 10 on a FIFO queue")

    def _set_environment(self) -> None:
        env: dict[str, str] = {"AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region}
        for fn in self._functions:
            for key, value in fn.environment.items():
                if key in env and env[key] != value and key not in self.env_overrides:
                    log.warning("functions disagree on %s; using %s's value %r", key, fn.logical_id, value)
                env[key] = value
        env.update(self.env_overrides)
        for key, value in env.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value

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


def _top_level_names(layer_dir: Path) -> frozenset[str]:
    """The importable top-level packages/modules a layer directory provides (what Lambda puts on sys.path)."""
    if not layer_dir.is_dir():
        return frozenset()
    return frozenset(
        p.stem if p.suffix == ".py" else p.name
        for p in layer_dir.iterdir()
        if (p.suffix == ".py" and p.is_file()) or (p / "__init__.py").is_file()
    )


def _pop_modules(packages: tuple[str, ...]) -> dict[str, Any]:
    names = [n for n in sys.modules if any(n == p or n.startswith(p + ".") for p in packages)]
    return {n: sys.modules.pop(n) for n in names}


def _load_handler(fn: FunctionFacts) -> Handler:
    """Import the handler file under a name unique to the function (every function has its own app.py).

    The file is executed again on every runner start (a cold start); modules it imports (the ccm layer) stay
    cached in sys.modules like in any Python process, unless the runner was given them as fresh_modules.
    """
    module_name = f"devstack_fn_{fn.logical_id}_{fn.handler_module.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, fn.handler_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {fn.handler_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and typing look modules up here while executing
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    handler: Handler = getattr(module, fn.handler_function)
    return handler
