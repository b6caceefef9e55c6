"""`python -m bench [--only KEY ...] [--scale small|full]`: run the measurement scenarios, write
bench/results/latest.json and the PNG plots beside it, print a table of our figures beside the anchors.

Keys (top-level JSON keys): aws_calls, k8s_calls, node_burst, latency_ms, watcher, cold_start, cost, ip_targets.
Call counts are exact; every timing is one run on this machine. `--scale small` (or BENCH_SCALE=small) shrinks the timed
scenarios for CI; the JSON records the scale used.
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
PENDING: dict[str, str] = {}  # key -> why its scenario cannot run yet (written as null, never a made-up value)
SCALES: dict[str, dict[str, dict[str, int]]] = {
    "full": {
        "latency_ms": {"services": 200, "latency_ms": 50, "concurrency": 10},
        "scale": {"services": 300},
        "watcher": {"services": 10_000, "nodes": 5_000, "updates": 20_000},
        "cold_start": {"runs": 5},
        "ip_targets": {"replicas": 100, "latency_ms": 50, "cost_replicas": 20},
    },
    # The full watcher size does not finish on the devstack here: at 10,000 Services the emulator's watch delivery
    # and moto's SQS become the bottleneck (docs/performance.md). Everything else as full.
    "medium": {
        "latency_ms": {"services": 200, "latency_ms": 50, "concurrency": 10},
        "scale": {"services": 300},
        "watcher": {"services": 1_000, "nodes": 500, "updates": 2_000},
        "cold_start": {"runs": 5},
        "ip_targets": {"replicas": 100, "latency_ms": 50, "cost_replicas": 20},
    },
    "small": {
        "latency_ms": {"services": 10, "latency_ms": 50, "concurrency": 10},
        "scale": {"services": 60},  # past the previous ceiling of about 55
        "watcher": {"services": 200, "nodes": 100, "updates": 400},
        "cold_start": {"runs": 1},
        "ip_targets": {"replicas": 10, "latency_ms": 50, "cost_replicas": 10},
    },
}


def scenarios(scale: str = "full") -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Scenario per top-level key, in run order (cost reads the figures of the scenarios before it)."""
    from bench import packaging
    from bench.scenarios import aws_calls, cost, ip_targets, k8s_calls, latency, node_burst, watcher_load
    from bench.scenarios import scale as scale_scenario

    size = SCALES[scale]
    return {
        "aws_calls": lambda _: aws_calls.run(),
        "k8s_calls": lambda _: k8s_calls.run(nodes=int(os.environ.get("BENCH_NODES", "1000"))),
        "node_burst": lambda _: node_burst.run(),
        "scale": lambda _: {"services": scale_scenario.run(**size["scale"])},
        "latency_ms": lambda results: latency.run(**size["latency_ms"], results=results),
        "watcher": lambda _: watcher_load.run(**size["watcher"]),
        "cold_start": lambda _: packaging.measure(**size["cold_start"]),
        "cost": cost.run,
        # After cost: its bill is the base of ip_targets' cost_usd_month.
        "ip_targets": lambda results: ip_targets.run(**size["ip_targets"], results=results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--only", action="append", help="run only the scenario behind this top-level key")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--scale", choices=sorted(SCALES), default=os.environ.get("BENCH_SCALE", "full"))
    parser.add_argument("--no-plots", action="store_true", help="skip the PNGs (written beside --out)")
    args = parser.parse_args(argv)
    # The handlers log JSON and EMF to stdout as in Lambda; keep the bench's own output readable.
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    logging.basicConfig(level=logging.WARNING)
    available = scenarios(args.scale)
    wanted = args.only or list(available)
    unknown = [k for k in wanted if k not in available]
    if unknown:
        parser.error(f"unknown key(s) {unknown}; known: {sorted(available)}")
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    out = sys.stdout
    failed: list[str] = []
    for key in wanted:
        started = time.monotonic()
        try:
            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                results[key] = available[key](results)
        except Exception:  # one broken scenario must not lose the others' figures; its old value is kept
            logging.exception("scenario %s failed", key)
            failed.append(key)
            continue
        results.setdefault("_scale", {})[key] = args.scale
        print(f"{key}: done in {time.monotonic() - started:.1f} s", file=out)
    for key, why in PENDING.items():
        results.setdefault(key, None)
        results.setdefault("_pending", {})[key] = why
    pending = {k: v for k, v in (results.get("_pending") or {}).items() if results.get(k) is None}
    results.pop("_pending", None)
    if pending:
        results["_pending"] = pending
    results["_meta"] = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": "call counts are exact; timings are one run on this machine",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print_table(results, out)
    if not args.no_plots:
        from bench.plots import write_all

        for path in write_all(results, args.out.parent):
            print(f"wrote {path}", file=out)
    print("\nTimings are from one run on this machine (2 shared cores); counts are exact.", file=out)
    if failed:
        print(f"FAILED scenarios (figures kept from the previous run, if any): {failed}", file=out)
    return 1 if failed else 0


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

    print_timed(results, out)


def print_timed(results: dict[str, Any], out: Any) -> None:
    lat = results.get("latency_ms") or {}
    if lat:
        print(
            f"\nLatency, {lat['services']} NLB Services at once, +{lat['injected_latency_ms']} ms per AWS call, "
            f"concurrency {lat['concurrency']} (watcher observed -> status written):\n"
            f"  p50 {lat['p50']} ms, p90 {lat['p90']} ms, p99 {lat['p99']} ms, max {lat['max']} ms; all converged in "
            f"{lat['converge_s']} s (ours modelled {lat['our_model_s']} s) vs cloud-provider-aws modelled "
            f"{lat['anchor_model_s']} s (1 worker x 19 calls x {lat['injected_latency_ms']} ms x {lat['services']})\n"
            "  each Lambda environment and the watcher are processes; moto and the emulator share ONE (one GIL)",
            file=out,
        )
        hostname = lat.get("hostname_s") or {}
        if hostname and "floor_complete_s" in lat:
            print(
                f"  hostname (created -> status) p50 {hostname['p50']} s, p99 {hostname['p99']} s, all "
                f"{lat['hostname_all_s']} s; hostname floor {lat['floor_s']} s ({lat['floor_api']}), p99 - floor "
                f"{lat['p99_over_floor_s']} s; complete {lat.get('complete_s')} s (floor {lat['floor_complete_s']} s)",
                file=out,
            )
    watcher = results.get("watcher") or {}
    if watcher:
        print(
            f"\nWatcher, {watcher['services']} Services + {watcher['nodes']} Nodes listed, "
            f"{watcher['updates']} updates: "
            f"RSS {watcher['rss_mb']} MB (peak {watcher['rss_peak_mb']}), {watcher['events_per_s']} events/s, "
            f"{watcher['cpu_ms_per_event']} CPU ms/event",
            file=out,
        )
    cold = results.get("cold_start") or {}
    if cold:
        print(f"\nCold start (budget {cold.get('budget_import_ms')} ms import):", file=out)
        for name, figures in cold.items():
            if isinstance(figures, dict) and "import_ms" in figures:
                print(
                    f"  {name:12} import {figures['import_ms']:>8} ms   cold path {figures.get('cold_path_ms')} ms   "
                    f"package {figures['package_mb']} MB",
                    file=out,
                )
        print(f"  dependencies alone (ms): {cold.get('dependencies')}", file=out)
    cost = results.get("cost") or {}
    if cost:
        a = cost["assumptions"]
        print(
            f"\nCost: {cost['usd_per_month']} USD/month for {a['lb_services']} LB Services, {a['nodes']} Nodes "
            f"(prices {cost['prices_usd']['date']}, us-east-1, free tiers ignored):",
            file=out,
        )
        for item, usd in cost["breakdown_usd_per_month"].items():
            print(f"  {item:24} {usd:>8}", file=out)


if __name__ == "__main__":
    sys.exit(main())
