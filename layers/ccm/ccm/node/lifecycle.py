"""Cloud node lifecycle decisions (upstream cloud node lifecycle controller), pure functions over plain dicts.

Upstream polls every node every 5 s. We decide the same way, but only when something happened: a Node delta, an
EC2 state-change event, or the periodic safety pass. The rules:

- Ready nodes: remove the shutdown taint if present, nothing else (no cloud lookup needed at all).
- NotReady nodes (Ready False or Unknown, or no Ready condition): if the instance does not exist (not found, or
  terminated) the Node is deleted; if it exists and is stopped, it gets the shutdown taint (NoSchedule).
- Deliberate difference: a Node WITHOUT providerID is never deleted. Only an instance ID proves that an instance
  is gone; a name lookup that finds nothing usually means a naming mismatch, and deleting such a Node only makes
  its kubelet register it again.
- Nodes being deleted, and nodes whose providerID belongs to another provider (never looked up), are left alone.
- Node deltas do not look up Ready=False nodes (a kubelet that reports is running); see `needs_instance`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Final

from ccm.contracts.cloud import InstanceMetadata, KubeObject
from ccm.node import model as m

SHUTDOWN_TAINT_SPEC: Final = {"key": m.SHUTDOWN_TAINT, "effect": "NoSchedule"}


class Lifecycle(Enum):
    NONE = "none"
    DELETE = "delete"
    ADD_SHUTDOWN_TAINT = "add-shutdown-taint"
    REMOVE_SHUTDOWN_TAINT = "remove-shutdown-taint"


def needs_instance(node: KubeObject, *, refresh: bool = False, trust_kubelet: bool = False) -> bool:
    """Whether deciding about this node needs its instance: to initialise it, to judge a NotReady node, or to
    refresh its addresses (safety pass, `running` events). Ready, initialised nodes cost no AWS call.

    `trust_kubelet` (Node deltas): Ready=False is what a running kubelet reports (starting up, CNI not ready), so
    its instance runs and a lookup would tell nothing; only Unknown (the kubelet went silent) is checked. Nothing
    is lost: a kubelet that dies turns the node Unknown after the grace period, which is a delta of its own; EC2
    events and the safety pass check every NotReady node, as upstream does."""
    if m.is_deleting(node):
        return False
    if refresh or m.has_taint(node, m.UNINITIALIZED_TAINT):
        return True
    status = m.ready_status(node)
    return status != "True" and not (trust_kubelet and status == "False")


def decide(node: KubeObject, looked_up: bool, instance: InstanceMetadata | None) -> Lifecycle:
    """`looked_up`: a lookup was made (False: not needed, or impossible for a foreign providerID); `instance`:
    what it found (None: nothing)."""
    if m.is_deleting(node):
        return Lifecycle.NONE
    shutdown_tainted = m.has_taint(node, m.SHUTDOWN_TAINT)
    if m.is_ready(node):
        return Lifecycle.REMOVE_SHUTDOWN_TAINT if shutdown_tainted else Lifecycle.NONE
    if not looked_up:
        return Lifecycle.NONE
    if instance is None or not instance.exists:
        return Lifecycle.DELETE if m.provider_id(node) else Lifecycle.NONE
    if instance.shutdown and not shutdown_tainted:
        return Lifecycle.ADD_SHUTDOWN_TAINT
    return Lifecycle.NONE


def apply_to_taints(taints: list[dict[str, Any]], action: Lifecycle) -> list[dict[str, Any]]:
    if action is Lifecycle.ADD_SHUTDOWN_TAINT and not any(t.get("key") == m.SHUTDOWN_TAINT for t in taints):
        return [*taints, dict(SHUTDOWN_TAINT_SPEC)]
    if action is Lifecycle.REMOVE_SHUTDOWN_TAINT:
        return [t for t in taints if t.get("key") != m.SHUTDOWN_TAINT]
    return taints
