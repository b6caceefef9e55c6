"""Lambda's side of the devstack runner (devstack/runner.py is the event source mapping's): the execution environments
of the template's functions, an invocation in one of them, and what they printed.

As Lambda does (devstack/environments.py, devstack/lambda_env.py): every execution environment is its own process
with only the function's environment (Lambda's reserved variables, LoggingConfig's AWS_LAMBDA_LOG_FORMAT /
AWS_LAMBDA_LOG_LEVEL, the template's variables, then env_overrides), logging set up as the Python runtime does (the
root logger at ApplicationLogLevel), the handler imported once per environment and invocations served one at a
time; concurrent invocations never share module state. An invocation still running at the function's Timeout is
killed with its environment (the next one starts cold); context.get_remaining_time_in_millis() counts down for real.
What the environments print is kept per function, as CloudWatch Logs would keep it. One environment per function
is created by open() (like the first invocation's init), more when invocations overlap.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from devstack.environments import InitError, LogBook, LogLine, Pool, lambda_environment
from devstack.template import FunctionFacts, TemplateFacts

MAX_LOG_LINES = 500_000


class LambdaService:
    """The functions' execution environments (a Pool per logical id) and their logs (kept across open/close)."""

    def __init__(
        self,
        facts: TemplateFacts,
        region: str,
        env_overrides: Mapping[str, str],
        function_env: Mapping[str, Mapping[str, str]],
        echo_logs: TextIO | None = None,
    ) -> None:
        """env_overrides: on top of every function's template environment; function_env: logical id -> on top of
        those for that function only; echo_logs: also write every log line there ("<logical id> <line>")."""
        self.facts = facts
        self.region = region
        self.env_overrides = env_overrides
        self.function_env = function_env
        self.logs = LogBook(MAX_LOG_LINES, echo=echo_logs)
        self._pools: dict[str, Pool] = {}
        self._lock = threading.Lock()

    def open(self, functions: Iterable[FunctionFacts]) -> None:
        """The init phase of one environment per function, all at once (each imports its handler, ~0.5-1 s);
        if one fails, every environment is ended before the error is raised."""
        with self._lock:
            self._pools = {fn.logical_id: self._new_pool(fn) for fn in functions}
            pools = list(self._pools.values())
        try:
            with ThreadPoolExecutor(max(1, len(pools))) as executor:
                list(executor.map(lambda p: p.release(p.acquire()), pools))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """End every environment (the logs stay)."""
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()

    def pool(self, function: str) -> Pool:
        """The environments of `function` (a logical id); KeyError if it has none yet."""
        return self._pools[function]

    def invoke(self, function: str, event: dict[str, Any], request_id: str) -> dict[str, Any] | None:
        """A direct invocation of any function of the template; its environments are made on first use (a function
        without SQS events has none before). What invoke_in answers."""
        fn = self.facts.functions[function]
        missing = [k for k in fn.unresolved if k not in self.env_overrides]
        if missing:
            raise ValueError(f"{function}: environment {missing} unresolved; pass the parameters/queues")
        with self._lock:
            pool = self._pools.get(function) or self._pools.setdefault(function, self._new_pool(fn))
        return self.invoke_in(pool, event, request_id)

    def invoke_in(self, pool: Pool, event: dict[str, Any], request_id: str) -> dict[str, Any] | None:
        """{"response": ...} or {"error": ...}; None when the invocation ran past the Timeout (environment killed)."""
        fn = pool.function
        try:
            worker = pool.acquire()  # a cold start when none is idle; init time does not count against Timeout
        except InitError as err:
            return {"error": f"Runtime.ImportModuleError: {err}"}
        request = {
            "event": event,
            "request_id": request_id,
            "remaining_ms": fn.timeout * 1000,
            "context": self._context(fn),
        }
        try:
            answer = worker.invoke(request, fn.timeout)
        finally:
            pool.release(worker)  # only if still alive
        if answer is None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            text = f"{stamp}Z {request_id} Task timed out after {fn.timeout:.2f} seconds"
            self.logs.append(LogLine(fn.logical_id, worker.pid, time.time(), text))  # what Lambda writes there
        return answer

    def timed_log_records(self, function: str | None = None) -> list[tuple[float, dict[str, Any]]]:
        """The JSON lines of `function` (None: all), parsed, with the time each was read (CloudWatch Logs'
        ingestion time, Logs Insights' bins); other lines are left out."""
        records = []
        for line in self.logs.lines(function):
            if line.text.startswith("{"):
                with contextlib.suppress(ValueError):
                    records.append((line.at, json.loads(line.text)))
        return records

    def _new_pool(self, fn: FunctionFacts) -> Pool:
        overrides = {**self.env_overrides, **self.function_env.get(fn.logical_id, {})}
        env = lambda_environment(fn, self._function_name(fn), self.region, overrides, log_stream="")
        return Pool(fn, env, self.logs)

    def _function_name(self, fn: FunctionFacts) -> str:
        return f"{self.facts.stack_name}-{fn.logical_id}"

    def _context(self, fn: FunctionFacts) -> dict[str, Any]:
        """The context fields the environment does not know itself (it adds the request id, stream and deadline)."""
        name = self._function_name(fn)
        return {
            "function_name": name,
            "function_version": "$LATEST",
            "invoked_function_arn": f"arn:aws:lambda:{self.region}:{self.facts.account_id}:function:{name}",
            "memory_limit_in_mb": fn.memory_size,
            "log_group_name": f"/aws/lambda/{name}",
        }


def fresh_modules(functions: Iterable[FunctionFacts]) -> tuple[str, ...]:
    """The top-level packages of the functions' layers: what every execution environment imports afresh (it is a
    new process), so module-level state (Powertools Metrics read POWERTOOLS_* at construction, cached runtimes and
    clients) is built in the function's environment."""
    return tuple(sorted(set().union(*(_top_level_names(d) for f in functions for d in f.layer_dirs))))


def _top_level_names(layer_dir: Path) -> frozenset[str]:
    """The importable top-level packages/modules a layer directory provides (what Lambda puts on sys.path)."""
    if not layer_dir.is_dir():
        return frozenset()
    return frozenset(
        p.stem if p.suffix == ".py" else p.name
        for p in layer_dir.iterdir()
        if (p.suffix == ".py" and p.is_file()) or (p / "__init__.py").is_file()
    )
