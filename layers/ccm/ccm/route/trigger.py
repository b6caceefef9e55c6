"""What starts a route reconcile, and how it reaches the routes queue.

The routes queue (SQS FIFO, ONE message group `routes`) carries two kinds of message body:
- a Node delta (schema v1, ccm.contracts.messages), forwarded by the nodes Lambda through `on_node_delta` when it can
  change routes: a node gone (DELETED), or a node that has pod CIDRs and a providerID but not yet our
  NetworkUnavailable=False/RouteCreated condition. Pod CIDRs and providerID are immutable once set, so a node
  whose routes were confirmed needs nothing until it goes (drift is the periodic pass's job): a watcher resync
  (SYNC of every node) of a routed cluster forwards nothing, while the first list after a watcher start does
  bring unrouted nodes. Repeats collapse in SQS because the deduplication id is derived from the route-relevant
  state (uid, pod CIDRs, providerID), not from the resourceVersion.
- an EventBridge "Scheduled Event" (the periodic safety pass), sent by the schedule rule with the same group.

One group means one reconcile in flight for the whole cluster, so two Lambdas never race on a route table;
every reconcile covers every table and every node, so a batch of triggers is served by a single reconcile.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Final

from ccm.contracts.messages import Delta, InvalidDelta, parse_delta
from ccm.contracts.queues import MessageQueue, OutgoingMessage

log = logging.getLogger(__name__)

ROUTES_GROUP: Final = "routes"
ROUTES_QUEUE_ENV: Final = "ROUTES_QUEUE_URL"


class InvalidTrigger(ValueError):
    """A routes-queue body that is neither a Node delta nor a scheduled event; it belongs in the DLQ."""


@dataclass(frozen=True, slots=True)
class Trigger:
    source: str  # "node" | "schedule"
    key: str  # node name, or the scheduled event's id
    observed_at: float | None = None  # when the watcher saw the node change (end-to-end latency)


def route_dedup_id(delta: Delta, routed: bool = False) -> str | None:
    """The deduplication id to forward this delta with, or None when it cannot change any route (pure).

    routed: the live node already carries our NetworkUnavailable=False/RouteCreated condition."""
    if delta.kind != "Node":
        return None
    if delta.type == "DELETED":
        state = f"{delta.uid}/deleted"
    elif routed:
        return None
    else:
        cidrs = sorted(str(c) for c in delta.object.get("podCIDRs") or [])
        provider_id = str(delta.object.get("providerID") or "")
        if not cidrs or not provider_id:
            return None
        state = f"{delta.uid}/{','.join(cidrs)}/{provider_id}"
    return hashlib.sha256(f"routes/{state}".encode()).hexdigest()


def parse_trigger(body: str) -> Trigger:
    try:
        delta = parse_delta(body)
    except InvalidDelta as delta_err:
        try:
            data: Any = json.loads(body)
        except (TypeError, ValueError):
            raise InvalidTrigger(str(delta_err)) from delta_err
        if (
            isinstance(data, dict)
            and data.get("source") == "aws.events"
            and data.get("detail-type") == "Scheduled Event"
        ):
            return Trigger("schedule", str(data.get("id", "")))
        raise InvalidTrigger(f"neither a Node delta nor a scheduled event: {delta_err}") from delta_err
    if delta.kind != "Node":
        raise InvalidTrigger(f"a {delta.kind} delta on the routes queue")
    return Trigger("node", delta.key, delta.observed_at)


class RoutesFeed:
    """Sends route-relevant Node deltas to the routes queue; a node delta consumer of the nodes Lambda."""

    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue

    def send(self, delta: Delta, dedup_id: str) -> None:
        self.queue.send(OutgoingMessage(delta.to_body(), ROUTES_GROUP, dedup_id))


def on_node_delta(delta: Delta, feed: RoutesFeed, routed: bool = False) -> bool:
    """Entry point for the nodes Lambda: forward the delta if it can change routes. True if it was sent.

    Raises on a failed send, so the nodes Lambda retries the delta (a lost trigger would wait for the periodic
    pass)."""
    dedup_id = route_dedup_id(delta, routed)
    if dedup_id is None:
        return False
    feed.send(delta, dedup_id)
    log.info("route reconcile requested", extra={"node": delta.key, "event_type": delta.type})
    return True
