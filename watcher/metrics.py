"""Prometheus metrics, bound to one registry per Watcher so several watchers can live in one process (tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.deltas_seen = Counter(
            "watcher_deltas_seen_total", "Watch events and relisted objects observed", ["kind"], registry=r
        )
        self.deltas_sent = Counter("watcher_deltas_sent_total", "Deltas accepted by SQS", ["kind"], registry=r)
        self.deltas_failed = Counter(
            "watcher_deltas_failed_total",
            "Delta send attempts that failed (retried unless dropped)",
            ["kind"],
            registry=r,
        )
        self.deltas_dropped = Counter(
            "watcher_deltas_dropped_total",
            "Deltas not sent: buffer_full (recovered by a relist) or rejected (SQS says it can never accept it)",
            ["kind", "reason"],
            registry=r,
        )
        self.deltas_trimmed = Counter(
            "watcher_deltas_trimmed_total",
            "Deltas sent with a smaller object because the whole one was larger than an SQS message",
            ["kind"],
            registry=r,
        )
        self.dropped_irrelevant = Counter(
            "watcher_dropped_irrelevant_total",
            "Observed changes not forwarded because nothing a reconciler cares about changed",
            ["kind"],
            registry=r,
        )
        self.relists = Counter("watcher_relists_total", "Full relists", ["kind", "reason"], registry=r)
        self.silent_watches = Counter(
            "watcher_silent_watches_total",
            "Watches that ended with no event and no bookmark (each checked with a one-item LIST)",
            ["kind"],
            registry=r,
        )
        self.buffer = Gauge("watcher_buffer_deltas", "Deltas held for sending (incl. in flight)", registry=r)
        self.buffer_capacity = Gauge("watcher_buffer_capacity", "Configured buffer capacity", registry=r)
        self.queue_lag = Histogram(
            "watcher_queue_lag_seconds",
            "Seconds from observing a change to SQS accepting its delta",
            ["kind"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.last_send = Gauge(
            "watcher_last_successful_send_timestamp_seconds",
            "Unix time of the last SendMessageBatch that delivered at least one delta",
            registry=r,
        )
        self.heartbeats_sent = Counter(
            "watcher_heartbeats_sent_total", "Heartbeats accepted by SQS (one per heartbeat period)", registry=r
        )
        self.cache_entries = Gauge("watcher_cache_entries", "Objects remembered per kind", ["kind"], registry=r)
        self.synced = Gauge("watcher_synced", "1 once the initial list of the kind is done", ["kind"], registry=r)
        self.endpoint_hints = Counter(
            "watcher_endpoint_hints_total",
            "ENDPOINTS hints whose window closed: queued for SQS, or dropped (the Service left ip mode or is gone)",
            ["outcome"],
            registry=r,
        )
        self.endpoint_changes_coalesced = Counter(
            "watcher_endpoint_changes_coalesced_total",
            "EndpointSlice changes merged into a Service's hint already pending (no message of their own)",
            registry=r,
        )
        self.endpoint_writes_unchanged = Counter(
            "watcher_endpoint_writes_unchanged_total",
            "EndpointSlice writes that changed no target and no waiting endpoint (no hint: watcher.endpoints)",
            registry=r,
        )
        self.endpoint_pending = Gauge(
            "watcher_endpoint_pending_services", "Services with an ENDPOINTS hint waiting for its window", registry=r
        )
        for outcome in ("queued", "dropped"):
            self.endpoint_hints.labels(outcome=outcome)
        for family in (self.deltas_seen, self.dropped_irrelevant):
            family.labels(kind="EndpointSlice")
        self.synced.labels(kind="EndpointSlice").set(0)
        for kind in ("Service", "Node"):
            # Pre-create the label sets so dashboards see zeros rather than missing series.
            for family in (self.deltas_seen, self.deltas_sent, self.deltas_failed, self.dropped_irrelevant):
                family.labels(kind=kind)
            self.synced.labels(kind=kind).set(0)
