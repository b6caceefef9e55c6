"""Load balancer membership as a node delta consumer and a periodic consumer of the nodes Lambda: the composition
root (ccm.wiring.nodes) builds one `Membership` when the membership table and the services queue are configured and
hands its two methods to the NodeRuntime. It judges the node as it is NOW (`ctx.node()`): a node the
node controller just initialised (providerID set by this very record) becomes a member without waiting for the
watcher to report the change back.

Deltas are hints and can be lost (the watcher restarted during an SQS outage across a deletion, a purged DLQ):
the 5-minute safety pass reconciles the table against the LIST of Nodes it already made (no extra LIST), so a
member whose node is gone is removed, and its Services told, within one pass instead of never.

A Node DELETED costs one GET too (shared with the other steps): it removes the member only if the API answers 404
or the name belongs to a Node with another UID.
"""

from __future__ import annotations

from dataclasses import replace

from ccm.contracts.messages import Delta, trim_node
from ccm.contracts.queues import MessageQueue
from ccm.contracts.store import MembershipStore
from ccm.membership.model import DEFAULT_BUCKET_SECONDS
from ccm.membership.updater import MembershipUpdater
from ccm.node.runtime import NodeContext, PassContext


class Membership:
    """One per execution environment (it lives as long as the runtime): its updater's memory of the buckets already
    told survives warm invocations."""

    def __init__(
        self, store: MembershipStore, services_queue: MessageQueue, bucket_seconds: int = DEFAULT_BUCKET_SECONDS
    ) -> None:
        self.updater = MembershipUpdater(store, services_queue, bucket_seconds=bucket_seconds)

    def on_node_delta(self, delta: Delta, ctx: NodeContext) -> None:
        if delta.kind != "Node":
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
        self.updater.on_node_delta(delta)

    def on_safety_pass(self, ctx: PassContext) -> None:
        self.updater.reconcile(ctx.nodes, ctx.list_resource_version)
