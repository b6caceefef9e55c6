"""Load balancer membership as a node delta consumer and a periodic consumer of the nodes Lambda
(ccm.node.runtime.NODE_DELTA_CONSUMERS / PERIODIC_CONSUMERS).

Importing this module registers both; functions/nodes/app.py imports it. Without MEMBERSHIP_TABLE and
SERVICES_QUEUE_URL in the environment it does nothing. It judges the node as it is NOW (`ctx.node()`): a node the
node controller just initialised (providerID set by this very record) becomes a member without waiting for the
watcher to report the change back.

Deltas are hints and can be lost (the watcher restarted during an SQS outage across a deletion, a purged DLQ):
the 5-minute safety pass reconciles the table against the LIST of Nodes it already made (no extra LIST), so a
member whose node is gone is removed, and its Services told, within one pass instead of never.

A Node DELETED costs one GET too (shared with the other steps): it removes the member only if the API answers 404
or the name belongs to a Node with another UID.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace

from ccm.membership.model import DEFAULT_BUCKET_SECONDS
from ccm.membership.store import MembershipStore
from ccm.membership.updater import MembershipUpdater
from ccm.messages import Delta, trim_node
from ccm.node.runtime import NODE_DELTA_CONSUMERS, PERIODIC_CONSUMERS, NodeContext, PassContext

_updaters: dict[tuple[str, str], MembershipUpdater] = {}
_lock = threading.Lock()


def _updater(table: str, queue_url: str, ctx: NodeContext | PassContext) -> MembershipUpdater:
    """One per execution environment: its memory of the buckets already told survives warm invocations."""
    with _lock:
        key = (table, queue_url)
        if key not in _updaters:
            bucket = int(os.environ.get("HOST_UPDATE_BUCKET_SECONDS") or DEFAULT_BUCKET_SECONDS)
            store = MembershipStore(table, ctx.clients)
            _updaters[key] = MembershipUpdater(store, ctx.clients.client("sqs"), queue_url, bucket_seconds=bucket)
        return _updaters[key]


def membership_consumer(delta: Delta, ctx: NodeContext) -> None:
    table, queue_url = os.environ.get("MEMBERSHIP_TABLE", ""), os.environ.get("SERVICES_QUEUE_URL", "")
    if not table or not queue_url or delta.kind != "Node":
        return
    # A DELETED is a hint like any other (a forged or stale one would pull a live node out of every load
    # balancer until the safety pass): the member goes only when the API confirms it, by a 404 or by the name now
    # being another Node's (another UID). Otherwise the live Node is what is judged, as for any other delta.
    live = ctx.node()
    live_uid = str(((live or {}).get("metadata") or {}).get("uid") or "")
    if live is None:
        delta = replace(delta, type="DELETED")
    elif not (delta.type == "DELETED" and delta.uid and live_uid and live_uid != delta.uid):
        rv = str((live.get("metadata") or {}).get("resourceVersion") or delta.resource_version)
        kind = "MODIFIED" if delta.type == "DELETED" else delta.type
        delta = replace(delta, type=kind, object=trim_node(live), resource_version=rv)
    _updater(table, queue_url, ctx).on_node_delta(delta)


def membership_pass(ctx: PassContext) -> None:
    table, queue_url = os.environ.get("MEMBERSHIP_TABLE", ""), os.environ.get("SERVICES_QUEUE_URL", "")
    if not table or not queue_url:
        return
    _updater(table, queue_url, ctx).reconcile(ctx.nodes, ctx.list_resource_version)


if membership_consumer not in NODE_DELTA_CONSUMERS:  # idempotent if the module is imported twice
    NODE_DELTA_CONSUMERS.append(membership_consumer)
if membership_pass not in PERIODIC_CONSUMERS:
    PERIODIC_CONSUMERS.append(membership_pass)
