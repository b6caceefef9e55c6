"""The route reconciler Lambda: a batch of triggers from the routes queue -> ONE level-triggered reconcile.

Serialisation: the routes queue is FIFO with a single message group (ccm.route.trigger), so at most one batch
is in flight for the cluster and no two invocations ever write the same route table concurrently, whatever the
ESM's MaximumConcurrency. Every trigger means "converge everything", so the whole batch is answered by one
reconcile: ten node changes cost one DescribeRouteTables and one LIST nodes.

Records are parsed with Powertools' BatchProcessor rather than the FIFO processor on purpose: order inside the
group does not matter to a level-triggered reconcile, and a malformed body must not hold back the valid ones.
Retries use the queue, never sleep: a malformed body is made visible again at once (it reaches the DLQ after
maxReceiveCount); when the reconcile fails, ONE record of the batch (the most-retried) is kept with the upstream
backoff (5 s doubling to 300 s, ccm.retry) and the others are deleted, since one trigger is enough to try again;
when the reconcile ran out of time (its own budget, or a call refused by the invocation's deadline, ccm.deadline),
one record is kept with no delay, so the next invocation continues at once.
A retried or scheduled trigger makes the pass thorough (SourceDestCheck re-checked on every routed instance).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ccm import deadline
from ccm.batch import hand_back
from ccm.call_metrics import add_call_metrics, add_if_nonzero
from ccm.config import Settings
from ccm.contracts.cloud import CloudClients, Routes
from ccm.contracts.kube import RouteKubeApi
from ccm.contracts.queues import HandedBack
from ccm.logs import log_fields
from ccm.retry import failure_delay
from ccm.route.plan import Network, parse_cluster_cidrs
from ccm.route.reconciler import RouteOutcome, RouteReconciler
from ccm.route.trigger import InvalidTrigger, Trigger, parse_trigger
from ccm.senders import Senders, sender_refusal

# Process-level: the handler's decorators need these at import, before any composition root runs, and Powertools
# reads its own POWERTOOLS_* variables anyway (the defaults keep the metrics valid when they are unset).
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or "route-reconciler")
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "ServerlessCCM")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RouteSettings:
    cluster_name: str
    vpc_id: str
    cluster_cidrs: tuple[Network, ...]
    senders: Senders | None = None

    @classmethod
    def of(cls, settings: Settings) -> RouteSettings:
        """The route controller's view of the settings. Raises ValueError when CLUSTER_CIDRS is empty or invalid:
        routes cannot run without it."""
        return cls(
            cluster_name=settings.cluster_name,
            vpc_id=settings.vpc_id,
            cluster_cidrs=parse_cluster_cidrs(list(settings.cluster_cidrs)),
            senders=settings.senders,
        )


@dataclass(frozen=True, slots=True)
class _Received:
    record: dict[str, Any]
    trigger: Trigger
    attempt: int


class RouteRuntime:
    """Built once per execution environment and reused by warm invocations."""

    def __init__(self, settings: RouteSettings, kube: RouteKubeApi, clients: CloudClients, routes: Routes) -> None:
        """Built by the composition root (ccm.wiring.routes), which picks the driver (`routes`) and the clients."""
        self.settings = settings
        self.clients = clients
        self.routes = routes
        self.reconciler = RouteReconciler(kube, self.routes, settings.cluster_name, settings.cluster_cidrs)
        self.senders: Senders | None = settings.senders  # node triggers: the nodes function only (ccm.senders)

    def handle_batch(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        received: list[_Received] = []

        def parse(record: SQSRecord) -> None:
            try:
                trigger = parse_trigger(record.body)
                # The schedule's events come from EventBridge (the queue policy admits only our rule); a node
                # trigger only from the nodes function, which forwards what it judged against the live Node.
                if trigger.source == "node" and (
                    refused := sender_refusal("Route", "NODE", record.attributes.sender_id, self.senders)
                ):
                    raise InvalidTrigger(refused)
            except InvalidTrigger as err:
                logger.error("rejecting malformed message", extra={"reason": str(err), "message_id": record.message_id})
                metrics.add_metric(name="MalformedMessages", unit=MetricUnit.Count, value=1)
                raise
            attempt = int(record.attributes.approximate_receive_count or 1)
            received.append(_Received(record.raw_event, trigger, attempt))

        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        response: dict[str, Any] = dict(
            process_partial_response(event=event, record_handler=parse, processor=processor, context=context)
        )
        delays = {f["itemIdentifier"]: 0 for f in response.get("batchItemFailures", [])}
        if received:
            with deadline.invocation(deadline.remaining_of(context)):
                keep = self._reconcile(received, context)
            if keep is not None:
                record, delay = keep
                delays[record["messageId"]] = delay
        response["batchItemFailures"] = [{"itemIdentifier": i} for i in delays]
        self._hand_back(event, delays)
        return response

    def full_pass(self, context: Any = None) -> RouteOutcome:
        """A thorough reconcile outside any queue (operators, tests); the schedule goes through the queue."""
        return self.reconciler.reconcile(thorough=True, remaining=deadline.remaining_of(context))

    def _reconcile(self, received: list[_Received], context: Any) -> tuple[dict[str, Any], int] | None:
        """Run the one reconcile for the batch; returns the record to keep (and its delay), if any."""
        started = time.time()
        thorough = any(r.trigger.source == "schedule" or r.attempt > 1 for r in received)
        most_tried = max(received, key=lambda r: r.attempt)
        logger.append_keys(triggers=len(received), thorough=thorough)
        self.clients.counter.reset_thread()
        try:
            outcome = self.reconciler.reconcile(thorough=thorough, remaining=deadline.remaining_of(context))
        except deadline.OutOfTime as err:
            logger.info("route reconcile cut short by the invocation's deadline", extra={"reason": str(err)})
            return most_tried.record, 0
        except Exception:
            logger.exception("route reconcile failed")
            metrics.add_metric(name="RouteReconcileFailed", unit=MetricUnit.Count, value=1)
            return most_tried.record, failure_delay(most_tried.attempt)
        finally:
            figures = add_call_metrics(metrics, self.clients.counter, started)
        for name, value in (("RouteProblems", len(outcome.problems)), ("RouteCallsFailed", len(outcome.failed))):
            add_if_nonzero(metrics, name, value)  # failures only, and only when non-zero
        # What changed and how long it took: log fields (the dashboard's Logs Insights widget), not metrics.
        figures.update(routes_created=outcome.created, routes_replaced=outcome.replaced, routes_deleted=outcome.deleted)
        observed = [r.trigger.observed_at for r in received if r.trigger.observed_at is not None]
        if outcome.changed and observed:
            figures["end_to_end_ms"] = round(max(0.0, (time.time() - min(observed)) * 1000), 1)
        logger.info("route reconcile done", extra=log_fields(figures))  # with `triggers` (appended above)
        if outcome.failed:
            return most_tried.record, failure_delay(most_tried.attempt)
        if outcome.deferred:
            return most_tried.record, 0
        return None

    def _hand_back(self, event: dict[str, Any], delays: dict[str, int]) -> None:
        if not delays:
            return
        by_queue: dict[str, list[HandedBack]] = {}
        for raw in event.get("Records", []):
            if raw["messageId"] in delays:
                by_queue.setdefault(raw["eventSourceARN"], []).append(
                    HandedBack(raw["messageId"], raw["receiptHandle"], delays[raw["messageId"]])
                )
        hand_back(self.clients, by_queue)
