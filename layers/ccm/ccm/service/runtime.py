"""What the service reconciler Lambda needs per record: parse, reconcile, measure, and schedule retries.

Retries are expressed with the queue, never by sleeping (ccm.retry): a failed record's visibility timeout is set
to the upstream backoff (5 s doubling to 300 s, by ApproximateReceiveCount); a wait on AWS (RetryError: a security
group still held, a load balancer still provisioning) is not a failure: it is logged at INFO with what is waited
on, counted in ReconcileWaiting, and retried at its own delay doubling to 300 s. The records Powertools skipped
after it in the same FIFO group get the same delay, so the group resumes as one. A malformed body is made visible
again at once, so it reaches the DLQ after maxReceiveCount quickly.

BURST_CREATIONS (5) or more Services created at once are a burst (ccm.contracts.messages says why 5): counted in the
batch (ServiceBatch.creations, once per batch and handed to each record), or by the watcher, which sees the whole
burst (Delta.burst on a creation; a burst's first messages often come one per batch). Their first passes stop once
the hostname is written (PassFlags.hostname_first) and come back after ccm.retry.CONTINUATION_DELAY_SECONDS for the
rest, logged at INFO and neither a failure nor a wait.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ccm.batch import BatchFacts, Deferred, FifoBatchRuntime
from ccm.call_metrics import add_call_metrics
from ccm.config import Settings
from ccm.contracts.cloud import CloudClients, LoadBalancer, PassFlags
from ccm.contracts.messages import (
    BURST_CREATIONS,
    ENDPOINTS,
    HEARTBEAT,
    REPAIR,
    Delta,
    InvalidDelta,
    hosts_delay,
    parse_delta,
)
from ccm.logs import log_fields
from ccm.retry import retry_for, scaled
from ccm.senders import Senders, sender_refusal
from ccm.service.reconciler import Outcome, ServiceReconciler, SyncFailed

# Process-level: the handler's decorators need these at import, before any composition root runs, and Powertools
# reads its own POWERTOOLS_* variables anyway (the defaults keep the metrics valid when they are unset).
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or "service-reconciler")
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "ServerlessCCM")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceBatch(BatchFacts):
    """What a service record learns from its batch."""

    creations: int  # Services (message groups) with an ADDED delta in the batch: BURST_CREATIONS or more is a burst
    # ENDPOINTS hints a later pass of the same batch covers (`superseded_in`): answered without a pass of their own.
    superseded: frozenset[str] = frozenset()


class ServiceRuntime(FifoBatchRuntime[ServiceBatch]):
    """Built once per execution environment and reused by warm invocations."""

    def __init__(
        self, settings: Settings, clients: CloudClients, reconciler: ServiceReconciler, balancer: LoadBalancer
    ) -> None:
        """Built by the composition root (ccm.wiring.services.build_service_runtime)."""
        super().__init__(clients)
        self.settings = settings
        # The nodes Lambda's coalescing bucket (same variable): the longest a HOSTS message may wait.
        self.host_bucket_seconds = settings.host_bucket_seconds
        # Who may send which kind of message to this queue (ccm.senders; from the template's role ids).
        self.senders: Senders | None = settings.senders
        self.balancer = balancer
        self.reconciler = reconciler

    def batch_facts(self, event: dict[str, Any]) -> ServiceBatch:
        return ServiceBatch(creations=creations_in(event), superseded=superseded_in(event, self.senders))

    def handle_record(self, record: SQSRecord, batch: ServiceBatch) -> None:
        """Parse, delegate, report: each step is one method below, and the decisions are pure functions."""
        started = time.time()
        delta = self.accept(record, started)
        if delta.type == HEARTBEAT:
            self.on_heartbeat(delta, started)
            return
        if record.message_id in batch.superseded:
            # Every pass re-reads the slices: the later record of this Service in the batch converges the targets.
            logger.info("superseded by a later pass of the batch", extra={"service_key": delta.key})
            return
        self.defer_for_bucket(record, delta, started)
        attempt = attempt_of(record, delta)
        bind_log_keys(record, delta, started)
        flags = pass_flags(delta, attempt, batch.creations)
        outcome, figures = self.reconcile(record, delta, flags, attempt, started)
        self.report(record, delta, outcome, figures)

    def accept(self, record: SQSRecord, started: float) -> Delta:
        """The record's delta, from a sender allowed to send it; a malformed one is made visible at once (it reaches
        the DLQ after maxReceiveCount quickly)."""
        try:
            delta = parse_delta(record.body)
            refused = sender_refusal(delta.kind, delta.type, record.attributes.sender_id, self.senders)
            if refused:
                raise InvalidDelta(refused)
            return delta
        except InvalidDelta as err:
            logger.error("rejecting malformed message", extra={"reason": str(err), "message_id": record.message_id})
            metrics.add_metric(name="MalformedMessages", unit=MetricUnit.Count, value=1)
            self.defer(record.message_id, 0)
            raise

    def defer_for_bucket(self, record: SQSRecord, delta: Delta, started: float) -> None:
        """A host update waits for the end of its coalescing bucket (ccm.membership.updater); meanwhile every change
        of the bucket is deduplicated into this very message. Not a failure: nothing is counted."""
        wait = hosts_delay(delta, started, self.host_bucket_seconds)
        if wait > 0:
            delay = max(1, math.ceil(wait))
            self.defer(record.message_id, delay)
            raise Deferred(f"host update deferred {delay} s")

    def reconcile(
        self, record: SQSRecord, delta: Delta, flags: PassFlags, attempt: int, started: float
    ) -> tuple[Outcome, dict[str, Any]]:
        """One pass and its call figures; a failure sets the record's retry delay (a wait on AWS is not a failure)
        and is re-raised."""
        self.clients.counter.reset_thread()
        try:
            outcome = self.reconciler.reconcile(delta, flags)
        except SyncFailed as err:
            retry = retry_for(err, attempt)
            if retry.waiting_on is not None:
                self.defer(record.message_id, retry.delay_seconds)
                metrics.add_metric(name="ReconcileWaiting", unit=MetricUnit.Count, value=1)
                logger.info(
                    "waiting on AWS",
                    extra={"waiting_on": retry.waiting_on, "retry_in_seconds": retry.delay_seconds, "attempt": attempt},
                )
                raise Deferred(f"waiting on AWS: {retry.waiting_on}") from err
            self.defer(record.message_id, err.retry_after or retry.delay_seconds)
            metrics.add_metric(name="ReconcileFailed", unit=MetricUnit.Count, value=1)
            raise
        except Exception as err:
            # Not reported by the reconciler (e.g. the Service could not even be read): say so here, and back off
            # like any failure instead of coming back at once (Powertools logs record failures at DEBUG only).
            logger.warning("reconcile failed", extra={"service_key": delta.key, "error": repr(err), "attempt": attempt})
            self.defer(record.message_id, retry_for(err, attempt).delay_seconds)
            metrics.add_metric(name="ReconcileFailed", unit=MetricUnit.Count, value=1)
            raise
        finally:
            figures = add_call_metrics(metrics, self.clients.counter, started)
        return outcome, figures

    def report(self, record: SQSRecord, delta: Delta, outcome: Outcome, figures: dict[str, Any]) -> None:
        """The pass's metrics and its "reconciled" line; a pass that published the hostname first comes back."""
        done = time.time()  # a success is the "reconciled" line below (log only: a metric would bill every hour)
        if outcome.invalid:
            metrics.add_metric(name="InvalidServiceConfig", unit=MetricUnit.Count, value=1)
        if outcome.refused:
            metrics.add_metric(name="HintedDeletesRefused", unit=MetricUnit.Count, value=len(outcome.refused))
        if outcome.status_written:
            # Watcher observed -> status written: the dashboard's end to end percentiles (Logs Insights).
            written = outcome.status_written_at or done
            figures["end_to_end_ms"] = round(max(0.0, (written - delta.observed_at) * 1000), 1)
        continued = outcome.continue_in is not None
        logger.info(
            "reconciled",
            extra=log_fields(
                {
                    "action": outcome.action.value,
                    "reason": outcome.reason,
                    "status_written": outcome.status_written,
                    "continued": continued,
                }
                | figures
            ),
        )
        if outcome.continue_in is not None:
            # Not a failure (no metric, no Warning): the hostname is out; the rest comes with the next receive.
            delay = scaled(outcome.continue_in)
            self.defer(record.message_id, delay)
            logger.info("the pass continues later", extra={"retry_in_seconds": delay})
            raise Deferred(f"continues in {delay} s")

    @staticmethod
    def on_heartbeat(delta: Delta, started: float) -> None:
        """The watcher is alive; `watcher_lag_ms` = its send time to now (queue backlog + ESM pickup). No Kubernetes
        or AWS call and no custom metric: the silence alarm watches the services queue's deleted messages (free
        AWS/SQS metric; a heartbeat processed is one deleted), the dashboard's lag widget reads this INFO line."""
        lag_ms = round(max(0.0, (started - delta.observed_at) * 1000), 1)
        logger.info(
            "watcher heartbeat",
            extra={"watcher_lag_ms": lag_ms, "replica": delta.object.get("replica"), "period": delta.resource_version},
        )


