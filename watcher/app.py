"""Wiring: informers of Services and Nodes -> one bounded buffer -> one sender; the EndpointSlice informer -> the
endpoint hints' coalescer -> the same buffer; plus resync timer and health server."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from ccm.k8s.kubeconfig import from_kubeconfig, in_cluster
from ccm.k8s.rest import KubeRest
from watcher.backoff import Backoff
from watcher.buffer import DeltaBuffer
from watcher.config import Config
from watcher.endpoint_hints import EndpointHints, SliceInformer
from watcher.health import HealthServer
from watcher.informer import Informer
from watcher.metrics import Metrics
from watcher.sender import Sender

log = logging.getLogger(__name__)

# How long the sender's own loop may go without a heartbeat: one SQS call with botocore's retries plus a full
# backoff, with margin.
SENDER_MAX_QUIET_SECONDS = 120.0
# The endpoint hints' flusher wakes every second and never blocks (the buffer refuses rather than waits).
HINTS_MAX_QUIET_SECONDS = 30.0


def seconds_to_next_resync(now: float, period: float) -> float:
    """Resyncs happen on wall-clock multiples of the period, not `period` after this process started: replicas
    (and a restarted watcher) then send their SYNCs, whose deduplication ids only depend on uid/resourceVersion,
    at the same moment, inside SQS's 5-minute deduplication window, and the reconcilers do the work once."""
    return period - (now % period)


