"""Which armed faults fired: every fault a schedule arms is reported as fired or not fired, with counts.

A fault that never met the traffic it was meant for tested nothing; the ledger makes that visible per run
(`chaos: faults ...` in the test output) and per example (CHAOS_VERBOSE=1). Immediate actions (a watch drop,
a watcher restart, a stale delta) fire when taken; armed faults are judged just before the quiesce clears them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Entry:
    kind: str  # the report's key, e.g. "aws: throttle", "crash", "cluster: api errors"
    armed: int  # requests / calls / invocations it was armed for
    fired: Callable[[], int]  # how many of them it failed (judged before the faults are cleared)


@dataclass
class Ledger:
    entries: list[Entry] = field(default_factory=list)

    def fired_now(self, kind: str, count: int = 1) -> None:
        self.entries.append(Entry(kind, count, lambda: count))

    def armed(self, kind: str, count: int, fired: Callable[[], int]) -> None:
        self.entries.append(Entry(kind, count, fired))

    def judge(self) -> Counter[str]:
        """{"<kind> armed": n, "<kind> fired": m, "<kind> not fired": k} summed over the entries."""
        out: Counter[str] = Counter()
        for entry in self.entries:
            fired = max(0, min(entry.armed, entry.fired()))
            out[f"{entry.kind}: armed"] += entry.armed
            out[f"{entry.kind}: fired"] += fired
            out[f"{entry.kind}: not fired"] += entry.armed - fired
        return out


def crash_remaining(path: Path, operation: str) -> int:
    """Crashes still armed for an operation in the CCM_FAULTS_FILE plan."""
    plan = json.loads(path.read_text() or "{}").get("crash_after", {})
    return int(plan.get(operation, 0))


def report(totals: Counter[str]) -> str:
    kinds = sorted({k.rsplit(": ", 1)[0] for k in totals})
    parts = [
        f"{kind} {totals[f'{kind}: fired']}/{totals[f'{kind}: armed']}"
        + (f" ({totals[f'{kind}: not fired']} not fired)" if totals[f"{kind}: not fired"] else "")
        for kind in kinds
    ]
    return "fired/armed: " + ", ".join(parts)
