"""Applying node plans: look the instances up (batched), plan each node (pure), write, record events.

Order of writes for one node: status.addresses first, then the spec merge patch that removes the uninitialized
taint, so a node never becomes schedulable before its addresses are there (upstream does it the other way round).
A conflict (the node changed since it was read) is resolved by re-reading and re-planning with the same instance
data, a few times; the cloud is not asked again unless the re-read node needs an instance it did not need before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ccm.contracts.cloud import InstanceMetadata, Instances, KubeObject
from ccm.k8s.events import NODE_LIFECYCLE_CONTROLLER as LIFECYCLE_CONTROLLER
from ccm.node import lifecycle as lc
from ccm.node import model as m
from ccm.node.api import Conflict, NodeApi, describe_error
from ccm.node.plan import DELETING_FAILED, NodePlan, plan_node

log = logging.getLogger(__name__)
MAX_CONFLICTS = 3

Lookup = Mapping[str, InstanceMetadata | None]


@dataclass(slots=True)
class SyncResult:
    name: str
    node: KubeObject | None  # the node after our writes; None when we deleted it or it vanished
    plan: NodePlan = field(default_factory=NodePlan)
    deleted: bool = False
    spec_written: bool = False
    addresses_written: bool = False

    @property
    def initialised(self) -> bool:
        return self.plan.initialised and self.spec_written

    @property
    def retry(self) -> bool:
        return self.plan.retry


class NodeSync:
    def __init__(self, api: NodeApi, instances: Instances) -> None:
        self.api = api
        self.instances = instances

    def lookup(
        self, nodes: Sequence[KubeObject], *, refresh: bool = False, trust_kubelet: bool = False
    ) -> dict[str, InstanceMetadata | None]:
        """One batched lookup for every node that needs its instance (none at all: no AWS call)."""
        wanted = [n for n in nodes if lc.needs_instance(n, refresh=refresh, trust_kubelet=trust_kubelet)]
        return self.instances.instances_metadata(wanted) if wanted else {}

    def sync_one(self, node: KubeObject, *, refresh: bool = False, trust_kubelet: bool = False) -> SyncResult:
        lookup = self.lookup([node], refresh=refresh, trust_kubelet=trust_kubelet)
        return self.sync(node, lookup, refresh=refresh, trust_kubelet=trust_kubelet)

    def sync(
        self, node: KubeObject, lookup: Lookup, *, refresh: bool = False, trust_kubelet: bool = False
    ) -> SyncResult:
        name = m.name(node)
        known = dict(lookup)
        for _ in range(MAX_CONFLICTS):
            if name not in known and lc.needs_instance(node, refresh=refresh, trust_kubelet=trust_kubelet):
                known.update(self.instances.instances_metadata([node]))
            plan = plan_node(node, looked_up=name in known, instance=known.get(name), refresh_addresses=refresh)
            for note in plan.notes:
                log.info("node %s: %s", name, note)
            try:
                return self._apply(node, plan)
            except Conflict:
                log.info("node %s changed while we wrote it; re-planning", name)
                fresh = self.api.get_node(name)
                if fresh is None:
                    return SyncResult(name, None, plan)
                node = fresh
        raise Conflict(f"node {name} kept changing; giving up after {MAX_CONFLICTS} attempts")

    def _apply(self, node: KubeObject, plan: NodePlan) -> SyncResult:
        name = m.name(node)
        result = SyncResult(name, node, plan)
        if plan.delete:
            return self._delete(node, result)
        current: KubeObject | None = node
        if plan.addresses is not None:
            current = self.api.patch_addresses(node, plan.addresses)
            if current is None:
                return SyncResult(name, None, plan)
            result.addresses_written = True
            if plan.taints_changed and m.taints(current) != m.taints(node):
                raise Conflict("taints changed")  # the status write returned a newer spec: re-plan on it
        if plan.spec_patch and current is not None:
            # The guard is the resourceVersion we just saw, and the taints we planned from are still the live ones.
            current = self.api.patch_node(current, plan.spec_patch, guarded=plan.taints_changed)
            if current is None:
                return SyncResult(name, None, plan)
            result.spec_written = True
        result.node = current
        for event in plan.events:
            self.api.record_event(current or node, event.type, event.reason, event.message)
        return result

    def _delete(self, node: KubeObject, result: SyncResult) -> SyncResult:
        name = result.name
        event = result.plan.events[0]
        self.api.record_event(node, event.type, event.reason, event.message, component=LIFECYCLE_CONTROLLER)
        try:
            result.deleted = self.api.delete_node(node)
        except Exception as err:
            message = f"Failed to delete node {name}: {describe_error(err)}"
            self.api.record_event(node, "Warning", DELETING_FAILED, message, component=LIFECYCLE_CONTROLLER)
            raise
        result.node = None
        return result
