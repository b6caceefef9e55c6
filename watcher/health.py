"""HTTP endpoints: /healthz (liveness), /readyz (readiness) and /metrics (Prometheus, via prometheus_client)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

# Each check returns (ok, details); details are shown in the response body to make failed probes debuggable.
Check = Callable[[], tuple[bool, dict[str, Any]]]


class HealthServer:
    def __init__(self, host: str, port: int, registry: CollectorRegistry, healthz: Check, readyz: Check) -> None:
        checks = {"/healthz": healthz, "/readyz": readyz}

        class Handler(MetricsHandler):
            def do_GET(self) -> None:
                path = urlparse(self.path).path
                if path == "/metrics":
                    super().do_GET()
                    return
                check = checks.get(path)
                if check is None:
                    self._reply(404, {"error": "not found"})
                    return
                ok, details = check()
                self._reply(200 if ok else 503, {"ok": ok, **details})

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body, sort_keys=True).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        Handler.registry = registry
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="watcher-health", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
