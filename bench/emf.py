"""Collects what the handlers print (Powertools JSON logs and EMF metric blobs), fed from a function's log lines as
the devstack runner keeps them (EventSourceRunner.logs): the EMF metrics (the failure counters) by name, and the
per-record figures from each record's log line, what the dashboard's Logs Insights widgets read: `end_to_end_ms`
(watcher observed -> status written), `duration_ms` and the AWS call total (kept as "AwsCalls")."""

from __future__ import annotations

import io
import json
import threading
from collections import defaultdict
from typing import Any

# A record's log line field -> the name its values are kept under.
LOG_FIELDS = {"aws_calls": "AwsCalls", "end_to_end_ms": "end_to_end_ms", "duration_ms": "duration_ms"}


class EmfCapture(io.TextIOBase):
    """A thread-safe stdout stand-in: keeps the EMF values by metric name and counts the bytes written."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._partial = ""
        self.values: dict[str, list[float]] = defaultdict(list)
        self.metric_keys: set[tuple[str, str, tuple[str, ...]]] = set()  # (namespace, name, dimension names)
        self.bytes = 0
        self.lines = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self.bytes += len(text.encode())
            buffered = self._partial + text
            *lines, self._partial = buffered.split("\n")
            for line in lines:
                self._line(line)
        return len(text)

    def reset(self) -> None:
        with self._lock:
            self.values.clear()
            self.metric_keys.clear()
            self.bytes = self.lines = 0

    def _line(self, line: str) -> None:
        if not line.strip():
            return
        self.lines += 1
        if '"_aws"' not in line:
            if any(f'"{field}"' in line for field in LOG_FIELDS):
                self._log_fields(line)
            return
        try:
            blob: dict[str, Any] = json.loads(line)
        except ValueError:
            return
        for directive in blob.get("_aws", {}).get("CloudWatchMetrics", []):
            dims = tuple(sorted(d for group in directive.get("Dimensions", []) for d in group))
            for metric in directive.get("Metrics", []):
                name = metric["Name"]
                self.metric_keys.add((directive.get("Namespace", ""), name, dims))
                value = blob.get(name)
                if value is not None:
                    self.values[name].extend(value if isinstance(value, list) else [value])

    def _log_fields(self, line: str) -> None:
        """A record's log line (ccm.call_metrics): its figures are log fields, not metrics (cost)."""
        try:
            blob = json.loads(line)
        except ValueError:
            return
        if not isinstance(blob, dict):
            return
        for field, name in LOG_FIELDS.items():
            value = blob.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.values[name].append(float(value))


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending list."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil without floats drifting
    return sorted_values[int(rank) - 1]
