"""What the parser refuses: one annotation (or spec field) and its value, or several problems reported together."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from ccm.contracts.cloud import InvalidServiceConfig

_MAX_SHOWN: Final = 100  # characters of a value quoted in a message; events must stay readable


def show(value: object) -> str:
    """A value quoted for a message, truncated to stay readable in an event."""
    text = value if isinstance(value, str) else repr(value)
    shown = json.dumps(text[:_MAX_SHOWN], ensure_ascii=False)
    return shown if len(text) <= _MAX_SHOWN else f"{shown}... ({len(text)} characters)"


class InvalidAnnotation(InvalidServiceConfig):
    """One annotation (or spec field) with a value we refuse; the message names it and its (truncated) value."""

    def __init__(self, annotation: str, value: object, reason: str) -> None:
        super().__init__(f"invalid {annotation}={show(value)}: {reason}")
        self.annotation = annotation
        self.value = value
        self.reason = reason


class ServiceConfigErrors(InvalidServiceConfig):
    """Several problems at once (InvalidAnnotation and hard-rule InvalidServiceConfig), in one message."""

    def __init__(self, errors: Sequence[InvalidServiceConfig]) -> None:
        super().__init__(f"{len(errors)} problems: " + "; ".join(str(e) for e in errors))
        self.errors = tuple(errors)


def errors_of(err: InvalidServiceConfig) -> tuple[InvalidServiceConfig, ...]:
    return err.errors if isinstance(err, ServiceConfigErrors) else (err,)


def raise_all(errors: Sequence[InvalidServiceConfig]) -> None:
    """Nothing, one error as itself, or several as one ServiceConfigErrors (a user fixes them in one go)."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ServiceConfigErrors(errors)
