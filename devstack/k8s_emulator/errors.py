"""Kubernetes-style API errors rendered as ``Status`` objects."""

from __future__ import annotations

from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Raised anywhere in the emulator; the server turns it into a Status response."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.message, self.reason, self.details)


def _details(plural: str, group: str, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": plural}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, f'{_qualified(plural, group)} "{name}" not found', "NotFound", _details(plural, group, name))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, f'{_qualified(plural, group)} "{name}" already exists', "AlreadyExists", _details(plural, group, name)
    )


def conflict(plural: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
        "Conflict",
        _details(plural, group, name),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def too_large_rv(wanted: int, current: int) -> ApiError:
    """apiserver storage.NewTooLargeResourceVersionError: a 504 Timeout with a ResourceVersionTooLarge cause."""
    return ApiError(
        504,
        f"Timeout: Too large resource version: {wanted}, current: {current}",
        "Timeout",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        {"Retry-After": "1"},
    )


def gone(message: str, reason: str = "Expired") -> ApiError:
    # The real server uses reason "Expired" for too-old resourceVersions / continue tokens.
    return ApiError(410, message, reason)


class FieldError:
    """One entry of ``details.causes`` in a 422 Invalid response."""

    def __init__(self, kind: str, field: str, message: str) -> None:
        self.kind = kind  # FieldValueRequired, FieldValueInvalid, ...
        self.field = field
        self.message = message

    def render(self) -> str:
        return f"{self.field}: {self.message}"


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, f"Invalid value: {_fmt(value)}: {detail}")


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, f"Duplicate value: {_fmt(value)}")


def not_supported(field: str, value: Any, valid: list[str]) -> FieldError:
    opts = ", ".join(f'"{v}"' for v in valid)
    return FieldError("FieldValueNotSupported", field, f"Unsupported value: {_fmt(value)}: supported values: {opts}")


def too_many(field: str, actual: int, maximum: int) -> FieldError:
    """field.TooMany: ``Too many: 1001: must have at most 1000 items``."""
    items = "item" if maximum == 1 else "items"
    return FieldError("FieldValueTooMany", field, f"Too many: {actual}: must have at most {maximum} {items}")


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, f"Forbidden: {detail}")


def invalid_error(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    rendered = [e.render() for e in errors]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": e.kind, "message": e.message, "field": e.field} for e in errors],
    }
    if group:
        details["group"] = group
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, f'{qualified} "{name}" is invalid: {summary}', "Invalid", details)


def field_manager_required() -> ApiError:
    """ValidatePatchOptions: server-side apply without ?fieldManager= is a 422 on the PatchOptions."""
    return ApiError(
        422,
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
        "Invalid",
        {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: is required for apply patch",
                    "field": "fieldManager",
                }
            ],
        },
    )
