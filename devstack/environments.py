"""Lambda execution environments for the runner: one worker process each (devstack/lambda_env.py), pooled per function.

Like Lambda: an environment is created (init phase: the handler module imported, with the function's own
environment variables and nothing of the runner's process) when an invocation finds none idle, serves one
invocation at a time, is reused afterwards, and is thrown away when an invocation runs past the function's Timeout
(the process is killed; the next invocation gets a cold start). Its stdout and stderr are the function's log
stream, kept by the pool as lines (CloudWatch Logs).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from devstack.lambda_env import ANSWER_MARKER
from devstack.template import FunctionFacts

WORKER = Path(__file__).with_name("lambda_env.py")
# Stand-ins for the execution role's credentials: taken from the runner's process when the overrides lack them.
_ROLE_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_EOF = object()


class InitError(RuntimeError):
    """The handler could not be imported (Lambda: Runtime.ImportModuleError)."""


@dataclass(frozen=True, slots=True)
class LogLine:
    function: str  # logical id
    environment: int  # the worker's pid
    at: float  # time.time() when read
    text: str


class LogBook:
    """The functions' log lines, as CloudWatch Logs keeps them: bounded (a soak runs for hours; the oldest go
    first, as with a retention period) and, for a developer watching the devstack, echoed to a stream."""

    def __init__(self, max_lines: int, echo: TextIO | None = None) -> None:
        self._lines: deque[LogLine] = deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self.echo = echo

    def append(self, line: LogLine) -> None:
        with self._lock:
            self._lines.append(line)
            if self.echo is not None:
                self.echo.write(f"{line.function} {line.text}\n")
                self.echo.flush()

    def texts(self, function: str | None = None) -> list[str]:
        return [x.text for x in self.lines(function)]

    def lines(self, function: str | None = None) -> list[LogLine]:
        with self._lock:
            return [x for x in self._lines if function is None or x.function == function]


def lambda_environment(
    fn: FunctionFacts, name: str, region: str, overrides: Mapping[str, str], log_stream: str
) -> dict[str, str]:
    """The variables Lambda defines for a function (reserved ones, LoggingConfig's), then the template's, then the
    overrides (endpoints, kubeconfig...). Nothing else of this process leaks in except PATH and the credentials."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "_HANDLER": fn.handler,
        "LAMBDA_TASK_ROOT": str(fn.code_dir),
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{fn.runtime}",
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn.memory_size),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
    }
    if fn.log_format.upper() == "JSON":  # Lambda sets both only with LoggingConfig LogFormat JSON
        env["AWS_LAMBDA_LOG_FORMAT"] = "JSON"
        env["AWS_LAMBDA_LOG_LEVEL"] = fn.application_log_level
    env.update({k: os.environ[k] for k in _ROLE_CREDENTIALS if k in os.environ})
    env.update(fn.environment)
    env.update(overrides)
    return env


