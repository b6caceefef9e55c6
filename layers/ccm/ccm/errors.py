"""The one reader of an AWS error's code and message (botocore's `ClientError.response["Error"]`): a shared leaf,
so the drivers (through ccm.aws.errors) and the controllers that keep their own table or describe a driver's error
(ccm.aws.table, ccm.route.reconciler) read it alike.

A response may lack the `Error` member or its fields (a stubbed or truncated answer): both read as "".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError


def response_error_code(response: Mapping[str, Any]) -> str:
    """The error code of a parsed AWS response (what botocore's `after-call` and `needs-retry` hooks see)."""
    return str((response.get("Error") or {}).get("Code") or "")


def error_code(err: ClientError) -> str:
    return response_error_code(err.response)


def error_message(err: ClientError) -> str:
    return str((err.response.get("Error") or {}).get("Message") or "")


def error_text(err: BaseException) -> str:
    """One line for logs and events: `Code: message` of an AWS error, else the exception's type and text."""
    if isinstance(err, ClientError):
        return f"{error_code(err) or 'Error'}: {error_message(err)}".strip()
    return f"{type(err).__name__}: {err}"