def kube_api_client(kubeconfig: str | None, environ: Mapping[str, str] = os.environ) -> KubeRest:
    """--kubeconfig if given, else the pod's service account, else the default kubeconfig (the first file of
    KUBECONFIG, else ~/.kube/config): the official client's order."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig)
    if environ.get("KUBERNETES_SERVICE_HOST") and environ.get("KUBERNETES_SERVICE_PORT"):
        return in_cluster(environ["KUBERNETES_SERVICE_HOST"], environ["KUBERNETES_SERVICE_PORT"])
    default = (environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return from_kubeconfig(default or os.path.expanduser("~/.kube/config"))


def sqs_client(config: Config) -> Any:
    # botocore's standard retry mode handles throttling/5xx/connection errors with its own jittered backoff; the
    # sender only deals with what is still failing after that. Short timeouts keep shutdown flushes bounded.
    boto_config = BotoConfig(
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=3,
        read_timeout=10,
    )
    return boto3.session.Session().client(
        "sqs", endpoint_url=config.aws_endpoint_url, region_name=config.aws_region, config=boto_config
    )


class Watcher:
    """The whole watcher, runnable in-process: `Watcher(config).start()`, `.ready`, `.stop()`.

    `api_client` / `sqs` may be injected (tests, embedding); by default they come from the config.
    """

    def __init__(self, config: Config, *, api_client: KubeRest | None = None, sqs: Any = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self.buffer = DeltaBuffer(config.buffer_size)
        self.metrics.buffer.set_function(lambda: len(self.buffer))
        self.metrics.buffer_capacity.set(config.buffer_size)
        self._api = api_client or kube_api_client(config.kubeconfig)

        def backoff() -> Backoff:
            return Backoff(config.backoff_initial, config.backoff_max)

        common: dict[str, Any] = {
            "page_size": config.list_page_size,
            "watch_timeout_seconds": config.watch_timeout_seconds,
        }
        services = Informer(
            "Service", self._api, "/api/v1/services", self.buffer, self.metrics, backoff=backoff(), **common
        )
        # ENDPOINTS hints for `ip` target-mode Services, judged against the Service informer's cache.
        self.endpoint_hints = EndpointHints(
            self.buffer,
            self.metrics,
            services.remembered,
            services.synced,
            window=config.endpoints_window_seconds,
            waiting_window=config.endpoints_waiting_window_seconds,
            load_balancer_class=config.load_balancer_class,
            claim_unclassed=config.services_without_class == "claim",
        )
        self.informers: dict[str, Informer] = {
            "Service": services,
            "Node": Informer(
                "Node", self._api, "/api/v1/nodes", self.buffer, self.metrics, backoff=backoff(), **common
            ),
            "EndpointSlice": SliceInformer(
                self._api, self.endpoint_hints, self.buffer, self.metrics, backoff=backoff(), **common
            ),
        }
        self.sender = Sender(
            sqs if sqs is not None else sqs_client(config),
            {"Service": config.services_queue_url, "Node": config.nodes_queue_url},
            self.buffer,
            self.metrics,
            backoff=backoff(),
            probe_seconds=config.sqs_probe_seconds,
            ready_window_seconds=config.sqs_ready_window_seconds,
            on_relist_needed=lambda kind: self.informers[kind].request_relist("overflow"),
            heartbeat_seconds=config.heartbeat_seconds,
            replica=os.environ.get("POD_NAME") or socket.gethostname(),
        )
        self._health: HealthServer | None = None
        self._stopping = threading.Event()
        self._resync_thread: threading.Thread | None = None
        self.resync_heartbeat = time.monotonic()
        self._started = False

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._health = HealthServer(
            self.config.health_host, self.config.health_port, self.metrics.registry, self.liveness, self.readiness
        )
        self._health.start()
        self.sender.start()
        self.endpoint_hints.start()
        for informer in self.informers.values():
            informer.start()
        self._resync_thread = threading.Thread(target=self._resync_loop, name="watcher-resync", daemon=True)
        self._resync_thread.start()
        self._started = True
        log.info("watcher started", extra={"health_port": self.health_port})

    def stop(self, flush_timeout: float | None = None) -> bool:
        """Stop watching, flush the buffer to SQS (bounded), stop serving; True if nothing was left unsent."""
        if self._stopping.is_set():
            return len(self.buffer) == 0
        self._stopping.set()
        for informer in self.informers.values():
            informer.request_stop()  # all at once: their shutdowns overlap instead of adding up
        for informer in self.informers.values():
            informer.stop()
        self.endpoint_hints.stop()  # its pending hints go to the buffer, ahead of the sender's last flush
        flushed = self.sender.stop(self.config.shutdown_timeout if flush_timeout is None else flush_timeout)
        if self._health is not None:
            self._health.stop()
        self._api.pool.clear()
        log.info("watcher stopped", extra={"flushed": flushed})
        return flushed

    @property
    def health_port(self) -> int:
        if self._health is None:
            raise RuntimeError("watcher not started")
        return self._health.port

    @property
    def ready(self) -> bool:
        return self.readiness()[0]

    # --- checks ----------------------------------------------------------------------------------------------
    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """Every loop thread is running and has made progress recently (none is wedged)."""
        now = time.monotonic()
        loops: dict[str, bool] = {
            f"informer_{kind}": informer.alive and now - informer.heartbeat < informer.max_quiet_seconds
            for kind, informer in self.informers.items()
        }
        loops["endpoint_hints"] = (
            self.endpoint_hints.alive and now - self.endpoint_hints.heartbeat < HINTS_MAX_QUIET_SECONDS
        )
        loops["sender"] = self.sender.alive and now - self.sender.heartbeat < SENDER_MAX_QUIET_SECONDS
        loops["resync"] = self._resync_thread is not None and self._resync_thread.is_alive()
        return self._started and not self._stopping.is_set() and all(loops.values()), {"loops": loops}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Initial lists done for every kind (EndpointSlices included: without them `ip` Services would miss their
        hints, e.g. under a ClusterRole of an older release) and SQS answered recently."""
        synced = {kind: informer.synced.is_set() for kind, informer in self.informers.items()}
        reachable = self.sender.reachable
        ok = self._started and not self._stopping.is_set() and all(synced.values()) and reachable
        return ok, {"synced": synced, "sqs_reachable": reachable, "buffered": len(self.buffer)}

    # --- resync ----------------------------------------------------------------------------------------------
    def _resync_loop(self) -> None:
        # Resync comes from the informer's cache of relevant Services (trimmed objects are kept for those only),
        # so it costs no API call.
        services = self.informers["Service"]
        while not self._stopping.wait(seconds_to_next_resync(time.time(), self.config.resync_seconds)):
            self.resync_heartbeat = time.monotonic()
            if services.synced.is_set():
                count = services.resync()
                log.info("periodic resync", extra={"kind": "Service", "deltas": count})
