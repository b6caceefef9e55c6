"""Structured log fields that are safe to pass as `extra=`.

logging.Logger.makeRecord raises KeyError("Attempt to overwrite ...") when an `extra` key names an attribute every
LogRecord already has (created, name, msg, args, module, filename, lineno, process, thread, message, ...). The
error surfaces only when the level is enabled, i.e. in Lambda (root logger at ApplicationLogLevel, INFO by
default) and not in a test session whose root logger sits at WARNING. Literal `extra={...}` dicts are checked by
tests/unit/test_log_extra.py; dicts built at run time go through log_fields().
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

# makeRecord refuses "message" and "asctime" besides the record's own attributes; taskName is one from Python 3.12
# on (Lambda runs 3.13, the tests may run 3.11).
RESERVED: frozenset[str] = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def log_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` as an `extra=` dict: a reserved key gets a trailing underscore instead of failing the log call."""
    return {(f"{key}_" if key in RESERVED else key): value for key, value in fields.items()}
