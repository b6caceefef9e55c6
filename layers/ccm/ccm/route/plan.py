"""The route controller's decisions, pure: which VPC routes to create, replace or delete, and which Node
condition to write. No I/O here; `ccm.route.reconciler` feeds it what it read and applies what it returns.

Rules (upstream route_controller.go, extended to several cluster-tagged route tables and to IPv6):

- Every pod CIDR of every node that has an instance gets a route to that instance in EVERY cluster table.
- An existing route with that destination is kept when it targets the node's instance; replaced (ReplaceRoute,
  one call) when it is a blackhole or a route of ours (inside a cluster CIDR) to another instance; left alone and
  reported when something else (a gateway, NAT, peering, ...) holds the destination.
- Routes "of ours" are those whose destination lies inside a cluster CIDR. Among them, instance routes whose
  (instance, destination) no node claims (node gone, CIDR changed) and blackholes are deleted. Routes outside the
  cluster CIDRs are never touched, whatever they target.
- A pod CIDR outside every cluster CIDR gets no route: we could never delete it again (upstream creates it and
  leaks it); it is reported on the node instead.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ccm.contracts.cloud import KubeObject, Route, RouteTable
from ccm.contracts.provider_id import instance_id_from_provider_id

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

CONDITION_TYPE = "NetworkUnavailable"
CREATED = ("False", "RouteCreated", "RouteController created a route")
NOT_CREATED = ("True", "NoRouteCreated", "RouteController failed to create a route")


class OpKind(Enum):
    CREATE = "create"
    REPLACE = "replace"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class NodeRoutes:
    """What the planner needs of one Node."""

    name: str
    uid: str
    instance_id: str  # "" when the node has no (EC2) providerID yet
    pod_cidrs: tuple[str, ...]
    network_unavailable: str | None = None  # current status of the NetworkUnavailable condition, if any


@dataclass(frozen=True, slots=True)
class RouteOp:
    kind: OpKind
    route: Route  # create/replace: the wanted route; delete: the route as AWS listed it
    reason: str


@dataclass(frozen=True, slots=True)
class RoutePlan:
    ops: tuple[RouteOp, ...]
    # Nodes that get a NetworkUnavailable condition: they have pod CIDRs and an instance to route to.
    routed_nodes: tuple[str, ...]
    # node -> ((pod CIDR, why no route), ...): found while planning, no AWS call will change them.
    problems: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    kept: int = 0  # routes already right

    def ops_for(self, node: str) -> list[RouteOp]:
        return [op for op in self.ops if op.kind is not OpKind.DELETE and op.route.target_node == node]


def parse_cluster_cidrs(values: Iterable[str]) -> tuple[Network, ...]:
    """The cluster CIDR(s): one, or two of different families (upstream's rule). Raises ValueError."""
    nets = tuple(ipaddress.ip_network(v.strip()) for v in values if v.strip())
    if not nets:
        raise ValueError("no cluster CIDR configured")
    if len(nets) > 2 or (len(nets) == 2 and nets[0].version == nets[1].version):
        raise ValueError(f"cluster CIDRs must be one, or two of different families: {[str(n) for n in nets]}")
    return nets


def node_routes(node: KubeObject) -> NodeRoutes:
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    cidrs = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    condition = _condition(node)
    return NodeRoutes(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        instance_id=instance_id_from_provider_id(str(spec.get("providerID") or "")) or "",
        pod_cidrs=tuple(str(c) for c in cidrs),
        network_unavailable=None if condition is None else str(condition.get("status")),
    )


def routes_confirmed(node: KubeObject) -> bool:
    """The node carries the condition we write once all its routes exist (only ours: a CNI may set False too)."""
    condition = _condition(node) or {}
    return (condition.get("status"), condition.get("reason")) == CREATED[:2]


def _condition(node: KubeObject) -> dict[str, Any] | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == CONDITION_TYPE:
            return dict(cond)
    return None


def _canonical(cidr: str) -> str | None:
    try:
        return str(ipaddress.ip_network(cidr))
    except ValueError:
        return None


def is_ours(destination: str, cluster_cidrs: Sequence[Network]) -> bool:
    """Inside a cluster CIDR (the whole destination, not only its first address as upstream checks)."""
    try:
        net = ipaddress.ip_network(destination)
    except ValueError:
        return False
    return any(net.version == c.version and net.subnet_of(c) for c in cluster_cidrs)  # type: ignore[arg-type]


def plan_routes(
    tables: Sequence[RouteTable], nodes: Sequence[NodeRoutes], cluster_cidrs: Sequence[Network]
) -> RoutePlan:
    desired: dict[str, NodeRoutes] = {}  # canonical destination -> node
    problems: dict[str, list[tuple[str, str]]] = {}
    routed: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.pod_cidrs or not node.instance_id:
            continue  # not allocated or not initialised yet: its next delta brings it back
        routed.append(node.name)
        for cidr in node.pod_cidrs:
            key = _canonical(cidr)
            if key is None:
                problems.setdefault(node.name, []).append((cidr, "not a valid CIDR"))
            elif not is_ours(key, cluster_cidrs):
                problems.setdefault(node.name, []).append((cidr, "outside the cluster CIDRs"))
            elif key in desired:
                problems.setdefault(node.name, []).append((cidr, f"also the pod CIDR of node {desired[key].name}"))
            else:
                desired[key] = node

    creates: list[RouteOp] = []
    deletes: list[RouteOp] = []
    kept = 0
    for table in sorted(tables, key=lambda t: t.route_table_id):
        existing = {k: r for r in table.routes if (k := _canonical(r.destination_cidr)) is not None}
        for key, node in desired.items():
            want = Route(
                name=f"{node.name}-{key}",
                target_node=node.name,
                destination_cidr=key,
                route_table_id=table.route_table_id,
                target_instance=node.instance_id,
            )
            have = existing.get(key)
            if have is None:
                creates.append(RouteOp(OpKind.CREATE, want, "missing"))
            elif have.blackhole:
                # Keep AWS's spelling of the destination: Replace must name the route exactly as it exists.
                creates.append(RouteOp(OpKind.REPLACE, _at(want, have), "blackhole"))
            elif have.target_instance == node.instance_id:
                kept += 1
            elif have.target_instance:
                creates.append(RouteOp(OpKind.REPLACE, _at(want, have), f"pointed at {have.target_instance}"))
            else:
                problems.setdefault(node.name, []).append(
                    (node_cidr(node, key), f"destination already routed elsewhere in {table.route_table_id}")
                )
        for key, have in existing.items():
            if key in desired or not is_ours(key, cluster_cidrs):
                continue
            if have.blackhole:
                deletes.append(RouteOp(OpKind.DELETE, have, "blackhole"))
            elif have.target_instance:
                deletes.append(RouteOp(OpKind.DELETE, have, "no node has this pod CIDR on this instance"))
            # Other targets inside the cluster CIDR (NAT, peering, ...) are someone else's: left alone.
    return RoutePlan(
        # Creates first: a new node's connectivity matters more than tidying; deletes never block creates.
        ops=tuple(creates + deletes),
        routed_nodes=tuple(routed),
        problems={n: tuple(p) for n, p in problems.items()},
        kept=kept,
    )


def _at(want: Route, have: Route) -> Route:
    return Route(
        name=want.name,
        target_node=want.target_node,
        destination_cidr=have.destination_cidr,
        route_table_id=want.route_table_id,
        target_instance=want.target_instance,
    )


def node_cidr(node: NodeRoutes, key: str) -> str:
    """The node's own spelling of a canonical destination (events quote what `kubectl get node` shows)."""
    return next((c for c in node.pod_cidrs if _canonical(c) == key), key)


def condition_patch(node: NodeRoutes, routes_created: bool, now: str) -> dict[str, Any] | None:
    """The nodes/status strategic-merge patch upstream writes, or None when the status is already right."""
    status, reason, message = CREATED if routes_created else NOT_CREATED
    if node.network_unavailable == status:
        return None
    condition = {
        "type": CONDITION_TYPE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        "lastHeartbeatTime": now,
    }
    return {"status": {"conditions": [condition]}}


def go_duration(seconds: float) -> str:
    """A duration the way Go's time.Duration prints it (upstream's event text), to millisecond precision."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, secs = divmod(round(seconds, 3), 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


def failed_route_message(node: NodeRoutes, cidr: str, seconds: float, error: str) -> str:
    return f"Could not create route {node.uid} {cidr} for node {node.name} after {go_duration(seconds)}: {error}"
