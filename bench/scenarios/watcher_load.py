"""Watcher under load: S Services (a tenth of them LoadBalancer) and N Nodes in the emulator, the real
`python -m watcher` process lists them, then U updates are applied and the watcher works through them.

The updates are applied while the watcher process is stopped (SIGSTOP), then it is resumed (SIGCONT) and timed
until its own counter `watcher_deltas_seen_total` has grown by U: events/s is the watcher's throughput, not the
rate at which this process can write to the emulator. CPU is the watcher process's utime+stime (/proc), RSS its
VmRSS/VmHWM. The emulator (serving the watch streams) and moto (receiving SendMessageBatch) run in this process.

Nothing consumes the queues. moto's SQS (FIFO deduplication scans the queue on every send) absorbs the initial
list slowly at full size: the wait for it is bounded and what was still unsent is reported (`backlog_at_pause`).

Updates: half Node status heartbeats (dropped by the watcher as unchanged), half Service updates: every
LoadBalancer Service gets a new annotation (forwarded to SQS), the others a new label (dropped as irrelevant).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from devstack.stack import Stack, StackConfig

TICKS = os.sysconf("SC_CLK_TCK")
RELEVANT_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-name"


def _cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS  # utime, stime (fields 14, 15 of stat)


def _memory_mb(pid: int) -> dict[str, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = round(int(rest.split()[0]) / 1024, 1)
    return values


def _counter(port: int, name: str) -> dict[str, float]:
    """Sum of a Prometheus counter by its kind label, from the watcher's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1 :].rsplit("} ", 1)
            kind = labels.split('kind="', 1)[1].split('"', 1)[0]
            totals[kind] = totals.get(kind, 0.0) + float(value)
    return totals


def _gauge(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return next(float(line.split()[-1]) for line in lines if line.startswith(name + " "))


def _service(i: int, lb: bool) -> dict[str, Any]:
    # The others are headless (a common shape): the emulator then allocates no cluster IP, which at 10,000
    # Services would make seeding quadratic; the watcher sees the same events either way.
    spec: dict[str, Any] = {"type": "LoadBalancer"} if lb else {"type": "ClusterIP", "clusterIP": "None"}
    spec["ports"] = [{"port": 80}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{i:05d}"}, "spec": spec}


def _node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i:05d}", "labels": {"topology.kubernetes.io/zone": "us-east-1a"}},
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]},
    }


def _wait(predicate: Any, timeout: float, what: str, log: Path | None = None, required: bool = True) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            if not required:
                return False
            tail = log.read_text()[-4000:] if log is not None and log.is_file() else ""
            raise TimeoutError(f"watcher scenario: timed out waiting for {what}; watcher log tail:\n{tail}")
        time.sleep(0.1)
    return True


def run(
    services: int = 10_000, nodes: int = 5_000, updates: int = 20_000, backlog_wait_s: float = 240.0
) -> dict[str, Any]:
    lb_every = 10
    with tempfile.TemporaryDirectory(prefix="bench-watcher-") as state:
        config = StackConfig(nodes=0, state_dir=Path(state), runner=False, watcher=False, resync_seconds=3600)
        with Stack(config) as stack:
            emu = stack.emulator
            assert emu is not None
            seed_started = time.monotonic()
            for i in range(nodes):
                emu.create(_node(i))
            for i in range(services):
                emu.create(_service(i, lb=i % lb_every == 0))
            seed_s = time.monotonic() - seed_started

            list_started = time.monotonic()
            stack.start_watcher()  # returns once /readyz: both kinds listed, SQS reached
            assert stack.watcher_process is not None
            pid, port = stack.watcher_process.pid, stack.watcher_health_port
            log = config.state_dir / "watcher.log"
            list_s = time.monotonic() - list_started
            lb_services = len(range(0, services, lb_every))
            # The initial list forwards every Node and LoadBalancer Service: wait until SQS took them all.
            # At full scale moto's SQS is slower than the watcher: bounded wait, the rest is reported.
            _wait(lambda: sum(_counter(port, "watcher_deltas_sent_total").values()) >= nodes + lb_services,
                  backlog_wait_s, "the initial deltas", log, required=False)  # fmt: skip
            backlog = _gauge(port, "watcher_buffer_deltas")
            after_list = _memory_mb(pid)
            seen_before = sum(_counter(port, "watcher_deltas_seen_total").values())
            sent_before = sum(_counter(port, "watcher_deltas_sent_total").values())
            dropped_before = _counter(port, "watcher_dropped_irrelevant_total")

            os.kill(pid, signal.SIGSTOP)
            try:
                node_updates, service_updates = updates // 2, updates - updates // 2
                for i in range(node_updates):
                    node = emu.get("nodes", None, f"node-{i % nodes:05d}")
                    assert node is not None
                    beat = f"2026-01-01T01:{i // 60 % 60:02d}:{i % 60:02d}Z"
                    node["status"]["conditions"][0]["lastHeartbeatTime"] = beat
                    emu.update(node, "status")
                for i in range(service_updates):
                    svc = emu.get("services", "default", f"svc-{i % services:05d}")
                    assert svc is not None
                    meta = svc["metadata"]
                    if i % services % lb_every == 0:
                        meta.setdefault("annotations", {})[RELEVANT_ANNOTATION] = f"b{i}"
                    else:
                        meta.setdefault("labels", {})["rev"] = str(i)
                    emu.update(svc)
            finally:
                cpu_before, resumed = _cpu_ms(pid), time.monotonic()
                os.kill(pid, signal.SIGCONT)
            _wait(lambda: sum(_counter(port, "watcher_deltas_seen_total").values()) >= seen_before + updates, 600,
                  "the updates", log)  # fmt: skip
            elapsed = time.monotonic() - resumed
            cpu_ms = _cpu_ms(pid) - cpu_before
            memory = _memory_mb(pid)
            drained = _wait(lambda: _gauge(port, "watcher_buffer_deltas") == 0, backlog_wait_s, "the buffer",
                            log, required=False)  # fmt: skip
            forwarded = sum(_counter(port, "watcher_deltas_sent_total").values()) - sent_before
            dropped = _counter(port, "watcher_dropped_irrelevant_total")
    return {
        "rss_mb": memory.get("VmRSS"),
        "rss_peak_mb": memory.get("VmHWM"),
        "rss_after_list_mb": after_list.get("VmRSS"),
        "events_per_s": round(updates / elapsed),
        "cpu_ms_per_event": round(cpu_ms / updates, 3),
        "services": services,
        "lb_services": lb_services,
        "nodes": nodes,
        "updates": updates,
        "forwarded_after_updates": int(forwarded),
        "backlog_at_pause": int(backlog),  # deltas of the initial list not yet in SQS when the updates began
        "buffer_drained": drained,
        "dropped_irrelevant_after_updates": {k: int(v - dropped_before.get(k, 0)) for k, v in dropped.items()},
        "list_s": round(list_s, 1),
        "seed_s": round(seed_s, 1),
        "notes": "one run on this machine; the watcher is a real `python -m watcher` process; updates applied while "
        "it was SIGSTOPped, then timed from SIGCONT until watcher_deltas_seen_total grew by the update count; "
        "the emulator and moto run in the bench process and share the CPU; when backlog_at_pause > 0 the CPU "
        "figure also includes sending that part of the initial list (an upper bound)",
    }
