"""The one runtime of an execution environment (kept apart from ccm.batch: the sweeper, which consumes no queue,
must not import Powertools' batch utilities, ~90 ms of its cold start)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerEnvironment(Generic[T]):
    """The one runtime of an execution environment, built on first use and reused by warm invocations."""

    def __init__(self, default: Callable[[], T]) -> None:
        self.default = default
        self.instance: T | None = None
        self._lock = threading.Lock()

    def __call__(self, factory: Callable[[], T] | None = None) -> T:
        with self._lock:
            if self.instance is None:
                self.instance = (factory or self.default)()
            return self.instance
