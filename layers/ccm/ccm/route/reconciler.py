"""One level-triggered route reconcile over every cluster-tagged route table: read, plan (pure), apply.

Reads: LIST nodes (the node set is what routes converge to; a delta only says "look again") and one filtered
DescribeRouteTables. Writes, in this order: SourceDestCheck off for instances about to receive routes (read
first, modified only when on), creates and replaces, deletes, then the NetworkUnavailable condition of each
routed node (skipped when already right) and a Warning FailedToCreateRoute per pod CIDR that got no route.

Two kinds of failure, treated differently:
- `problems`: found by the planner (a pod CIDR outside the cluster CIDRs, a destination held by a NAT route, ...).
  Retrying cannot fix them, so they produce events and the condition but no retry; the periodic pass re-checks.
- `failed`: an AWS call failed (throttling, limits, a vanished instance). The caller retries with backoff.
A reconcile that runs out of time stops applying (`deferred`) and is continued at once by the caller; nodes with
unapplied operations get no condition yet, so nothing is reported before it was tried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ccm.contracts.cloud import Routes
from ccm.contracts.kube import RouteKubeApi
from ccm.errors import error_text
from ccm.k8s.kube import now
from ccm.route import plan as p

log = logging.getLogger(__name__)

# Seconds kept back from the Lambda's remaining time for conditions and events after the last route call.
RESERVE_SECONDS = 10.0


class NoRouteTables(RuntimeError):
    """No route table carries the cluster tag in the VPC: nothing can be routed (a configuration error)."""


@dataclass(slots=True)
class RouteOutcome:
    tables: int = 0
    nodes: int = 0
    kept: int = 0
    created: int = 0
    replaced: int = 0
    deleted: int = 0
    deferred: int = 0
    conditions_written: int = 0
    events: int = 0
    problems: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.replaced or self.deleted)


class RouteReconciler:
    def __init__(
        self,
        kube: RouteKubeApi,
        routes: Routes,
        cluster_name: str,
        cluster_cidrs: Sequence[p.Network],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.routes = routes
        self.cluster_name = cluster_name
        self.cluster_cidrs = tuple(cluster_cidrs)
        self.clock = clock

    def reconcile(self, *, thorough: bool = False, remaining: Callable[[], float] | None = None) -> RouteOutcome:
        """thorough: also re-check SourceDestCheck on every routed instance (the periodic pass and retries)."""
        nodes = [p.node_routes(n) for n in self.kube.list_nodes()]
        tables = self.routes.list_route_tables(self.cluster_name)
        if not tables:
            raise NoRouteTables(f"no route table tagged kubernetes.io/cluster/{self.cluster_name} in the VPC")
        plan = p.plan_routes(tables, nodes, self.cluster_cidrs)
        out = RouteOutcome(tables=len(tables), nodes=len(nodes), kept=plan.kept)
        by_name = {n.name: n for n in nodes}
        # node -> {pod CIDR: (error, seconds)}: one event per CIDR even when several tables failed.
        failures: dict[str, dict[str, tuple[str, float]]] = {}
        for name, problems in plan.problems.items():
            for cidr, why in problems:
                failures.setdefault(name, {})[cidr] = (why, 0.0)
                out.problems.append(f"{name} {cidr}: {why}")

        targets = {op.route.target_instance for op in plan.ops if op.kind is not p.OpKind.DELETE}
        if thorough:
            targets |= {by_name[n].instance_id for n in plan.routed_nodes}
        unusable = self.routes.disable_source_dest_check(sorted(targets)) if targets else {}

        unsettled: set[str] = set()
        for op in plan.ops:
            node = by_name.get(op.route.target_node)
            if remaining is not None and remaining() < RESERVE_SECONDS:
                out.deferred += 1
                if node is not None:
                    unsettled.add(node.name)
                continue
            where = f"{op.route.destination_cidr} in {op.route.route_table_id}"
            if node is not None and op.route.target_instance in unusable:
                # A missing or terminated instance: retrying cannot help, the node lifecycle controller will.
                error, seconds = unusable[op.route.target_instance], 0.0
                out.problems.append(f"{node.name} {where}: {error}")
            else:
                failed, seconds = self._apply(op, out)
                if failed is None:
                    continue
                error = failed
                out.failed.append(f"{op.kind.value} {where}: {error}")
            if node is not None and op.kind is not p.OpKind.DELETE:
                cidr = p.node_cidr(node, op.route.destination_cidr)
                failures.setdefault(node.name, {})[cidr] = (f"{error} (route table {op.route.route_table_id})", seconds)

        for name in plan.routed_nodes:
            if name not in unsettled:
                self._settle(by_name[name], failures.get(name, {}), out)
        # "created" would be refused by logging (a LogRecord attribute; see ccm.logs).
        log.info(
            "routes reconciled",
            extra={
                "tables": out.tables, "nodes": out.nodes, "kept": out.kept, "routes_created": out.created,
                "replaced": out.replaced, "deleted": out.deleted, "deferred": out.deferred,
                "failed": out.failed, "problems": out.problems,
            },
        )  # fmt: skip
        return out

    def _apply(self, op: p.RouteOp, out: RouteOutcome) -> tuple[str | None, float]:
        started = self.clock()
        try:
            if op.kind is p.OpKind.CREATE:
                self.routes.create_route(self.cluster_name, op.route.name, op.route)
                out.created += 1
            elif op.kind is p.OpKind.REPLACE:
                self.routes.replace_route(self.cluster_name, op.route)
                out.replaced += 1
            else:
                self.routes.delete_route(self.cluster_name, op.route)
                out.deleted += 1
        except Exception as err:  # one failed route must not stop the others (upstream runs them all too)
            log.warning("%s %s failed (%s)", op.kind.value, op.route.destination_cidr, op.reason, exc_info=True)
            return error_text(err), self.clock() - started
        log.info("%s route %s (%s)", op.kind.value, op.route.destination_cidr, op.reason)
        return None, self.clock() - started

    def _settle(self, node: p.NodeRoutes, failures: dict[str, tuple[str, float]], out: RouteOutcome) -> None:
        for cidr, (error, seconds) in sorted(failures.items()):
            try:
                message = p.failed_route_message(node, cidr, seconds, error)
                self.kube.record_node_event(node, "Warning", "FailedToCreateRoute", message)
                out.events += 1
            except Exception:  # an event is best effort; the condition below still tells the truth
                log.warning("could not record FailedToCreateRoute on %s", node.name, exc_info=True)
        patch = p.condition_patch(node, routes_created=not failures, now=now())
        if patch is None:
            return
        try:
            if self.kube.patch_node_status(node.name, patch):
                out.conditions_written += 1
        except Exception as err:
            out.failed.append(f"NetworkUnavailable on {node.name}: {error_text(err)}")
