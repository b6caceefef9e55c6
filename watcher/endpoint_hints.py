"""The EndpointSlice informer and the thread that turns its changes into ENDPOINTS hints (watcher.endpoints says
which slices and Services, and how changes are coalesced).

* `SliceInformer` is the list-then-watch loop of watcher.informer (pages, bookmarks, resume, relist on 410 or a
  server behind us) on `discovery.k8s.io/v1` EndpointSlices of all namespaces, without a label selector: nearly
  every slice carries `kubernetes.io/service-name`, those without it are skipped on arrival. Instead of deltas, it
  feeds the slice index and marks the Services whose slices changed. It never waits for the buffer.
* `EndpointHints` owns the index and the coalescer (one lock) and runs the flusher thread: when a Service's window
  closes it asks the Service informer's cache whether the Service is (still) in `ip` mode and ours (its
  loadBalancerClass; the stack's choice for Services without one), and queues one ENDPOINTS delta, uid from that
  cache. Nothing is flushed before the Service informer's first list (the judgement needs its cache); what arrived
  meanwhile waits.

Relist (the first list after a start, after a 410 or a server behind us): a listed slice whose resourceVersion
differs from the remembered one, or that is new, and a remembered one no longer listed, mark their Service. The
first list of a process remembers nothing, so every `ip` Service with slices gets one hint: after a watcher
restart, at most one message per `ip` Service (the Services' own SYNCs are one per relevant Service), and two
replicas listing the same state send the same digest, which SQS deduplicates. A later relist marks only the
Services whose slices differ.

Full buffer: a refused hint marks the services queue overflowed; the relist the sender then asks of the Service
informer SYNCs every relevant Service, a full reconcile that reads the slices too, so nothing is lost for good.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ccm.contracts.messages import endpoints_hint
from ccm.k8s.rest import KubeRest
from watcher.backoff import Backoff
from watcher.buffer import DeltaBuffer
from watcher.endpoints import (
    DEFAULT_WAITING_WINDOW_SECONDS,
    DEFAULT_WINDOW_SECONDS,
    Change,
    Coalescer,
    SliceIndex,
    ip_mode,
    slice_ref,
)
from watcher.informer import Informer
from watcher.metrics import Metrics
from watcher.relevance import CacheEntry

log = logging.getLogger(__name__)

KIND = "EndpointSlice"
PATH = "/apis/discovery.k8s.io/v1/endpointslices"
# The flusher wakes at least this often (its liveness heartbeat), and this often while waiting for the Services.
IDLE_WAKE_SECONDS = 1.0
UNSYNCED_WAKE_SECONDS = 0.05

ServiceEntry = Callable[[str], CacheEntry | None]


class EndpointHints:
    def __init__(
        self,
        buffer: DeltaBuffer,
        metrics: Metrics,
        service_entry: ServiceEntry,
        services_synced: threading.Event,
        *,
        window: float = DEFAULT_WINDOW_SECONDS,
        waiting_window: float = DEFAULT_WAITING_WINDOW_SECONDS,
        load_balancer_class: str | None = None,
        claim_unclassed: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._class, self._claim_unclassed = load_balancer_class, claim_unclassed
        self._buffer = buffer
        self._metrics = metrics
        self._service_entry = service_entry
        self._services_synced = services_synced
        self._index = SliceIndex()
        self._coalescer = Coalescer(window, clock, waiting_window)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.heartbeat = time.monotonic()

    # --- the informer's side ---------------------------------------------------------------------------------
    def observe(self, event_type: str, obj: dict[str, Any], observed_at: float) -> None:
        ref = slice_ref(obj)
        with self._cond:
            changes = self._index.apply(event_type, ref)
            remembered = len(self._index)
        if not changes and ref.service is not None and event_type != "SYNC":
            self._metrics.endpoint_writes_unchanged.inc()
        self._mark(changes, observed_at)
        self._metrics.cache_entries.labels(kind=KIND).set(remembered)

    def relisted(self, listed: set[str], observed_at: float) -> None:
        with self._cond:
            changes = self._index.vanished(listed)
            remembered = len(self._index)
        self._mark(changes, observed_at)
        self._metrics.cache_entries.labels(kind=KIND).set(remembered)

    def _mark(self, changes: list[Change], observed_at: float) -> None:
        for change in changes:
            if not self._candidate(change.service):
                self._metrics.dropped_irrelevant.labels(kind=KIND).inc()
                continue
            with self._cond:
                armed = self._coalescer.mark(change, observed_at)
                self._metrics.endpoint_pending.set(len(self._coalescer))
                if armed:
                    self._cond.notify_all()  # the flusher may be sleeping past this new window's end
            if not armed:
                self._metrics.endpoint_changes_coalesced.inc()

    def _candidate(self, service: str) -> bool:
        """Worth a window: an `ip` Service, or not known yet (the Services' first list is not done)."""
        if not self._services_synced.is_set():
            return True
        entry = self._service_entry(service)
        return entry is not None and ip_mode(entry.trimmed, self._class, self._claim_unclassed)

    # --- the flusher -----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="watcher-endpoint-hints", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the flusher, then queue every pending hint at once (before the sender's last flush)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._services_synced.is_set():
            self.flush(everything=True)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> None:
        while not self._stop.is_set():
            self.heartbeat = time.monotonic()
            if not self._services_synced.is_set():
                self._stop.wait(UNSYNCED_WAKE_SECONDS)
                continue
            self.flush()
            with self._cond:
                due = self._coalescer.next_due()
                wait = IDLE_WAKE_SECONDS if due is None else min(IDLE_WAKE_SECONDS, max(0.0, due - time.monotonic()))
                if wait > 0 and not self._stop.is_set():
                    self._cond.wait(wait)

    def flush(self, everything: bool = False) -> int:
        """Queue the hints whose window closed; returns how many were queued."""
        with self._cond:
            due = self._coalescer.take_due(everything)
            self._metrics.endpoint_pending.set(len(self._coalescer))
            states = {service: self._index.slices_of(service) for service, _ in due}
        queued = 0
        for service, pending in due:
            entry = self._service_entry(service)
            if entry is None or not ip_mode(entry.trimmed, self._class, self._claim_unclassed):
                # Left `ip` mode or gone while the window was open: its own MODIFIED/DELETED covers it.
                self._metrics.endpoint_hints.labels(outcome="dropped").inc()
                continue
            delta = endpoints_hint(
                service, entry.uid, states[service], pending.deleted, pending.first_seen, pending.changes
            )
            if not self._buffer.put(delta):
                self._metrics.deltas_dropped.labels(kind="Service", reason="buffer_full").inc()
                continue
            queued += 1
            self._metrics.endpoint_hints.labels(outcome="queued").inc()
            log.debug(
                "endpoint hint", extra={"key": service, "changes": pending.changes, "slices": len(states[service])}
            )
        return queued


class SliceInformer(Informer):
    """watcher.informer's loop for EndpointSlices, feeding EndpointHints instead of the buffer."""

    def __init__(
        self,
        rest: KubeRest,
        hints: EndpointHints,
        buffer: DeltaBuffer,
        metrics: Metrics,
        *,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(
            KIND,
            rest,
            PATH,
            buffer,
            metrics,
            page_size=page_size,
            watch_timeout_seconds=watch_timeout_seconds,
            backoff=backoff,
        )
        self._hints = hints

    def _key(self, obj: dict[str, Any]) -> str:
        return slice_ref(obj).key

    def _observe(
        self, event_type: str, obj: dict[str, Any], observed_at: float, *, force: bool = False, wait: bool = False
    ) -> None:
        # `force` (a relist after an overflow) is the Service informer's business; `wait`: nothing is buffered here.
        self._hints.observe(event_type, obj, observed_at)
        self._metrics.deltas_seen.labels(kind=KIND).inc()  # after: once counted, its change is marked

    def _relisted(self, listed: set[str], observed_at: float) -> None:
        self._hints.relisted(listed, observed_at)

    def resync(self) -> int:
        return 0  # the periodic resync is the Services' SYNC, a full reconcile