def attempt_of(record: SQSRecord, delta: Delta) -> int:
    """Pure: which attempt at this delta the record is (a host update's bucket deferral took one receive)."""
    attempt = int(record.attributes.approximate_receive_count or 1)
    return attempt - 1 if delta.type == "HOSTS" else attempt


def pass_flags(delta: Delta, attempt: int, batch_creations: int) -> PassFlags:
    """Pure: how thorough this pass is. A retry means an earlier attempt may have crashed between two AWS calls, so it
    looks for orphans too and reads everything again instead of trusting the checkpoint of what was applied."""
    return PassFlags(
        thorough=attempt > 1 or delta.type in ("SYNC", "DELETED"),
        check_attributes=delta.type not in ("HOSTS", "ENDPOINTS"),  # host and endpoint updates touch only targets
        trust_applied=attempt == 1 and not delta.object.get(REPAIR),
        # Among other creations: hostname first, the rest after the burst's creations (a retry too: its rest would
        # take the bucket's tokens from the CreateLoadBalancer calls still waiting).
        hostname_first=max(batch_creations, delta.burst if delta.type == "ADDED" else 0) >= BURST_CREATIONS,
        attempt=attempt,
    )


def bind_log_keys(record: SQSRecord, delta: Delta, started: float) -> None:
    """Every line of this record names its Service, delta and how long the message waited in the queue."""
    logger.set_correlation_id(f"{delta.key}/{delta.uid}")
    logger.append_keys(kind=delta.kind, event_type=delta.type, resource_version=delta.resource_version)
    sent_ms = int(record.attributes.sent_timestamp or started * 1000)
    logger.append_keys(queue_wait_ms=max(0, started * 1000 - sent_ms))  # log only: a metric bills every hour


