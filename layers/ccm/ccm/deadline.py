"""The invocation's deadline: no record starts when little time is left, and no call starts that could end after it.

Lambda kills an invocation at its Timeout; a killed batch reports nothing, so every record of it (done or not)
comes back only after the queue's visibility timeout (360 s). So, with the time Lambda says is left
(`context.get_remaining_time_in_millis()`):

- a record starts only while at least `record_reserve` seconds remain (CCM_RECORD_RESERVE_SECONDS, default 25:
  more than a typical record needs, with room for one more bounded AWS attempt);
- an AWS attempt (ccm.aws.clients) or a Kubernetes request (ccm.k8s.rest) starts only if its worst case (its
  timeouts and the retry sleep after it) ends `finish_reserve` seconds before the deadline, the time kept to hand
  the batch back (ChangeMessageVisibility of the returned records). Otherwise OutOfTime is raised.

The records not started or cut short are returned as batch item failures that come back after
ccm.retry.RETURN_DELAY_SECONDS; reconciles are idempotent, so a record cut between two calls is completed then.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

DEFAULT_RECORD_RESERVE_SECONDS: Final = 25.0
FINISH_RESERVE_SECONDS: Final = 6.0
RECORD_RESERVE_ENV: Final = "CCM_RECORD_RESERVE_SECONDS"


class OutOfTime(BaseException):
    """Too little of the invocation is left to start this call. A BaseException, like asyncio's CancelledError:
    it must pass every `except Exception` of the drivers and reconcilers (it is not their failure) up to the batch
    runtime, which returns the record for later."""


def record_reserve_seconds() -> float:
    """No record starts with less time than this left (CCM_RECORD_RESERVE_SECONDS)."""
    # Process-level on purpose, not in Settings: a test-only knob no deployment sets, read per batch so a test can
    # change it while a runtime lives (ccm.wiring.settings lists these hooks).
    raw = os.environ.get(RECORD_RESERVE_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_RECORD_RESERVE_SECONDS
    except ValueError:
        return DEFAULT_RECORD_RESERVE_SECONDS


def remaining_of(context: Any) -> Callable[[], float] | None:
    """Seconds left in the invocation, as the Lambda context counts them; None without a context (tools, tests)."""
    if context is None or not hasattr(context, "get_remaining_time_in_millis"):
        return None
    return lambda: float(context.get_remaining_time_in_millis()) / 1000


def can_start(remaining: float | None, needed: float) -> bool:
    """Pure: may something that needs `needed` seconds start with `remaining` left (None: no deadline)?"""
    return remaining is None or remaining >= needed


# A context variable, not thread-local state: the devstack runs several Lambdas as threads of one process (each
# thread has its own context), and a helper thread started with `contextvars.copy_context().run` (ccm.aws.parallel)
# keeps its caller's deadline with nothing carried by hand.
_remaining: ContextVar[Callable[[], float] | None] = ContextVar("ccm_deadline_remaining", default=None)


@contextmanager
def invocation(remaining: Callable[[], float] | None, finish_reserve: float = FINISH_RESERVE_SECONDS) -> Iterator[None]:
    """Within the block, calls check the deadline (`remaining` minus the finish reserve); after it (handing the
    batch back), they do not."""
    token = _remaining.set(None if remaining is None else (lambda: remaining() - finish_reserve))
    try:
        yield
    finally:
        _remaining.reset(token)


def calls_remaining() -> float | None:
    """Seconds calls may still use in this invocation (None: no deadline)."""
    remaining = _remaining.get()
    return None if remaining is None else remaining()


def check(needed: float, what: str) -> None:
    """Raise OutOfTime unless `needed` seconds of call time are left."""
    left = calls_remaining()
    if not can_start(left, needed):
        raise OutOfTime(f"{what}: {left:.1f} s left of the invocation, {needed:.0f} s needed")
