"""One node's whole decision, pure: lifecycle first (a Node to delete needs nothing else), then initialisation
or the beta->GA label copy, the shutdown taint, and the addresses. `ccm.node.sync` applies the plan.

The spec part is ONE merge patch (labels, providerID, taints) so the uninitialized taint disappears in the same
write that sets what it was guarding; when it touches taints it is sent with the resourceVersion it was planned
from (taints are an atomic list: a concurrent change must make us re-plan, not be overwritten).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ccm.contracts.cloud import InstanceMetadata, KubeObject
from ccm.node import initializer as init
from ccm.node import lifecycle as lc
from ccm.node import model as m

SYNCED = ("Normal", "Synced", "Node synced successfully")
SYNC_FAILED = "SyncNodeFailed"
DELETING = "DeletingNode"
DELETING_FAILED = "DeletingNodeFailed"


@dataclass(frozen=True, slots=True)
class NodeEvent:
    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class NodePlan:
    lifecycle: lc.Lifecycle = lc.Lifecycle.NONE
    spec_patch: dict[str, Any] = field(default_factory=dict)  # merge patch; {} = nothing to write
    taints_changed: bool = False
    addresses: list[dict[str, str]] | None = None  # the whole new status.addresses; None = leave as is
    events: tuple[NodeEvent, ...] = ()
    initialised: bool = False
    retry: bool = False  # initialisation failed in a way a later attempt may fix (instance not visible yet)
    notes: tuple[str, ...] = ()  # why things were (not) done, for the log

    @property
    def delete(self) -> bool:
        return self.lifecycle is lc.Lifecycle.DELETE

    @property
    def writes(self) -> bool:
        return self.delete or bool(self.spec_patch) or self.addresses is not None


def deleting_event(node_name: str) -> NodeEvent:
    return NodeEvent("Normal", DELETING, f"Deleting node {node_name} because it does not exist in the cloud provider")


def plan_node(
    node: KubeObject, *, looked_up: bool, instance: InstanceMetadata | None, refresh_addresses: bool = False
) -> NodePlan:
    name = m.name(node)
    action = lc.decide(node, looked_up, instance)
    if action is lc.Lifecycle.DELETE:
        return NodePlan(lifecycle=action, events=(deleting_event(name),))

    labels: dict[str, str] = {}
    provider_id = ""
    addresses: list[dict[str, str]] | None = None
    events: list[NodeEvent] = []
    notes: list[str] = []
    taints = m.taints(node)
    initialised = retry = False
    live = instance if instance is not None and instance.exists else None

    if m.has_taint(node, m.UNINITIALIZED_TAINT):
        if live is None:
            why = "instance not found" if looked_up else f"providerID {m.provider_id(node)!r} is not an EC2 instance"
            events.append(NodeEvent("Warning", SYNC_FAILED, f"failed to get instance metadata for node {name}: {why}"))
            retry = looked_up
        else:
            try:
                plan = init.plan_initialisation(node, live)
            except init.InvalidNodeIP as err:
                message = f"provided node ip for node {name!r} is not valid: {err}"
                events.append(NodeEvent("Warning", SYNC_FAILED, message))
            else:
                labels, provider_id, initialised = plan.labels, plan.provider_id, True
                addresses = plan.addresses or None
                taints = [t for t in taints if t.get("key") != m.UNINITIALIZED_TAINT]
                events.append(NodeEvent(*SYNCED))
    else:
        labels = init.beta_to_ga_labels(m.labels(node))
        if refresh_addresses and live is not None:
            try:
                addresses = init.desired_addresses(node, live) or None
            except init.InvalidNodeIP as err:
                notes.append(f"addresses not refreshed: {err}")

    if addresses is not None and addresses == m.addresses(node):
        addresses = None  # equal: skip the write
    taints = lc.apply_to_taints(taints, action)
    taints_changed = taints != m.taints(node)

    patch: dict[str, Any] = {}
    if labels:
        patch["metadata"] = {"labels": labels}
    spec: dict[str, Any] = {}
    if provider_id:
        spec["providerID"] = provider_id
    if taints_changed:
        spec["taints"] = taints
    if spec:
        patch["spec"] = spec
    return NodePlan(
        lifecycle=action,
        spec_patch=patch,
        taints_changed=taints_changed,
        addresses=addresses,
        events=tuple(events),
        initialised=initialised,
        retry=retry,
        notes=tuple(notes),
    )
