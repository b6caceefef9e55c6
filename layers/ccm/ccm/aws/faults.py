"""Fault points for chaos and crash tests: crash right after a chosen AWS call succeeded.

Inactive (and not even registered) unless the environment names a faults file, `CCM_FAULTS_FILE`. The file is
JSON `{"crash_after": {"elasticloadbalancing:CreateTargetGroup": 1, ...}}`: the next N successful calls of that
operation raise InjectedCrash after AWS applied them, exactly the "Lambda died between two calls" case. Counts
are decremented under a file lock, so several processes (execution environments) share one budget.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

ENV_VAR = "CCM_FAULTS_FILE"


class InjectedCrash(RuntimeError):
    """Raised by a fault point; stands for the process dying at this line."""


def attach(client: Any) -> None:
    # Process-level on purpose, not in Settings: only the devstack and the chaos tests set it, and the drivers' clients
    # must not depend on the composition root to be testable on their own (ccm.wiring.settings lists these hooks).
    path = os.environ.get(ENV_VAR)
    if path:
        client.meta.events.register("after-call.*.*", _FaultPoint(Path(path)))


class _FaultPoint:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, model: Any, http_response: Any = None, **_: Any) -> None:
        if http_response is not None and http_response.status_code >= 300:
            return
        op = f"{model.service_model.endpoint_prefix}:{model.name}"
        if self._take(op):
            raise InjectedCrash(f"injected crash after {op}")

    def _take(self, op: str) -> bool:
        if not self.path.exists():
            return False
        with self.path.open("r+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            plan = json.loads(handle.read() or "{}")
            remaining = plan.get("crash_after", {}).get(op, 0)
            if remaining <= 0:
                return False
            plan["crash_after"][op] = remaining - 1
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(plan))
            return True


def arm(path: str | Path, crash_after: dict[str, int]) -> None:
    """Write a fault plan (used by tests)."""
    Path(path).write_text(json.dumps({"crash_after": crash_after}))
