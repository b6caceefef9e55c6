"""Fixtures: a fresh emulator per test, a real kubernetes client bound to it, and a kubectl runner."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from devstack.k8s_emulator import Emulator


@pytest.fixture
def emu() -> Iterator[Emulator]:
    emulator = Emulator(bookmark_interval=0.3).start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def kubeconfig(emu: Emulator, tmp_path: Path) -> str:
    return emu.write_kubeconfig(str(tmp_path / "kubeconfig"))


@pytest.fixture
def api_client(kubeconfig: str) -> Iterator[kubernetes.client.ApiClient]:
    client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


def service_body(name: str = "web", **spec: Any) -> dict[str, Any]:
    body_spec: dict[str, Any] = {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}
    body_spec.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": body_spec,
    }


Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kubectl(kubeconfig: str, tmp_path: Path) -> Kubectl:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not on PATH: the kubectl tests need the real client (see README)")
    home = tmp_path / "home"
    home.mkdir()

    def run(
        *args: str, check: bool = True, timeout: float = 30, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        # A private HOME keeps kubectl's discovery cache from leaking between emulators.
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env={"HOME": str(home), "PATH": _path()},
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc

    return run


def _path() -> str:
    import os

    return os.environ.get("PATH", "/usr/bin:/bin")


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(proc.stdout)


class Raw:
    """Minimal HTTP client for assertions on status codes, headers and raw watch streams."""

    def __init__(self, emu: Emulator) -> None:
        self.host, self.port = emu.host, emu.port

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        import http.client

        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
            hdrs = {"Content-Type": content_type, **(headers or {})}
            conn.request(method, path, body=payload, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            parsed = json.loads(data) if data and data[:1] in b"[{" else data.decode()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed
        finally:
            conn.close()

    def watch(
        self, path: str, max_events: int = 100, timeout: float = 10, headers: dict[str, str] | None = None
    ) -> tuple[int, list[dict[str, Any]]]:
        """Reads a watch stream until it ends (or max_events); returns (status, events)."""
        import http.client

        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers=headers or {})
            resp = conn.getresponse()
            if resp.status != 200:
                return resp.status, [json.loads(resp.read())]
            events = []
            while len(events) < max_events:
                line = resp.readline()
                if not line:
                    break
                events.append(json.loads(line))
            return resp.status, events
        finally:
            conn.close()


@pytest.fixture
def raw(emu: Emulator) -> Raw:
    return Raw(emu)
