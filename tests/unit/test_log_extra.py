"""Every `extra=` of a logging call is safe: logging raises KeyError for a key a LogRecord already has.

Such a call passes unnoticed while the logger's level is disabled (a test session's root logger is at WARNING) and
fails in Lambda, whose runtime sets the root logger to ApplicationLogLevel (INFO by default): the routes function
once failed every reconcile that way (extra key "created"), after the routes were written.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from ccm.logs import RESERVED, log_fields

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("layers/ccm/ccm", "functions", "watcher", "devstack", "bench")


def _extra_problems(path: Path) -> list[str]:
    problems = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg != "extra":
                continue
            where = f"{path.relative_to(ROOT)}:{kw.value.lineno}"
            value = kw.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "log_fields":
                continue  # built at run time, made safe by the helper
            if not isinstance(value, ast.Dict):
                problems.append(f"{where}: extra is not a dict literal; wrap it in ccm.logs.log_fields()")
                continue
            for key in value.keys:
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    problems.append(f"{where}: extra has a non-literal key; wrap the dict in log_fields()")
                elif key.value in RESERVED:
                    problems.append(f"{where}: extra key {key.value!r} is a LogRecord attribute")
    return problems


def test_no_logging_call_passes_a_reserved_extra_key() -> None:
    files = [p for d in SOURCES for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 50  # the scan really covers the code
    problems = [problem for path in files for problem in _extra_problems(path)]
    assert problems == []


def test_the_reserved_set_is_what_logging_refuses() -> None:
    logger = logging.getLogger("test_log_extra")
    for key in sorted(RESERVED - {"taskName"}):  # taskName is a record attribute from Python 3.12 on
        with pytest.raises(KeyError):
            logger.makeRecord("n", logging.INFO, "f", 1, "m", None, None, extra={key: 1})


def test_log_fields_renames_reserved_keys_and_keeps_the_rest() -> None:
    fields = log_fields({"created": 2, "name": "web", "kind": "Service"})
    assert fields == {"created_": 2, "name_": "web", "kind": "Service"}
    record = logging.getLogger("test_log_extra").makeRecord("n", logging.INFO, "f", 1, "m", None, None, extra=fields)
    assert (record.created_, record.name_, record.kind) == (2, "web", "Service")  # type: ignore[attr-defined]
