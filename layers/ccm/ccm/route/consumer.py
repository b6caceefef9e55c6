"""The routes feed as a node delta consumer of the nodes Lambda: the composition root (ccm.wiring.nodes) builds
one `RoutesFeedConsumer` when routes are enabled (ROUTES_QUEUE_URL set) and hands it to the NodeRuntime.
It judges the node as it is NOW (`ctx.node()`, already read by the node controller's own
step, which may just have set the providerID), not only as the watcher saw it: a node initialised by this very
record reaches the routes queue without waiting for the watcher to report the providerID back, and a node whose
routes we already confirmed (its NetworkUnavailable condition) is not forwarded again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ccm.contracts.messages import Delta, trim_node
from ccm.node.runtime import NodeContext
from ccm.route.plan import routes_confirmed
from ccm.route.trigger import RoutesFeed, on_node_delta


@dataclass(frozen=True, slots=True)
class RoutesFeedConsumer:
    queue_url: str

    def __call__(self, delta: Delta, ctx: NodeContext) -> None:
        if delta.kind != "Node":
            return
        routed = False
        if delta.type != "DELETED":
            live = ctx.node()
            if live is not None:
                delta, routed = replace(delta, object=trim_node(live)), routes_confirmed(live)
        on_node_delta(delta, RoutesFeed(ctx.clients.queue(self.queue_url)), routed)
