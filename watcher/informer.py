"""List-then-watch loop for one kind (one thread each), in the style of client-go's reflector.

* Lists in pages (`limit`/`continue`) through the project's own small client (ccm.k8s.watch): plain dicts, no
  model objects, one page in memory at a time.
* Watches from the list's resourceVersion with bookmarks, and resumes from the last seen resourceVersion after a
  disconnect (no duplicates, nothing missed).
* On 410 Gone (watch or expired continue token) it relists; objects remembered but no longer listed get a
  synthesised DELETED, so no delete is missed however long the watch was down.
* Ahead of the server (its etcd restored from an older backup) it relists too, whatever shape the server gives
  that answer: a 504 ResourceVersionTooLarge, the same as the stream's ERROR event, or (kube-apiserver 1.28+) a
  stream that stays silent to its end, which a one-item LIST not older than our resourceVersion then confirms.
* Any other failure: jittered, capped exponential backoff, then resume.

The cache (`relevance.CacheEntry` per key) only advances when the buffer accepted the deltas, so anything refused
by a full buffer is re-detected by the relist that follows the overflow.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from typing import Any

from ccm.contracts.messages import Delta
from ccm.k8s.rest import ApiError, KubeRest
from ccm.k8s.watch import Watch, list_page
from watcher import relevance
from watcher.backoff import Backoff
from watcher.buffer import DeltaBuffer
from watcher.metrics import Metrics

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
LIST_READ_TIMEOUT = 60.0
# A watch read may idle this much longer than the server-side timeout before the connection is presumed dead.
WATCH_READ_SLACK = 30.0


class Informer:
    def __init__(
        self,
        kind: str,
        rest: KubeRest,
        path: str,
        buffer: DeltaBuffer,
        metrics: Metrics,
        *,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        backoff: Backoff | None = None,
    ) -> None:
        self.kind = kind
        self._rest = rest
        self._path = path
        self._buffer = buffer
        self._metrics = metrics
        self._page_size = page_size
        self._watch_timeout = watch_timeout_seconds
        self._backoff = backoff or Backoff()
        self._cache: dict[str, relevance.CacheEntry] = {}
        self._lock = threading.Lock()
        self._pending: tuple[str, bool] | None = ("initial", False)  # (reason, force SYNC of everything)
        self._interrupted = False  # the watch was cut by request_relist(), not by a failure
        self._stop = threading.Event()
        self._watch: Watch | None = None  # the open watch request, to cut it from other threads
        self._thread: threading.Thread | None = None
        self.resource_version: str | None = None
        self.synced = threading.Event()
        self.heartbeat = time.monotonic()

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"watcher-informer-{self.kind}", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        self._stop.set()
        self._cut_watch()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        while self._thread is not None and self._thread.is_alive() and time.monotonic() < deadline:
            self._cut_watch()
            self._thread.join(0.1)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def max_quiet_seconds(self) -> float:
        """Longest a healthy loop goes without a heartbeat: a full watch plus a full backoff."""
        return 2 * self._watch_timeout + WATCH_READ_SLACK + CONNECT_TIMEOUT + self._backoff.maximum

    def request_relist(self, reason: str, force: bool = True) -> None:
        with self._lock:
            self._pending = (reason, force or (self._pending is not None and self._pending[1]))
            self._interrupted = True
        self._cut_watch()

    def _cut_watch(self) -> None:
        with self._lock:
            current = self._watch
        if current is not None:
            current.stop()

    # --- loop ------------------------------------------------------------------------------------------------
    def run(self) -> None:
        while not self._stop.is_set():
            self.heartbeat = time.monotonic()
            with self._lock:
                pending, self._pending = self._pending, None
                self._interrupted = False
            try:
                if pending is not None:
                    self._relist(*pending)
                    # Done: a watch failing from here on resumes from the list's resourceVersion, it does not
                    # list again (only a 410 or an overflow asks for a new list).
                    pending = None
                    self._backoff.reset()
                if self._watch_once():
                    self._backoff.reset()
                    continue
            except ApiError as err:
                if err.status == 410:
                    log.info("resourceVersion too old (410 Gone); relisting", extra={"kind": self.kind})
                    self._requeue_relist(pending, "gone")
                    continue  # relisting right away is the cure, not a retry of the failed call
                if _too_large_resource_version(err):
                    # The server is behind our resourceVersion (etcd restored from a backup, a lagging replica):
                    # resuming from it can never work, so relist from the server's current state, as client-go's
                    # reflector does (isTooLargeResourceVersionError -> relist with resourceVersion "").
                    log.warning("resourceVersion ahead of the server; relisting", extra={"kind": self.kind})
                    self._requeue_relist(pending, "too_large_rv")
                    continue
                self._requeue_relist(pending, None)
                log.warning("list/watch failed", extra={"kind": self.kind, "status": err.status, "error": err.message})
            except Exception as err:  # the loop must survive anything the network or the server throws at it
                self._requeue_relist(pending, None)
                if not self._stop.is_set():
                    log.warning("list/watch interrupted", extra={"kind": self.kind, "error": repr(err)})
            if self._stop.is_set():
                break
            with self._lock:
                interrupted, self._interrupted = self._interrupted, False
            if not interrupted:
                self._stop.wait(self._backoff.next_delay())

    def _requeue_relist(self, failed: tuple[str, bool] | None, reason: str | None) -> None:
        """Keep a relist that did not finish (or schedule a new one) without losing its force flag."""
        with self._lock:
            wanted = [p for p in (failed, self._pending) if p is not None]
            if reason is not None:
                wanted.append((reason, False))
            if not wanted:
                return
            # If the initial list has not completed yet, keep calling it that.
            name = "initial" if not self.synced.is_set() else wanted[-1][0]
            self._pending = (name, any(force for _, force in wanted))

    def _relist(self, reason: str, force: bool) -> None:
        self._metrics.relists.labels(kind=self.kind, reason=reason).inc()
        observed_at = time.time()
        listed: set[str] = set()
        resource_version: str | None = None
        token: str | None = None
        while True:
            page = list_page(
                self._rest,
                self._path,
                limit=self._page_size,
                continue_token=token,
                timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT),
            )
            self.heartbeat = time.monotonic()
            meta = page.get("metadata") or {}
            resource_version = resource_version or meta.get("resourceVersion")
            for obj in page.get("items") or ():
                if self._stop.is_set():
                    return
                listed.add(self._key(obj))
                self._observe("SYNC", obj, observed_at, force=force, wait=True)
            token = meta.get("continue")
            if not token:
                break
        self._relisted(listed, observed_at)
        self.resource_version = resource_version
        if not self.synced.is_set():
            self.synced.set()
            self._metrics.synced.labels(kind=self.kind).set(1)
        log.info(
            "listed",
            extra={"kind": self.kind, "reason": reason, "objects": len(listed), "resourceVersion": resource_version},
        )

    def _watch_once(self) -> bool:
        """One watch request; True if it made progress (events or a full server-side timeout)."""
        timeout = random.randint(self._watch_timeout, 2 * self._watch_timeout)
        started = time.monotonic()
        progressed = False
        stream = Watch(
            self._rest,
            self._path,
            resource_version=self.resource_version,
            timeout_seconds=timeout,
            timeout=(CONNECT_TIMEOUT, timeout + WATCH_READ_SLACK),
        )
        with self._lock:
            self._watch = stream
            if self._stop.is_set() or self._pending is not None:  # asked for while no watch was open to cut
                stream.stop()
        events = stream.events()
        heard = False  # any event, bookmarks included
        try:
            for event in events:
                self.heartbeat = time.monotonic()
                progressed = heard = True
                obj = event.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self._observe(event["type"], obj, time.time())
                if rv:
                    # BOOKMARKs only move the resourceVersion, which keeps a resumed watch away from 410s.
                    self.resource_version = rv
                if self._stop.is_set() or self._pending is not None:
                    break
        finally:
            events.close()  # releases the connection now, not when garbage-collected
            with self._lock:
                self._watch = None
        ran_out = time.monotonic() - started >= self._watch_timeout
        if ran_out and not heard and self.resource_version and not self._stop.is_set():
            self._check_server_reached(self.resource_version)
        return progressed or ran_out

    def _check_server_reached(self, resource_version: str) -> None:
        """A watch that ran to its end without a single event or bookmark. A server sends a bookmark at least once a
        minute and before a watch's deadline to a client that asked for them, except (kube-apiserver 1.28+) when
        the watch starts from a resourceVersion it has not reached: then the stream stays silent and everything
        written meanwhile is lost to it. A LIST of one item not older than our resourceVersion tells: such a server
        answers it 504 ResourceVersionTooLarge, raised here so the loop relists as for a watch answered 504."""
        self._metrics.silent_watches.labels(kind=self.kind).inc()
        list_page(
            self._rest,
            self._path,
            limit=1,
            continue_token=None,
            timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT),
            not_older_than=resource_version,
        )

    # --- cache (what a subclass for another kind overrides: watcher.endpoints.SliceInformer) -------------------
    def _key(self, obj: dict[str, Any]) -> str:
        return relevance.key_of(self.kind, obj)

    def _relisted(self, listed: set[str], observed_at: float) -> None:
        """After a full list: tombstones for the remembered objects it no longer returned."""
        with self._lock:
            gone = relevance.vanished(self.kind, self._cache, listed, observed_at)
        for delta in gone:
            if self._put(delta, wait=True):
                with self._lock:
                    self._cache.pop(delta.key, None)
        self._metrics.cache_entries.labels(kind=self.kind).set(len(self._cache))

    def remembered(self, key: str) -> relevance.CacheEntry | None:
        """The entry kept for `key` (relevant Services keep their trimmed object), for other threads to read."""
        with self._lock:
            return self._cache.get(key)

    def _observe(
        self, event_type: str, obj: dict[str, Any], observed_at: float, *, force: bool = False, wait: bool = False
    ) -> None:
        # Only this thread writes the cache, so the lock is held just for reads/writes, never while waiting for
        # buffer room (the sender must stay able to call request_relist meanwhile).
        key = relevance.key_of(self.kind, obj)
        self._metrics.deltas_seen.labels(kind=self.kind).inc()
        with self._lock:
            previous = self._cache.get(key)
        decision = relevance.decide(self.kind, event_type, obj, previous, observed_at=observed_at, force=force)
        if decision.dropped:
            self._metrics.dropped_irrelevant.labels(kind=self.kind).inc()
        if not all(self._put(delta, wait) for delta in decision.deltas):
            return
        with self._lock:
            if decision.entry is None:
                self._cache.pop(key, None)
            else:
                self._cache[key] = decision.entry
            self._metrics.cache_entries.labels(kind=self.kind).set(len(self._cache))
        if decision.deltas:
            log.debug("forwarded", extra={"kind": self.kind, "key": key, "types": [d.type for d in decision.deltas]})

    def _put(self, delta: Delta, wait: bool = False) -> bool:
        """Hand a delta to the buffer.

        Watch events never wait: when the buffer is full (SQS down) the delta is refused, the buffer marks the
        overflow and a relist repairs it later. Relists and resyncs wait for room instead, so a relist that
        follows an overflow cannot overflow again, whatever the number of objects.
        """
        if not wait:
            if self._buffer.put(delta):
                return True
            self._metrics.deltas_dropped.labels(kind=self.kind, reason="buffer_full").inc()
            return False
        while not self._stop.is_set():
            if self._buffer.put_wait(delta, 0.5):
                return True
            self.heartbeat = time.monotonic()  # waiting for SQS is not being wedged
        return False

    def resync(self) -> int:
        """Queue a SYNC delta for every remembered relevant object (periodic resync); returns how many."""
        with self._lock:
            deltas = relevance.resync_deltas(self.kind, self._cache, time.time())
        for delta in deltas:
            if not self._put(delta, wait=True):
                break
        return len(deltas)


def _too_large_resource_version(err: ApiError) -> bool:
    """A 504 with the ResourceVersionTooLarge cause (storage.NewTooLargeResourceVersionError)."""
    if err.status != 504 or not err.body:
        return False
    try:
        causes = (json.loads(err.body).get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        return False
    return any(isinstance(c, dict) and c.get("reason") == "ResourceVersionTooLarge" for c in causes)
