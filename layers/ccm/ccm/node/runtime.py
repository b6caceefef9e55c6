"""The nodes Lambda: one record of the nodes FIFO queue at a time, dispatched by what it is.

    Node delta (watcher, group = node name)     -> our step: initialise / lifecycle of that node (0 AWS calls
                                                   unless tainted or Ready=Unknown), then the delta consumers
    EC2 state change (EventBridge rule)         -> lifecycle of the node(s) whose providerID is that instance
    Scheduled Event (EventBridge, every 5 min)  -> the safety pass over all nodes (one filtered DescribeInstances
                                                   per 200 nodes), then every periodic consumer
    anything else                               -> logged with the reason, made visible at once -> DLQ

Addresses of initialised nodes are refreshed by the safety pass and by `running` events (upstream refreshes every
5 minutes), not on every Node delta: that would cost a DescribeInstances per Node change.

Extension points (load-balancer membership and routes plug in here): the composition root (ccm.wiring.nodes)
passes the consumers to the constructor; nothing registers itself at import::

    def on_node_delta(delta: Delta, ctx: NodeContext) -> None: ...   # e.g. ccm.membership.consumer.Membership
    def on_safety_pass(ctx: PassContext) -> None: ...                # e.g. the membership safety pass

    NodeRuntime(settings, kube, clients, instances,  # instances: a ccm.contracts.cloud.Instances (the EC2 driver)
                delta_consumers=[on_node_delta], periodic_consumers=[on_safety_pass])

Contract for consumers:
- They run after our own step, in list order, for every Node delta (ADDED, MODIFIED, SYNC, DELETED and any
  future type), so they see the node already initialised (providerID set). `ctx.node()` is the live Node, read
  once per record and shared (it reflects our writes; None when gone or deleted by us); `ctx.clients` counts
  AWS calls per record; `ctx.attempt` is the receive count.
- Each one is isolated: an exception does not stop the others; after all ran, the record is retried with the
  queue's visibility (ccm.retry: a `RetryError` is a wait, logged at INFO and not counted as a failure, unless
  another step failed; anything else backs off 5 s doubling to 300 s), re-running every step. Consumers must
  therefore be level-triggered and idempotent.
- EC2 state-change events do not reach delta consumers: a Node we delete comes back as a DELETED delta from the
  watcher. Periodic consumers get `ctx.nodes` (the listed nodes minus those the pass deleted) and
  `ctx.instances` (node name -> InstanceMetadata, or None when no instance was found) and
  `ctx.list_resource_version` (the LIST's resourceVersion: a change newer than it is not reflected in `ctx.nodes`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ccm.batch import NO_FACTS, BatchFacts, Deferred, FifoBatchRuntime
from ccm.call_metrics import add_call_metrics, add_if_nonzero
from ccm.config import Settings
from ccm.contracts.cloud import CloudClients, InstanceMetadata, Instances, KubeObject, RetryError
from ccm.contracts.messages import Delta
from ccm.contracts.provider_id import instance_id_from_provider_id
from ccm.k8s.kube import Kube
from ccm.logs import log_fields
from ccm.node import model as m
from ccm.node.api import NodeApi, describe_error
from ccm.node.events import InstanceStateChange, InvalidNodeMessage, SafetyPass, parse_node_message
from ccm.node.sync import NodeSync, SyncResult
from ccm.retry import FAILURE_BASE_SECONDS, Retry, retry_for
from ccm.senders import Senders, sender_refusal

# Process-level: the handler's decorators need these at import, before any composition root runs, and Powertools
# reads its own POWERTOOLS_* variables anyway (the defaults keep the metrics valid when they are unset).
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or "node-reconciler")
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "ServerlessCCM")

# An instance not visible yet (EC2 is eventually consistent) is retried at 5, 10, 20 s; after that the Warning
# event stands and the safety pass retries every 5 minutes, instead of parking a legitimate delta in the DLQ.
MAX_INIT_ATTEMPTS: Final = 4


@dataclass(slots=True)
class NodeContext:
    """What a Node delta consumer gets besides the delta."""

    settings: Settings
    kube: Kube
    api: NodeApi
    clients: CloudClients
    instances: Instances
    key: str
    attempt: int = 1
    _node: KubeObject | None = None
    _read: bool = False
    end_to_end_ms: float | None = None  # set when this record initialised the Node: the "processed" line has it

    def node(self) -> KubeObject | None:
        """The live Node (one GET per record, shared by every step)."""
        if not self._read:
            self.set_node(self.api.get_node(self.key))
        return self._node

    def set_node(self, node: KubeObject | None) -> None:
        self._node, self._read = node, True


@dataclass(slots=True)
class PassContext:
    """What a periodic consumer gets: the state of the cluster as the safety pass saw and left it."""

    settings: Settings
    kube: Kube
    api: NodeApi
    clients: CloudClients
    instances_driver: Instances
    nodes: list[KubeObject] = field(default_factory=list)
    instances: dict[str, InstanceMetadata | None] = field(default_factory=dict)
    attempt: int = 1
    list_resource_version: str = ""  # of the LIST `nodes` came from: anything newer was not in it


NodeDeltaConsumer = Callable[[Delta, NodeContext], None]
PeriodicConsumer = Callable[[PassContext], None]


class StepsFailed(Exception):
    """One or more steps of a record failed or wait (each was logged); the record is retried as `retry` says."""

    def __init__(self, message: str, retry: Retry) -> None:
        super().__init__(message)
        self.retry = retry


class NodeRuntime(FifoBatchRuntime[BatchFacts]):
    """Built once per execution environment and reused by warm invocations."""

    def __init__(
        self,
        settings: Settings,
        kube: Kube,
        clients: CloudClients,
        instances: Instances,
        *,
        delta_consumers: Sequence[NodeDeltaConsumer] = (),
        periodic_consumers: Sequence[PeriodicConsumer] = (),
    ) -> None:
        """Built by the composition root (ccm.wiring.nodes), which picks the instances driver and the consumers."""
        super().__init__(clients)
        self.settings = settings
        self.kube = kube
        self.api = NodeApi(kube)
        self.instances = instances
        self.sync = NodeSync(self.api, self.instances)
        # Run after our own step, in this order (see the module docstring for their contract).
        self._delta_consumers = list(delta_consumers)
        self._periodic_consumers = list(periodic_consumers)
        self.senders: Senders | None = settings.senders  # who may send Node deltas (ccm.senders)

    @property
    def delta_consumers(self) -> list[NodeDeltaConsumer]:
        return self._delta_consumers

    @property
    def periodic_consumers(self) -> list[PeriodicConsumer]:
        return self._periodic_consumers

    # -- one record -----------------------------------------------------------------------------------------
    def batch_facts(self, event: dict[str, Any]) -> BatchFacts:
        return NO_FACTS  # each record re-reads the Node or EC2 itself: nothing to learn from the rest of the batch

    def handle_record(self, record: SQSRecord, batch: BatchFacts) -> None:
        started = time.time()
        attempt = int(record.attributes.approximate_receive_count or 1)
        try:
            message = parse_node_message(record.body)
            refused = (
                sender_refusal("Node", message.type, record.attributes.sender_id, self.senders)
                if isinstance(message, Delta)
                else None  # EventBridge's: the queue policy admits only our rules; their handling re-reads EC2
            )
            if refused:
                raise InvalidNodeMessage(refused)
        except InvalidNodeMessage as err:
            logger.error("rejecting malformed message", extra={"reason": str(err), "message_id": record.message_id})
            metrics.add_metric(name="MalformedMessages", unit=MetricUnit.Count, value=1)
            self.defer(record.message_id, 0)
            raise
        self.clients.counter.reset_thread()
        logger.remove_keys(["kind", "event_type", "resource_version"])  # keys of the previous record
        ctx: NodeContext | None = None
        try:
            if isinstance(message, Delta):
                logger.set_correlation_id(f"{message.key}/{message.uid}")
                logger.append_keys(kind="Node", event_type=message.type, resource_version=message.resource_version)
                ctx = self.context_for(message.key, attempt)
                self.on_delta(message, attempt, ctx)
            elif isinstance(message, InstanceStateChange):
                logger.set_correlation_id(f"{message.instance_id}/{message.event_id}")
                logger.append_keys(kind="EC2StateChange", event_type=message.state)
                self.on_instance_event(message)
            else:
                logger.set_correlation_id(f"pass/{message.event_id}")
                logger.append_keys(kind="SafetyPass")
                self.on_safety_pass(message, attempt)
        except Exception as err:
            retry = _retry(err, attempt)
            self.defer(record.message_id, retry.delay_seconds)
            if retry.waiting_on is not None:
                metrics.add_metric(name="NodeRecordWaiting", unit=MetricUnit.Count, value=1)
                logger.info(
                    "waiting",
                    extra={"waiting_on": retry.waiting_on, "retry_in_seconds": retry.delay_seconds, "attempt": attempt},
                )
                raise Deferred(f"waiting: {retry.waiting_on}") from err
            metrics.add_metric(name="NodeRecordFailed", unit=MetricUnit.Count, value=1)
            logger.warning("record failed", extra={"error": describe_error(err), "attempt": attempt})
            raise
        finally:
            figures = add_call_metrics(metrics, self.clients.counter, started)
            if ctx is not None and ctx.end_to_end_ms is not None:
                figures["end_to_end_ms"] = ctx.end_to_end_ms  # the dashboard's node initialisation percentiles
            logger.info("processed", extra=log_fields(figures))

    # -- Node deltas --------------------------------------------------------------------------------------------
    def context_for(self, key: str, attempt: int = 1) -> NodeContext:
        return NodeContext(self.settings, self.kube, self.api, self.clients, self.instances, key, attempt)

    def on_delta(self, delta: Delta, attempt: int = 1, ctx: NodeContext | None = None) -> NodeContext:
        ctx = ctx if ctx is not None else self.context_for(delta.key, attempt)
        errors: list[tuple[str, Exception]] = []
        if delta.type != "DELETED":  # a deleted node needs nothing from us; consumers still hear of it
            try:
                self._own_step(delta, ctx)
            except Exception as err:
                errors.append(("node-controller", err))
        for consumer in self.delta_consumers:
            try:
                consumer(delta, ctx)
            except Exception as err:
                errors.append((getattr(consumer, "__qualname__", repr(consumer)), err))
        _raise_collected(errors, attempt)
        return ctx

    def _own_step(self, delta: Delta, ctx: NodeContext) -> None:
        node = ctx.node()
        if node is None:
            return
        result = self.sync.sync_one(node, trust_kubelet=True)
        ctx.set_node(result.node)
        self._record(result)
        if result.retry and ctx.attempt < MAX_INIT_ATTEMPTS:
            # EC2 is eventually consistent: a wait of 5 s doubling (ccm.retry).
            raise RetryError(f"no instance found for node {result.name} yet", FAILURE_BASE_SECONDS)
        if result.initialised:  # watcher observed -> Node initialised (log only: a metric would bill every hour)
            ctx.end_to_end_ms = round(max(0.0, (time.time() - delta.observed_at) * 1000), 1)

    # -- EC2 state-change events --------------------------------------------------------------------------------
    def on_instance_event(self, event: InstanceStateChange) -> list[SyncResult]:
        """The event is only a hint: the nodes of that instance are re-judged on a fresh DescribeInstances (events
        may arrive late or out of order). A `running` instance also gets its addresses refreshed: a stop/start
        changes the public IP."""
        nodes = [
            n for n in self.api.list_nodes() if instance_id_from_provider_id(m.provider_id(n)) == event.instance_id
        ]
        if not nodes:
            logger.info("no node for this instance", extra={"instance_id": event.instance_id})
            return []
        refresh = event.state == "running"
        lookup = self.sync.lookup(nodes, refresh=refresh)
        results = [self.sync.sync(node, lookup, refresh=refresh) for node in nodes]
        for result in results:
            self._record(result)
        return results

    # -- the safety pass ----------------------------------------------------------------------------------------
    def on_safety_pass(self, event: SafetyPass, attempt: int = 1) -> PassContext:
        """Every node, one batched lookup: deletes dead NotReady nodes whose events were lost, taints stopped
        ones, initialises tainted ones, refreshes addresses. A failing node is logged and counted, never fails
        the pass (the next one is 5 minutes away); consumer failures do fail the record."""
        nodes, list_rv = self.api.list_nodes_at()
        lookup = self.sync.lookup(nodes, refresh=True)
        kept: list[KubeObject] = []
        failed = 0
        for node in nodes:
            try:
                result = self.sync.sync(node, lookup, refresh=True)
            except Exception as err:
                failed += 1
                logger.warning("safety pass: node failed", extra={"node": m.name(node), "error": describe_error(err)})
                kept.append(node)
                continue
            self._record(result)
            if result.node is not None:
                kept.append(result.node)
        # The node count is logged (every 5 minutes: a metric would bill every hour); failures only when any.
        logger.append_keys(safety_pass_nodes=len(nodes), safety_pass_node_failures=failed)
        add_if_nonzero(metrics, "SafetyPassNodeFailures", failed)
        ctx = PassContext(
            self.settings, self.kube, self.api, self.clients, self.instances, kept, dict(lookup), attempt, list_rv
        )
        errors: list[tuple[str, Exception]] = []
        for consumer in self.periodic_consumers:
            try:
                consumer(ctx)
            except Exception as err:
                errors.append((getattr(consumer, "__qualname__", repr(consumer)), err))
        _raise_collected(errors, attempt)
        return ctx

    def _record(self, result: SyncResult) -> None:
        plan = result.plan
        if result.deleted:
            metrics.add_metric(name="NodesDeleted", unit=MetricUnit.Count, value=1)
        # Initialisations and address refreshes are routine: the "node synced" line below carries them (with the
        # init latency), and the "processed" line's end_to_end_ms charts the initialisations; a metric each would bill
        # their hours too.
        if plan.events and plan.events[0].type == "Warning":
            metrics.add_metric(name="NodeSyncWarnings", unit=MetricUnit.Count, value=1)
        if plan.writes or plan.events:
            logger.info(
                "node synced",
                extra={
                    "node": result.name,
                    "lifecycle": plan.lifecycle.value,
                    "initialised": result.initialised,
                    "deleted": result.deleted,
                    "addresses_written": result.addresses_written,
                    "init_latency_s": _age_seconds(result.node) if result.initialised else None,
                    "events": [e.reason for e in plan.events],
                },
            )


def _retry(err: Exception, attempt: int) -> Retry:
    return err.retry if isinstance(err, StepsFailed) else retry_for(err, attempt)


def _raise_collected(errors: list[tuple[str, Exception]], attempt: int) -> None:
    """The record waits only if every failed step waits; it comes back at the earliest delay any step asked."""
    if not errors:
        return
    retries = [_retry(err, attempt) for _, err in errors]
    for (step, err), retry in zip(errors, retries, strict=True):
        if retry.waiting_on is None:
            logger.warning("step failed", extra={"step": step, "error": describe_error(err)})
    delay = min(r.delay_seconds for r in retries)
    waits = [r.waiting_on for r in retries if r.waiting_on is not None]
    retry = Retry(delay, "; ".join(waits) if len(waits) == len(retries) else None)
    message = "; ".join(f"{step}: {describe_error(err)}" for step, err in errors)
    raise StepsFailed(message, retry) from errors[0][1]


def _age_seconds(node: KubeObject | None) -> float | None:
    stamp = m.meta(node or {}).get("creationTimestamp")
    if not stamp:
        return None
    created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return max(0.0, time.time() - created.timestamp())
