"""The Kubernetes calls a service reconcile makes, returning plain JSON dicts (no model deserialisation: it is
slower than the reconcile itself and the decisions work on dicts anyway)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from ccm.contracts.cloud import KubeObject
from ccm.k8s.rest import MERGE_PATCH, ApiError, KubeRest, quote

__all__ = ["MERGE_PATCH", "ApiError", "Kube", "KubeRest", "node_path", "now", "service_path"]

EVENT_COMPONENT = "service-controller"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def service_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/services/{quote(name)}"


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


class Kube:
    """Thin, typed edge over the API for services, nodes and events."""

    def __init__(self, api: KubeRest, reporting_instance: str = "serverless-ccm") -> None:
        self.api = api
        self.reporting_instance = reporting_instance

    def get_service(self, namespace: str, name: str) -> KubeObject | None:
        try:
            svc: KubeObject = self.api.get(service_path(namespace, name))
            return svc
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list_nodes(self, page_size: int = 500) -> list[KubeObject]:
        return self.list_nodes_at(page_size)[0]

    def list_nodes_at(self, page_size: int = 500) -> tuple[list[KubeObject], str]:
        """Every Node (paginated) and the list's resourceVersion: all pages are one snapshot at that version."""
        nodes: list[KubeObject] = []
        token: str | None = None
        version = ""
        while True:
            query: dict[str, str | int] = {"limit": page_size}
            if token:
                query["continue"] = token
            page = self.api.get("/api/v1/nodes", query)
            nodes.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                return nodes, version

    def set_finalizers(self, svc: KubeObject, finalizers: list[str]) -> KubeObject:
        """Merge-patch the whole finalizer list guarded by resourceVersion: a concurrent change gets 409 and
        the reconcile is retried on fresh data, so nobody else's finalizer is ever dropped."""
        meta = svc["metadata"]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        updated: KubeObject = self.api.patch(service_path(meta["namespace"], meta["name"]), body)
        return updated

    def patch_load_balancer_status(self, svc: KubeObject, ingress: list[dict[str, Any]]) -> bool:
        """Write status.loadBalancer.ingress of THIS Service: the UID in the patch is a precondition (the API
        server answers 409 when the name now holds another object), so a reconcile that outlived its Service never
        writes its load balancer onto a Service re-created under the same name. False if the Service is gone."""
        meta = svc["metadata"]
        body: dict[str, Any] = {"status": {"loadBalancer": {"ingress": ingress or None}}}
        if meta.get("uid"):
            body["metadata"] = {"uid": meta["uid"]}
        try:
            self.api.patch(service_path(meta["namespace"], meta["name"]) + "/status", body)
        except ApiError as err:
            if err.status == 404 or (err.status == 409 and "UID in precondition" in str(err)):
                return False
            raise
        return True

    def record_event(self, obj: KubeObject, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        involved = {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj.get("kind", "Service"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        self.post_event(involved, event_type, reason, message)

    def post_event(
        self,
        involved: dict[str, Any],
        event_type: str,
        reason: str,
        message: str,
        component: str = EVENT_COMPONENT,
    ) -> None:
        """A core/v1 Event about `involved` (an involvedObject). Events about cluster-scoped objects (Nodes) live in
        "default", as upstream's recorder puts them."""
        namespace = involved.get("namespace") or "default"
        stamp = now()
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved['name']}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": involved,
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": self.reporting_instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.api.post(f"/api/v1/namespaces/{quote(namespace)}/events", event)
