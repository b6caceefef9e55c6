"""One Lambda execution environment: a process that imports a handler once and serves invocations one at a time.

Started by devstack.runner as `python -I lambda_env.py <result fd> <handler> <code dir> [<layer dir>...]` with the
function's own environment and nothing else. Imports only the standard library until the handler's init phase.

What it copies from the Lambda Python runtime (awslambdaric's bootstrap, which the managed runtime runs):
- logging: the root logger gets one handler writing to stdout, formatted per AWS_LAMBDA_LOG_FORMAT (Text:
  "[LEVEL]\\t<UTC time>Z\\t<request id>\\t<message>"; JSON: one object with timestamp, level, message, logger,
  requestId and every `extra=` field), and the root level is AWS_LAMBDA_LOG_LEVEL when set (Lambda sets it with
  LoggingConfig LogFormat JSON: ApplicationLogLevel, INFO by default), otherwise Python's default WARNING;
- sys.path: the function code first, then the layers (/var/task before /opt/python);
- the handler module is imported once (init phase), with the function's environment;
- stdout/stderr unbuffered, both captured as the function's log stream (CloudWatch Logs).

Protocol: one JSON request per line on stdin ({"event", "request_id", "remaining_ms", "context"}), one JSON answer
per line on the result fd: first {"ready": true} or {"init_error": "..."}, then {"response": ...} or {"error": "..."}
per request. stdin closed = shut down. For tests only, {"probe": [<file>, <function>], "args": [...]} calls a
function of a file loaded into this environment (once; its module state stays) and answers its result: how tests
read what only the environment knows (its AWS call counters) without sharing a process with it.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

_request_id = ""
_TEXT_FORMAT = "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s\n"
# Attributes of every LogRecord (plus what the runtime adds): anything else on a record came from `extra=`.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "aws_request_id",
    "tenant_id",
}


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


class _RequestId(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = _request_id
        return True


class _JsonFormatter(logging.Formatter):
    """The runtime's JSON log line: fixed fields, then every `extra=` field; None values left out."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        entry: dict[str, Any] = {
            "timestamp": stamp,
            "level": logging.getLevelName(min(50, max(0, record.levelno)) // 10 * 10),
            "message": record.getMessage(),
            "logger": record.name,
            "requestId": getattr(record, "aws_request_id", None),
        }
        if record.exc_info and record.exc_info[0] is not None:
            entry["errorType"] = record.exc_info[0].__name__
            entry["errorMessage"] = str(record.exc_info[1])
            entry["stackTrace"] = traceback.format_tb(record.exc_info[2])
        entry.update((k, v) for k, v in vars(record).items() if k not in _RECORD_FIELDS and k not in entry)
        return json.dumps({k: v for k, v in entry.items() if v is not None}, default=str) + "\n"


class _StdoutSink(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        sys.stdout.write(self.format(record))


def setup_logging(log_format: str | None, log_level: str | None) -> None:
    logging.Formatter.converter = time.gmtime
    handler = _StdoutSink()
    if (log_format or "").upper() == "JSON":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(_TEXT_FORMAT, "%Y-%m-%dT%H:%M:%S"))
    handler.addFilter(_RequestId())
    root = logging.getLogger()
    level = {"TRACE": "DEBUG"}.get((log_level or "").upper(), (log_level or "").upper())
    if level in logging.getLevelNamesMapping():
        root.setLevel(level)
    root.addHandler(handler)


# Written to stdout before each answer: once the runner has read it, it holds every log line of the request.
ANSWER_MARKER = "\x1edevstack-answer"


def _answer(out: TextIO, answer: dict[str, Any]) -> None:
    sys.stdout.write(ANSWER_MARKER + "\n")
    sys.stdout.flush()
    out.write(json.dumps(answer) + "\n")
    out.flush()


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_probes: dict[str, Any] = {}


def _probe(path: str, function: str, args: list[Any]) -> Any:
    if path not in _probes:
        spec = importlib.util.spec_from_file_location(f"devstack_probe_{len(_probes)}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _probes[path] = module
    return getattr(_probes[path], function)(*args)


def main(argv: list[str]) -> int:
    global _request_id
    result_fd, handler_name, *paths = argv
    out = os.fdopen(int(result_fd), "w", encoding="utf-8")
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=True)
    sys.path[:0] = paths
    setup_logging(os.environ.get("AWS_LAMBDA_LOG_FORMAT"), os.environ.get("AWS_LAMBDA_LOG_LEVEL"))
    module_name, _, function_name = handler_name.rpartition(".")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
    except Exception as exc:  # Lambda: Runtime.ImportModuleError / HandlerNotFound
        traceback.print_exc()
        _answer(out, {"init_error": _error_text(exc)})
        return 1
    _answer(out, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        if "probe" in request:
            try:
                path, function = request["probe"]
                result = _probe(path, function, request["args"])
                _answer(out, {"response": json.loads(json.dumps(result, default=str))})
            except Exception as exc:
                _answer(out, {"error": _error_text(exc)})
            continue
        _request_id = request["request_id"]
        context = LambdaContext(
            **request["context"],
            aws_request_id=_request_id,
            log_stream_name=os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", ""),
            deadline=time.monotonic() + request["remaining_ms"] / 1000,
        )
        try:
            answer = {"response": json.loads(json.dumps(handler(request["event"], context)))}
        except Exception as exc:  # the runtime logs the error, then reports it to the service
            print(f"[ERROR] {_error_text(exc)}\r" + "\r".join(traceback.format_exc().splitlines()), flush=True)
            answer = {"error": _error_text(exc)}
        _request_id = ""
        _answer(out, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
