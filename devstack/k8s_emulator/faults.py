"""Fault injection and the request log."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any


@dataclass
class _Rule:
    remaining: int
    status: int
    method: str | None
    path_regex: re.Pattern[str] | None

    def matches(self, method: str, path: str) -> bool:
        if self.method and self.method.upper() != method.upper():
            return False
        return not (self.path_regex and not self.path_regex.search(path))


class Faults:
    """Rules are consumed in the order they were added; the first matching rule with budget wins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self.latency_ms = 0.0

    def fail_next(self, n: int, status: int = 500, method: str | None = None, path_regex: str | None = None) -> None:
        self.arm(n, status, method, path_regex)

    def arm(self, n: int, status: int = 500, method: str | None = None, path_regex: str | None = None) -> _Rule:
        """fail_next, returning the rule: its `remaining` is how many of the n requests it has not failed yet."""
        rule = _Rule(int(n), int(status), method, re.compile(path_regex) if path_regex else None)
        with self._lock:
            self._rules.append(rule)
        return rule

    def latency(self, ms: float) -> None:
        self.latency_ms = max(0.0, float(ms))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
        self.latency_ms = 0.0

    def take(self, method: str, path: str) -> int | None:
        """Consumes one unit of the first matching rule; returns the status to fail with."""
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.matches(method, path):
                    rule.remaining -= 1
                    status = rule.status
                    self._rules = [r for r in self._rules if r.remaining > 0]
                    return status
        return None


class RequestLog(list[dict[str, Any]]):
    """A list (so tests can index / filter it directly) with locked mutation."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.append(entry)
        return entry

    def update_entry(self, entry: dict[str, Any], **changes: Any) -> None:
        with self.lock:
            entry.update(changes)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(e) for e in self]

    def reset(self) -> None:
        with self.lock:
            self.clear()