def superseded_in(event: dict[str, Any], senders: Senders | None) -> frozenset[str]:
    """Pure: the message ids of ENDPOINTS hints followed, in the same batch and message group, by a valid record that
    makes a pass of the Service (another hint, or a Service delta: every pass re-reads the slices). A rolling update
    queues a Service's hints behind its running pass; the batch then needs one pass, not one per hint. A later
    record that is malformed or from a sender not allowed to send it supersedes nothing."""
    last_pass: dict[str, int] = {}
    hints: list[tuple[int, str, str]] = []
    for index, raw in enumerate(event.get("Records", [])):
        attributes = raw.get("attributes") or {}
        try:
            delta = parse_delta(raw.get("body") or "")
        except InvalidDelta:
            continue
        if delta.kind != "Service" or sender_refusal(delta.kind, delta.type, attributes.get("SenderId"), senders):
            continue
        group = str(attributes.get("MessageGroupId", ""))
        if delta.type in (ENDPOINTS, "ADDED", "MODIFIED", "SYNC"):
            last_pass[group] = index
        if delta.type == ENDPOINTS:
            hints.append((index, group, str(raw.get("messageId", ""))))
    return frozenset(message_id for index, group, message_id in hints if last_pass.get(group, index) > index)


def creations_in(event: dict[str, Any]) -> int:
    """Services (message groups) with an ADDED delta among the batch's records."""
    groups: set[str] = set()
    for raw in event.get("Records", []):
        try:
            if parse_delta(raw.get("body") or "").type == "ADDED":
                groups.add(str((raw.get("attributes") or {}).get("MessageGroupId", "")))
        except InvalidDelta:
            continue  # handle_record rejects it
    return len(groups)
