"""The routes feed as a node delta consumer of the nodes Lambda (ccm.node.runtime.NODE_DELTA_CONSUMERS).

Importing this module registers it; functions/nodes/app.py imports it. With routes disabled (ROUTES_QUEUE_URL
empty) it does nothing. It judges the node as it is NOW (`ctx.node()`, already read by the node controller's own
step, which may just have set the providerID), not only as the watcher saw it: a node initialised by this very
record reaches the routes queue without waiting for the watcher to report the providerID back, and a node whose
routes we already confirmed (its NetworkUnavailable condition) is not forwarded again.
"""

from __future__ import annotations

import os
from dataclasses import replace

from ccm.contracts.messages import Delta, trim_node
from ccm.node.runtime import NODE_DELTA_CONSUMERS, NodeContext
from ccm.route.plan import routes_confirmed
from ccm.route.trigger import ROUTES_QUEUE_ENV, RoutesFeed, on_node_delta


def routes_feed_consumer(delta: Delta, ctx: NodeContext) -> None:
    url = os.environ.get(ROUTES_QUEUE_ENV, "")
    if not url or delta.kind != "Node":
        return
    routed = False
    if delta.type != "DELETED":
        live = ctx.node()
        if live is not None:
            delta, routed = replace(delta, object=trim_node(live)), routes_confirmed(live)
    on_node_delta(delta, RoutesFeed(ctx.clients, url), routed)


if routes_feed_consumer not in NODE_DELTA_CONSUMERS:  # idempotent if the module is imported twice
    NODE_DELTA_CONSUMERS.append(routes_feed_consumer)