class Worker:
    """One execution environment (a process); invoke() is called by one poller thread at a time."""

    def __init__(self, fn: FunctionFacts, env: Mapping[str, str], logs: LogBook) -> None:
        self.function = fn
        read_fd, write_fd = os.pipe()
        paths = [str(fn.code_dir), *(str(d) for d in fn.layer_dirs)]
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", str(WORKER), str(write_fd), fn.handler, *paths],
                env=dict(env),
                cwd=fn.code_dir,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                text=True,
                encoding="utf-8",
            )
        finally:
            os.close(write_fd)
        self.pid = self.process.pid
        self.lock = threading.Lock()  # one request at a time: an invocation or a probe
        self._logged = threading.Condition()  # answers whose log lines were all read (markers seen)
        self._markers = self._answered = 0
        self._answers: queue.Queue[Any] = queue.Queue()
        self._results = os.fdopen(read_fd, encoding="utf-8")
        threading.Thread(target=self._read_answers, name=f"env-{self.pid}-answers", daemon=True).start()
        threading.Thread(target=self._read_logs, args=(logs,), name=f"env-{self.pid}-logs", daemon=True).start()

    def wait_ready(self, timeout: float) -> None:
        answer = self._next(timeout)
        if isinstance(answer, dict) and answer.get("ready"):
            self._logs_read()
            return
        self.kill()
        why = "init timed out" if answer is None else "exited" if answer is _EOF else answer.get("init_error")
        raise InitError(f"{self.function.logical_id}: {why}")

    def invoke(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """The answer, or None when the handler ran past `timeout` seconds (the environment is then killed)."""
        with self.lock:
            return self._request(request, timeout)

    def probe(self, path: str, function: str, args: list[Any], timeout: float = 30) -> Any:
        """What `function` of the file at `path`, run inside this environment between invocations, returns."""
        with self.lock:
            if not self.alive:
                raise InitError(f"{self.function.logical_id}: environment {self.pid} is gone")
            answer = self._request({"probe": [path, function], "args": args}, timeout)
        if answer is None or "error" in answer:
            raise RuntimeError(f"probe {function} in {self.function.logical_id}/{self.pid}: {answer}")
        return answer["response"]

    def _request(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError:
            return {"error": "Runtime.ExitError: the execution environment is gone"}
        answer = self._next(timeout)
        if answer is None:
            self.kill()
            return None
        if answer is _EOF:
            return {"error": f"Runtime.ExitError: exited with {self.process.wait()}"}
        self._logs_read()
        result: dict[str, Any] = answer
        return result

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, timeout: float = 5) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()  # the worker leaves its loop on EOF
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def _next(self, timeout: float) -> Any:
        try:
            return self._answers.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def _read_answers(self) -> None:
        with self._results:
            for line in self._results:
                self._answers.put(json.loads(line))
        self._answers.put(_EOF)

    def _read_logs(self, logs: LogBook) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            text = raw.rstrip("\n")
            answered = text.endswith(ANSWER_MARKER)  # also after output the handler left without a newline
            text = text.removesuffix(ANSWER_MARKER)
            if text or not answered:
                logs.append(LogLine(self.function.logical_id, self.pid, time.time(), text))
            if answered:
                with self._logged:
                    self._markers += 1
                    self._logged.notify_all()

    def _logs_read(self, timeout: float = 5) -> None:
        """Wait until the log lines written before the last answer are in the log book (two pipes, two threads)."""
        self._answered += 1
        with self._logged:
            self._logged.wait_for(lambda: self._markers >= self._answered, timeout)


class Pool:
    """The execution environments of one function: idle ones are reused, a new one is made when none is idle."""

    def __init__(self, fn: FunctionFacts, env: Mapping[str, str], logs: LogBook):
        self.function, self.env, self._logs = fn, dict(env), logs
        self._idle: list[Worker] = []
        self._all: list[Worker] = []
        self._lock = threading.Lock()
        self._setups: list[tuple[str, str, list[Any]]] = []  # probes run in every new environment after init
        self.cold_starts = 0

    def spawn(self) -> Worker:
        """A new environment, not yet initialised (wait_ready() on it)."""
        env = {**self.env, "AWS_LAMBDA_LOG_STREAM_NAME": time.strftime("%Y/%m/%d/[$LATEST]") + uuid.uuid4().hex}
        worker = Worker(self.function, env, self._logs)
        with self._lock:
            self._all.append(worker)
            self.cold_starts += 1
        return worker

    def acquire(self, init_timeout: float = 60) -> Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    return worker
        return self._ready(self.spawn(), init_timeout)

    def _ready(self, worker: Worker, init_timeout: float) -> Worker:
        """Wait for a spawned environment's init, then run the probes every new environment gets."""
        worker.wait_ready(init_timeout)
        with self._lock:
            setups = list(self._setups)
        for path, function, args in setups:
            worker.probe(path, function, args)
        return worker

    def prewarm(self, count: int) -> int:
        """Start environments (their init: process and handler import) until `count` are idle; returns how many
        were started. Their clients and caches stay cold: the first invocation of each still builds them."""
        with self._lock:
            missing = max(0, count - len([w for w in self._idle if w.alive]))
        started = [self.spawn() for _ in range(missing)]  # all at once: their inits overlap
        for worker in started:
            self.release(self._ready(worker, 60))
        return missing

    def release(self, worker: Worker) -> None:
        if worker.alive:
            with self._lock:
                self._idle.append(worker)

    def close(self) -> None:
        with self._lock:
            workers, self._all, self._idle = self._all, [], []
        for worker in workers:
            worker.close()

    def probe(self, path: str, function: str, args: list[Any], every_new: bool = False) -> list[Any]:
        """probe() in every live environment (waiting for in-flight invocations); with every_new, also in every
        environment created from now on, right after its init."""
        with self._lock:
            if every_new:
                self._setups.append((path, function, args))
            workers = [w for w in self._all if w.alive]
        return [w.probe(path, function, args) for w in workers]

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._all]
