"""`python -m bench [--only KEY ...]`: run the measurement scenarios, write bench/results/latest.json, print a table.

Keys (top-level JSON keys): aws_calls, k8s_calls, node_burst. Keys whose scenario cannot run yet are written as
null with a note, never a made-up value. Call counts are exact; any timing is one run on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
PENDING = {
    "latency_ms": "needs the concurrent runner scenario (benchmark issue)",
    "watcher": "needs the watcher load scenario (benchmark issue)",
    "cold_start": "needs the packaging scenario (production issue)",
    "cost": "needs the cost model (benchmark issue)",
}


def scenarios() -> dict[str, Callable[[], Any]]:
    from bench.scenarios import aws_calls, k8s_calls, node_burst

    return {
        "aws_calls": aws_calls.run,
        "k8s_calls": lambda: k8s_calls.run(nodes=int(os.environ.get("BENCH_NODES", "1000"))),
        "node_burst": node_burst.run,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--only", action="append", help="run only the scenario behind this top-level key")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args(argv)
    # The handlers log JSON and EMF to stdout as in Lambda; keep the bench's own output readable.
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    logging.basicConfig(level=logging.WARNING)
    available = scenarios()
    wanted = args.only or list(available)
    unknown = [k for k in wanted if k not in available]
    if unknown:
        parser.error(f"unknown key(s) {unknown}; known: {sorted(available)}")
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    out = sys.stdout
    for key in wanted:
        started = time.monotonic()
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            results[key] = available[key]()
        print(f"{key}: done in {time.monotonic() - started:.1f} s", file=out)
    for key, why in PENDING.items():
        results.setdefault(key, None)
        results.setdefault("_pending", {})[key] = why
    results["_meta"] = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": "call counts are exact; timings are one run on this machine",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print_table(results, out)
    return 0


def print_table(results: dict[str, Any], out: Any) -> None:
    calls = results.get("aws_calls") or {}
    for lb_type in ("nlb", "clb"):
        ours, anchor = calls.get(lb_type) or {}, (calls.get("anchor") or {}).get(lb_type, {})
        title = f"AWS calls ({lb_type.upper()}, 2 ports, 3 nodes)"
        print(f"\n{title:40} {'ours':>8} {'cloud-provider-aws':>20}", file=out)
        for op in ("create", "noop", "add_node", "delete", "mutating_noop"):
            print(f"  {op:38} {ours.get(op, '-')!s:>8} {anchor.get(op, '-')!s:>20}", file=out)
    k8s = results.get("k8s_calls") or {}
    if k8s:
        print(
            f"\nKubernetes per reconcile at {k8s['nodes']} nodes: {k8s['per_reconcile']} calls, "
            f"{k8s['bytes_per_reconcile']} bytes (without the membership table: "
            f"{k8s['without_membership_table']['per_reconcile']} calls, "
            f"{k8s['without_membership_table']['bytes_per_reconcile']} bytes)",
            file=out,
        )
    burst = results.get("node_burst") or {}
    if burst:
        up = burst["anchor_upstream"]
        print(
            f"\nNode burst: {burst['nodes']} joins x {burst['services']} services: "
            f"{burst['target_calls']} target calls "
            f"({burst['target_calls_per_target_group']} per target group), {burst['reconciles']} reconciles; "
            f"upstream {up['target_calls']} target calls, {up['reconciles']} reconciles",
            file=out,
        )


if __name__ == "__main__":
    sys.exit(main())
