"""`python -m watcher` as a real process: env configuration, JSON logs, SIGTERM flush and exit code."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

from ccm.contracts.messages import parse_delta
from devstack.k8s_emulator import Emulator
from tests.watcher.conftest import receive_all, wait_until
from tests.watcher.objects import service

ROOT = Path(__file__).resolve().parents[2]


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_sigterm_flushes_and_exits_zero(
    emulator: Emulator, tmp_path: Path, moto_endpoint: str, sqs: Any, queues: dict[str, str]
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "ccm"), str(ROOT)]),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "WATCHER_SERVICES_QUEUE_URL": queues["Service"],
        "WATCHER_NODES_QUEUE_URL": queues["Node"],
        "WATCHER_KUBECONFIG": emulator.write_kubeconfig(str(tmp_path / "kubeconfig")),
        "WATCHER_AWS_ENDPOINT_URL": moto_endpoint,
        "WATCHER_AWS_REGION": "us-east-1",
        "WATCHER_HEALTH_PORT": "0",
        "WATCHER_LOG_LEVEL": "DEBUG",
        "WATCHER_HEARTBEAT_SECONDS": "0",  # only the Service's delta is expected in the queue
    }
    stderr = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "watcher", "--health-host", "127.0.0.1", "--shutdown-timeout", "10"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    logs: list[dict[str, Any]] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()

    def logged(msg: str) -> dict[str, Any] | None:
        while not lines.empty():
            logs.append(json.loads(lines.get()))  # every stdout line must be a JSON object
        return next((entry for entry in logs if entry["msg"] == msg), None)

    try:
        started = wait_until(lambda: logged("watcher started"), timeout=20)
        port = started["health_port"]
        wait_until(lambda: ready(port), timeout=10)
        emulator.create(service("web"))
        wait_until(lambda: logged("forwarded"), timeout=10)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
    reader.join(5)
    stopped = logged("watcher stopped")
    assert stopped is not None and stopped["flushed"] is True
    received = logged("signal received, shutting down")
    assert received is not None and received["signal"] == "SIGTERM"
    [delta] = [parse_delta(m["Body"]) for m in receive_all(sqs, queues["Service"], expect=1)]
    assert (delta.type, delta.key) == ("ADDED", "default/web")
