"""What a check reports, and how a list of findings is rendered (table or JSON) and turned into an exit code."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Final, Literal

Status = Literal["ok", "warn", "fail", "unknown"]
# "unknown": the fact could not be read (an API the environment does not offer, no kubeconfig); never fails the run.
STATUSES: Final[tuple[Status, ...]] = ("fail", "warn", "unknown", "ok")


@dataclass(frozen=True)
class Finding:
    check: str  # dotted name, e.g. "subnets.public"
    status: Status
    message: str
    fix: str = ""  # what to do (a command where one exists); empty when nothing is to be done


def ok(check: str, message: str) -> Finding:
    return Finding(check, "ok", message)


def warn(check: str, message: str, fix: str) -> Finding:
    return Finding(check, "warn", message, fix)


def fail(check: str, message: str, fix: str) -> Finding:
    return Finding(check, "fail", message, fix)


def unknown(check: str, message: str, fix: str = "") -> Finding:
    return Finding(check, "unknown", message, fix)


def exit_code(findings: Iterable[Finding]) -> int:
    return 1 if any(f.status == "fail" for f in findings) else 0


def summary(findings: list[Finding]) -> dict[str, int]:
    return {status: sum(1 for f in findings if f.status == status) for status in STATUSES}


def to_json(findings: list[Finding]) -> str:
    return json.dumps(
        {"findings": [asdict(f) for f in findings], "summary": summary(findings), "exitCode": exit_code(findings)},
        indent=2,
    )


def to_table(findings: list[Finding], width: int = 110) -> str:
    """Worst first, in check order within a status; each fix under its line."""
    order = {status: i for i, status in enumerate(STATUSES)}
    rows = sorted(findings, key=lambda f: order[f.status])
    name_width = max([len(f.check) for f in rows] + [5])
    lines = [f"{'STATUS':<8}{'CHECK':<{name_width + 2}}MESSAGE"]
    indent = " " * (8 + name_width + 2)
    for f in rows:
        wrapped = textwrap.wrap(f.message, max(width - len(indent), 40), break_on_hyphens=False) or [""]
        lines.append(f"{f.status.upper():<8}{f.check:<{name_width + 2}}{wrapped[0]}")
        lines += [indent + more for more in wrapped[1:]]
        if f.fix:
            lines += [indent + ("fix: " if i == 0 else "     ") + part for i, part in enumerate(f.fix.splitlines())]
    counts = summary(findings)
    lines.append("")
    lines.append(", ".join(f"{n} {status}" for status, n in counts.items()) + ("  -> FAILED" if counts["fail"] else ""))
    return "\n".join(lines)
