"""Fault injection, latency, bearer-token auth and the request log (Python API and HTTP controls)."""

from __future__ import annotations

import time
from pathlib import Path

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from devstack.k8s_emulator import Emulator

from .conftest import Raw, service_body

SVC_PATH = "/api/v1/namespaces/default/services"


def test_fail_next_n_then_ok(emu: Emulator, core: kubernetes.client.CoreV1Api) -> None:
    emu.faults.fail_next(2, status=500, method="GET", path_regex=r"/services$")
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            core.list_namespaced_service("default")
        assert exc.value.status == 500 and '"kind":"Status"' in exc.value.body.replace(" ", "")
    core.create_namespaced_service("default", service_body("web"))  # POST does not match the rule
    assert len(core.list_namespaced_service("default").items) == 1
    statuses = [e["status"] for e in emu.request_log if e["path"] == SVC_PATH]
    assert statuses == [500, 500, 201, 200]


def test_429_has_retry_after_and_409_injection(emu: Emulator, raw: Raw) -> None:
    emu.faults.fail_next(1, status=429)
    status, headers, body = raw.request("GET", SVC_PATH)
    assert status == 429 and headers["retry-after"] == "1"
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 1
    emu.faults.fail_next(1, status=409, method="POST")
    status, _, body = raw.request("GET", SVC_PATH)
    assert status == 200
    status, _, body = raw.request("POST", SVC_PATH, service_body("web"))
    assert status == 409 and body["reason"] == "Conflict"
    status, _, body = raw.request("POST", SVC_PATH, service_body("web"))
    assert status == 201


def test_latency(emu: Emulator, raw: Raw) -> None:
    emu.faults.latency(400)
    started = time.monotonic()
    raw.request("GET", "/version")
    assert time.monotonic() - started >= 0.4
    emu.faults.latency(0)
    started = time.monotonic()
    raw.request("GET", "/version")
    assert time.monotonic() - started < 0.4


def test_http_control_endpoints(emu: Emulator, raw: Raw) -> None:
    assert raw.request("POST", "/_emulator/faults", {"n": 1, "status": 503, "path_regex": "/version"})[0] == 200
    assert raw.request("GET", "/version")[0] == 503
    assert raw.request("GET", "/version")[0] == 200
    assert raw.request("POST", "/_emulator/latency", {"ms": 150})[0] == 200
    started = time.monotonic()
    raw.request("GET", "/api")
    assert time.monotonic() - started >= 0.15
    raw.request("POST", "/_emulator/latency", {"ms": 0})
    old = emu.create(service_body("a"))["metadata"]["resourceVersion"]
    emu.create(service_body("b"))
    assert raw.request("POST", "/_emulator/compact")[0] == 200
    # A too-old RV: HTTP 200 and the 410 in the stream (the watch cache's answer), which then ends.
    status, events = raw.watch(f"{SVC_PATH}?watch=1&resourceVersion={old}")
    assert status == 200 and [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
    status, _, body = raw.request("POST", "/_emulator/drop-watches")
    assert status == 200 and body == {"dropped": 0}
    status, _, log = raw.request("GET", "/_emulator/requests")
    assert status == 200 and [e["path"] for e in log] == ["/version", "/version", "/api", SVC_PATH]
    assert all(not e["path"].startswith("/_emulator") for e in log)
    assert raw.request("DELETE", "/_emulator/requests")[0] == 200
    assert raw.request("GET", "/_emulator/requests")[2] == []


def test_request_log_entries(emu: Emulator, raw: Raw) -> None:
    raw.request("GET", SVC_PATH + "?limit=5")
    entry = emu.request_log[-1]
    assert set(entry) == {"method", "path", "query", "status", "bytes", "user", "time", "watch"}
    assert entry["method"] == "GET" and entry["path"] == SVC_PATH and entry["query"] == "limit=5"
    assert entry["status"] == 200 and entry["user"] == "system:anonymous" and entry["watch"] is False
    assert entry["bytes"] > len('"items"')
    raw.request("GET", "/api/v1/namespaces/default/services/nope", headers={"Authorization": "Bearer admin-token"})
    assert emu.request_log[-1]["status"] == 404 and emu.request_log[-1]["user"] == "admin"
    emu.clear_log()
    assert len(emu.request_log) == 0


def test_request_log_bytes_match_body(emu: Emulator) -> None:
    import http.client

    emu.create(service_body("a"))
    conn = http.client.HTTPConnection(emu.host, emu.port)
    conn.request("GET", SVC_PATH)
    data = conn.getresponse().read()
    conn.close()
    assert emu.request_log[-1]["bytes"] == len(data)


def test_require_token(tmp_path: Path) -> None:
    seen: list[str] = []

    def validator(token: str) -> str | None:
        seen.append(token)
        return "arn:aws:iam::123:role/x" if token.startswith("k8s-aws-v1.") else None

    emu = Emulator(require_token=True, tokens={"static": "alice"}, token_validator=validator).start()
    try:
        raw = Raw(emu)
        status, _, body = raw.request("GET", "/api/v1/namespaces")
        assert status == 401 and body["reason"] == "Unauthorized" and body["kind"] == "Status"
        assert raw.request("GET", "/api/v1/namespaces", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert raw.request("GET", "/api/v1/namespaces", headers={"Authorization": "Bearer static"})[0] == 200
        ok = raw.request("GET", "/api/v1/namespaces", headers={"Authorization": "Bearer k8s-aws-v1.abc"})
        assert ok[0] == 200 and "k8s-aws-v1.abc" in seen
        assert [e["user"] for e in emu.request_log] == [None, None, "alice", "arn:aws:iam::123:role/x"]
        # The kubernetes client authenticates with the kubeconfig token.
        client = kubernetes.config.new_client_from_config(
            config_file=emu.write_kubeconfig(str(tmp_path / "kc"), token="static")
        )
        assert len(kubernetes.client.CoreV1Api(client).list_namespace().items) == 2
        anon = kubernetes.config.new_client_from_config(
            config_file=emu.write_kubeconfig(str(tmp_path / "anon"), token=None)
        )
        with pytest.raises(ApiException) as exc:
            kubernetes.client.CoreV1Api(anon).list_namespace()
        assert exc.value.status == 401
        assert raw.request("GET", "/_emulator/requests")[0] == 200  # controls need no token
    finally:
        emu.stop()


def test_stop_closes_streams_and_port(tmp_path: Path) -> None:
    import threading

    emu = Emulator().start()
    raw = Raw(emu)
    finished: list[int] = []
    t = threading.Thread(
        target=lambda: finished.append(raw.watch("/api/v1/namespaces/default/services?watch=1", timeout=8)[0])
    )
    t.start()
    deadline = time.monotonic() + 5
    while not emu.store.watchers and time.monotonic() < deadline:
        time.sleep(0.02)
    emu.stop()
    t.join(5)
    assert finished == [200]
    with pytest.raises(OSError):
        raw.request("GET", "/version")


def test_tls_watch_with_python_client(tmp_path: Path) -> None:
    emu = Emulator(tls=True, require_token=True).start()
    try:
        client = kubernetes.config.new_client_from_config(
            config_file=emu.write_kubeconfig(str(tmp_path / "kc"), token="admin-token")
        )
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_service("default", service_body("web"))
        events = [
            e["type"]
            for e in kubernetes.watch.Watch().stream(core.list_namespaced_service, "default", timeout_seconds=1)
        ]
        assert events == ["ADDED"]
        assert [e["user"] for e in emu.request_log] == ["admin", "admin"]
    finally:
        emu.stop()
