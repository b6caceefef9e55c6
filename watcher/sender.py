"""The single sender thread: drains the DeltaBuffer into SQS FIFO queues with SendMessageBatch.

Whole-call failures (unreachable endpoint, throttling, 5xx) are first retried by botocore's standard retry mode;
what still fails goes back to the front of the buffer and is retried with jittered exponential backoff, forever
(a delta is never dropped silently; the bounded buffer and its relist-on-overflow take care of memory).
Entries SQS rejects in the batch's `Failed` list are retried the same way unless SQS says it is the sender's
fault, which no retry can fix: those are logged and counted as rejected.

The same thread sends the heartbeat (ccm.contracts.messages.heartbeat_for) once per heartbeat period, so the
heartbeat stops when the sender is wedged or SQS unreachable, which is what the "watcher silence" alarm is for. A
failed heartbeat is not retried: the next period's one says the same.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ccm.contracts.messages import Delta, heartbeat_for
from watcher.backoff import Backoff
from watcher.buffer import DeltaBuffer
from watcher.burst import LINGER_SECONDS, CreationWindow
from watcher.fit import MAX_MESSAGE_BYTES, body_size, fit
from watcher.metrics import Metrics

log = logging.getLogger(__name__)

MAX_BATCH_ENTRIES = 10
MAX_BATCH_BYTES = 256 * 1024
ACCESS_DENIED = frozenset({"AccessDenied", "AccessDeniedException"})


class Sender:
    def __init__(
        self,
        sqs: Any,
        queue_urls: Mapping[str, str],
        buffer: DeltaBuffer,
        metrics: Metrics,
        *,
        backoff: Backoff | None = None,
        probe_seconds: float = 15.0,
        ready_window_seconds: float = 60.0,
        on_relist_needed: Callable[[str], None] | None = None,
        heartbeat_seconds: float = 0.0,
        replica: str = "",
    ) -> None:
        self._sqs = sqs
        self._urls = dict(queue_urls)
        self._buffer = buffer
        self._metrics = metrics
        self._backoff = backoff or Backoff()
        self._probe_seconds = probe_seconds
        self._ready_window = ready_window_seconds
        self._on_relist_needed = on_relist_needed
        self._heartbeat_seconds = heartbeat_seconds  # 0 = no heartbeat
        self._replica = replica
        self._last_beat = ""  # resourceVersion (period start) of the last heartbeat attempted
        self._stop = threading.Event()
        self._drain_deadline = 0.0
        self._thread: threading.Thread | None = None
        self.heartbeat = time.monotonic()
        self.sqs_ok = False
        self._last_ok = 0.0  # monotonic time of the last successful SQS call
        self._last_call = float("-inf")
        self._creations = CreationWindow()  # the burst hint of Service creations (watcher.burst)

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="watcher-sender", daemon=True)
        self._thread.start()

    def stop(self, flush_timeout: float) -> bool:
        """Stop after sending what the buffer holds, for at most flush_timeout seconds; True if it all went."""
        self._drain_deadline = time.monotonic() + flush_timeout
        self._stop.set()
        if self._thread is not None:
            # Slack for one SQS call that started just before the deadline.
            self._thread.join(flush_timeout + 15)
        left = len(self._buffer)
        if left:
            log.error("shutdown: %d deltas could not be delivered to SQS before the timeout", left)
        return left == 0

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def reachable(self) -> bool:
        """SQS answered the last call, recently enough to believe it still would."""
        return self.sqs_ok and time.monotonic() - self._last_ok < self._ready_window

    # --- loop ------------------------------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            self.heartbeat = time.monotonic()
            if self._stop.is_set() and (len(self._buffer) == 0 or time.monotonic() >= self._drain_deadline):
                return
            self._maybe_heartbeat()
            batch = self._buffer.take(MAX_BATCH_ENTRIES, timeout=0.2)
            if not batch:
                if time.monotonic() - self._last_call >= self._probe_seconds:
                    self._probe()
                self._maybe_request_relist()
                continue
            if not self._stop.is_set() and self._creations.should_linger(batch):
                # A burst's first creation waits for the ones right behind it (watcher.burst), once.
                self._buffer.requeue_front(batch)
                self._stop.wait(LINGER_SECONDS)
                continue
            if self.send_batch(batch):
                self._backoff.reset()
                self._maybe_request_relist()
            else:
                delay = self._backoff.next_delay()
                if self._stop.is_set():
                    delay = min(delay, max(0.0, self._drain_deadline - time.monotonic()))
                    time.sleep(delay)
                else:
                    self._stop.wait(delay)

    def send_batch(self, batch: list[Delta]) -> bool:
        """Send one batch (one kind, distinct keys); returns False if anything has to be retried."""
        kind = batch[0].kind
        batch = self._creations.stamp(batch)
        entries: list[dict[str, str]] = []
        sendable: list[Delta] = []
        rejected: list[Delta] = []
        later: list[Delta] = []
        size = 0
        for idx, original in enumerate(batch):
            delta = fit(original)
            if delta is not original:
                self._metrics.deltas_trimmed.labels(kind=kind).inc()
                log.warning(
                    "delta too large for one SQS message; sent trimmed (the reconciler re-reads the object)",
                    extra={"kind": kind, "key": delta.key, "type": delta.type, "bytes": body_size(original)},
                )
            body = delta.to_body()
            length = len(body.encode())
            if length > MAX_MESSAGE_BYTES:
                rejected.append(delta)  # cannot happen with fit(); kept so a bug cannot wedge the batch
                continue
            if size + length > MAX_BATCH_BYTES:
                later = batch[idx:]  # next round; keeps their relative order
                break
            size += length
            entries.append(
                {
                    "Id": str(len(entries)),
                    "MessageBody": body,
                    "MessageGroupId": delta.group_id,
                    "MessageDeduplicationId": delta.deduplication_id,
                }
            )
            sendable.append(delta)
        for delta in rejected:
            self._reject(delta, "message larger than SQS accepts")
        if not entries:
            self._buffer.requeue_front(later)
            self._buffer.done(len(rejected))
            return True
        self._last_call = time.monotonic()
        try:
            response = self._sqs.send_message_batch(QueueUrl=self._urls[kind], Entries=entries)
        except (BotoCoreError, ClientError) as err:
            self.sqs_ok = False
            self._metrics.deltas_failed.labels(kind=kind).inc(len(sendable))
            log.warning(
                "SendMessageBatch failed, will retry", extra={"kind": kind, "count": len(sendable), "error": str(err)}
            )
            self._buffer.requeue_front(sendable + later)
            self._buffer.done(len(rejected))
            return False
        self._mark_ok()
        accepted = time.time()
        ok_ids = {entry["Id"] for entry in response.get("Successful") or ()}
        failures = {entry["Id"]: entry for entry in response.get("Failed") or ()}
        retry: list[Delta] = []
        finished = len(rejected)
        for i, delta in enumerate(sendable):
            if str(i) in ok_ids:
                finished += 1
                self._metrics.deltas_sent.labels(kind=kind).inc()
                self._metrics.queue_lag.labels(kind=kind).observe(max(0.0, accepted - delta.observed_at))
                continue
            failure = failures.get(str(i), {})
            self._metrics.deltas_failed.labels(kind=kind).inc()
            if failure.get("SenderFault"):
                finished += 1
                self._reject(delta, f"{failure.get('Code')}: {failure.get('Message')}")
            else:
                retry.append(delta)
        if len(ok_ids):
            self._metrics.last_send.set(accepted)
        if retry:
            log.warning("SQS refused %d entries, will retry", len(retry), extra={"kind": kind})
        self._buffer.requeue_front(retry + later)
        self._buffer.done(finished)
        return not retry

    # --- helpers ---------------------------------------------------------------------------------------------
    def _reject(self, delta: Delta, reason: str) -> None:
        self._metrics.deltas_dropped.labels(kind=delta.kind, reason="rejected").inc()
        log.error(
            "SQS rejected a delta permanently; it is dropped",
            extra={"kind": delta.kind, "key": delta.key, "type": delta.type, "reason": reason},
        )

    def _mark_ok(self) -> None:
        self.sqs_ok = True
        self._last_ok = time.monotonic()

    def _maybe_heartbeat(self) -> None:
        if self._heartbeat_seconds <= 0 or self._stop.is_set():
            return
        beat = heartbeat_for(self._replica, time.time(), self._heartbeat_seconds)
        if beat.resource_version == self._last_beat:
            return
        self._last_beat = beat.resource_version
        self._last_call = time.monotonic()
        try:
            self._sqs.send_message(
                QueueUrl=self._urls["Service"],
                MessageBody=beat.to_body(),
                MessageGroupId=beat.group_id,
                MessageDeduplicationId=beat.deduplication_id,
            )
        except (BotoCoreError, ClientError) as err:
            self.sqs_ok = False
            log.warning("heartbeat failed", extra={"error": str(err)})
            return
        self._mark_ok()
        self._metrics.heartbeats_sent.inc()

    def _probe(self) -> None:
        """Prove reachability while idle, so /readyz reflects SQS even when nothing changes in the cluster.

        The watcher's role may only send (template.yaml, WatcherRole), so SQS answering AccessDenied to this read
        still proves the endpoint is reachable and our credentials valid; sending is proven by every heartbeat."""
        self._last_call = time.monotonic()
        try:
            for url in self._urls.values():
                self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in ACCESS_DENIED:
                self.sqs_ok = False
                log.warning("SQS probe failed", extra={"error": str(err)})
                return
        except BotoCoreError as err:
            self.sqs_ok = False
            log.warning("SQS probe failed", extra={"error": str(err)})
            return
        self._mark_ok()

    def _maybe_request_relist(self) -> None:
        # Relist only once SQS works and there is room again; relisting into a full buffer would just overflow.
        if not self.sqs_ok or not self._buffer.overflowed or len(self._buffer) > self._buffer.capacity // 2:
            return
        for kind in sorted(self._buffer.take_overflowed()):
            log.warning("buffer overflowed earlier; requesting a relist", extra={"kind": kind})
            if self._on_relist_needed is not None:
                self._on_relist_needed(kind)
