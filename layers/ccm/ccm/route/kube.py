"""The Kubernetes calls of a route reconcile: LIST nodes (paginated), PATCH nodes/status, POST events.

Plain JSON dicts in and out, like ccm.k8s.kube (whose paginated node listing this reuses).
"""

from __future__ import annotations

from typing import Any

from ccm.contracts.kube import KubeObject
from ccm.k8s.events import ROUTE_CONTROLLER
from ccm.k8s.kube import Kube, node_path
from ccm.k8s.rest import STRATEGIC_MERGE_PATCH, ApiError, KubeRest
from ccm.route.plan import NodeRoutes


class RouteKube:
    def __init__(self, api: KubeRest, reporting_instance: str = "serverless-ccm") -> None:
        self.nodes = Kube(api, reporting_instance)
        self.api = api

    def list_nodes(self) -> list[KubeObject]:
        return self.nodes.list_nodes()

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> bool:
        """Strategic merge on nodes/status, as upstream's SetNodeCondition: conditions merge by `type`, so the
        kubelet's conditions are untouched and no resourceVersion is needed. False if the node is gone."""
        try:
            self.api.patch(node_path(name) + "/status", patch, content_type=STRATEGIC_MERGE_PATCH)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    def record_node_event(self, node: NodeRoutes, event_type: str, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}
        self.nodes.post_event(involved, event_type, reason, message, ROUTE_CONTROLLER)
