"""Logging that cannot break a reconcile nor leak a secret.

Structured log fields that are safe to pass as `extra=`:

logging.Logger.makeRecord raises KeyError("Attempt to overwrite ...") when an `extra` key names an attribute every
LogRecord already has (created, name, msg, args, module, filename, lineno, process, thread, message, ...). The
error surfaces only when the level is enabled, i.e. in Lambda (root logger at ApplicationLogLevel, INFO by
default) and not in a test session whose root logger sits at WARNING. Literal `extra={...}` dicts are checked by
tests/unit/test_log_extra.py; dicts built at run time go through log_fields().

No secret in logs at any level: protect_secrets() keeps botocore's wire loggers at INFO or above whatever the root
level (tests/integration/test_secret_logs.py runs the authentication paths at DEBUG).
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


# At DEBUG, botocore logs what goes over the wire: response bodies (botocore.parsers: a GetSecretValue answer is the
# whole kubeconfig, its token included), request headers and parameters (botocore.endpoint: Authorization
# signatures, replayable for 5 minutes) and the canonical request, string to sign and signature of every signed
# request (botocore.auth: an EKS token is a presigned URL, so its signature is the credential).
SECRET_LOGGERS = ("botocore.parsers", "botocore.endpoint", "botocore.auth")


def protect_secrets() -> None:
    """Keep the loggers that would print credentials at INFO or above, even with the root logger at DEBUG (the
    Lambda runtime sets the root logger to ApplicationLogLevel; their own level is unset, so they would follow).
    Other botocore DEBUG lines (retries, credential source, hooks) stay available for debugging."""
    for name in SECRET_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logging.INFO, logger.level))
