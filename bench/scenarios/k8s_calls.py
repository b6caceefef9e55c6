"""Kubernetes API calls and bytes per service reconcile at 1,000 nodes (the emulator's request log)."""

from __future__ import annotations

from typing import Any

from bench.world import BenchWorld


def _measure(bench: BenchWorld, name: str) -> tuple[int, int, list[str]]:
    bench.emulator.clear_log()
    bench.reconcile(bench.delta("Service", "SYNC", bench.service(name)))
    log = bench.emulator.request_log.snapshot()
    return len(log), sum(int(r.get("bytes") or 0) for r in log), [f"{r['method']} {r['path']}" for r in log]


def run(nodes: int = 1000) -> dict[str, Any]:
    bench = BenchWorld(nodes=3)
    try:
        for i in range(nodes - 3):  # Nodes only (no instances needed to measure API traffic)
            bench.emulator.create(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": f"node-{i:04d}", "labels": {"kubernetes.io/hostname": f"node-{i:04d}"}},
                    "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}"},
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "images": [{"names": [f"registry.example/app-{j}:v1"], "sizeBytes": 1} for j in range(20)],
                    },
                }
            )
        svc = bench.create_service("k8s", [80, 443])
        bench.reconcile(bench.delta("Service", "ADDED", svc))  # creates the LB and seeds the membership table
        calls, size, requests = _measure(bench, "k8s")
        # For comparison: the same reconcile without the membership table (what upstream's LIST costs).
        bench.runtime.reconciler.members.store = None  # type: ignore[attr-defined]
        list_calls, list_bytes, _ = _measure(bench, "k8s")
    finally:
        bench.close()
    return {
        "nodes": nodes,
        "per_reconcile": calls,
        "bytes_per_reconcile": size,
        "requests": requests,
        "without_membership_table": {"per_reconcile": list_calls, "bytes_per_reconcile": list_bytes},
    }
