"""The Kubernetes calls of the node controllers, plain JSON dicts in and out (like ccm.k8s.kube).

Verbs: get/list nodes, patch nodes (labels, providerID, taints), patch nodes/status (addresses), delete nodes,
create events. Writes are JSON merge patches: `status.addresses` and `spec.taints` are then replaced as whole
lists (a strategic merge would merge addresses by `type`, which mangles several InternalIPs).
"""

from __future__ import annotations

from typing import Any

from ccm.contracts.cloud import KubeObject
from ccm.k8s.events import NODE_CONTROLLER
from ccm.k8s.kube import Kube, node_path
from ccm.k8s.rest import ApiError

# Upstream's event sources: initialisation events come from the cloud node controller, deletions from the
# cloud node lifecycle controller.


class Conflict(Exception):
    """The node changed since it was read (409): re-read and re-plan."""


class NodeApi:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.api = kube.api

    def get_node(self, name: str) -> KubeObject | None:
        try:
            node: KubeObject = self.api.get(node_path(name))
            return node
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list_nodes(self) -> list[KubeObject]:
        return self.kube.list_nodes()

    def list_nodes_at(self) -> tuple[list[KubeObject], str]:
        """The nodes and the list's resourceVersion (what a snapshot-based comparison needs)."""
        return self.kube.list_nodes_at()

    def patch_node(self, node: KubeObject, patch: dict[str, Any], *, guarded: bool) -> KubeObject | None:
        """Merge-patch the node; `guarded` adds its resourceVersion as a precondition (Conflict on 409).
        None if the node is gone."""
        body = patch
        if guarded:
            meta = dict(patch.get("metadata") or {})
            meta["resourceVersion"] = node["metadata"]["resourceVersion"]
            body = {**patch, "metadata": meta}
        try:
            updated: KubeObject = self.api.patch(node_path(node["metadata"]["name"]), body)
        except ApiError as err:
            if err.status == 404:
                return None
            if err.status == 409:
                raise Conflict(str(err.reason)) from err
            raise
        return updated

    def patch_addresses(self, node: KubeObject, addresses: list[dict[str, str]]) -> KubeObject | None:
        """Replace status.addresses (no precondition, as upstream). None if the node is gone."""
        try:
            updated: KubeObject = self.api.patch(
                node_path(node["metadata"]["name"]) + "/status", {"status": {"addresses": addresses}}
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return updated

    def delete_node(self, node: KubeObject) -> bool:
        """Delete exactly this node object (UID precondition: never a re-registered one). False if gone."""
        meta = node["metadata"]
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta.get("uid")}}
        try:
            self.api.delete(node_path(meta["name"]), body=options)
        except ApiError as err:
            if err.status in (404, 409):  # 409: the UID differs, so the node we judged is gone already
                return False
            raise
        return True

    def record_event(
        self, node: KubeObject, event_type: str, reason: str, message: str, component: str = NODE_CONTROLLER
    ) -> None:
        meta = node["metadata"]
        involved = {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta.get("uid")}
        self.kube.post_event(involved, event_type, reason, message, component)


def describe_error(err: BaseException) -> str:
    """One line for events and logs."""
    if isinstance(err, ApiError):
        return str(err)
    return f"{type(err).__name__}: {err}"
