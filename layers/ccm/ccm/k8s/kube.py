"""The Kubernetes calls a service reconcile makes, returning plain JSON dicts (no model deserialisation: it is
slower than the reconcile itself and the decisions work on dicts anyway)."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ccm.contracts import KubeObject

MERGE_PATCH = "application/merge-patch+json"
EVENT_COMPONENT = "service-controller"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(response: Any) -> Any:
    return json.loads(response.data)


class Kube:
    """Thin, typed edge over CoreV1Api for services, nodes and events."""

    def __init__(self, api_client: client.ApiClient, reporting_instance: str = "serverless-ccm") -> None:
        self.core = client.CoreV1Api(api_client)
        self.reporting_instance = reporting_instance

    def get_service(self, namespace: str, name: str) -> KubeObject | None:
        try:
            svc: KubeObject = _json(self.core.read_namespaced_service(name, namespace, _preload_content=False))
            return svc
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list_nodes(self, page_size: int = 500) -> list[KubeObject]:
        nodes: list[KubeObject] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = _json(self.core.list_node(**kwargs))
            nodes.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return nodes

    def set_finalizers(self, svc: KubeObject, finalizers: list[str]) -> KubeObject:
        """Merge-patch the whole finalizer list guarded by resourceVersion: a concurrent change gets 409 and
        the reconcile is retried on fresh data, so nobody else's finalizer is ever dropped."""
        meta = svc["metadata"]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        updated: KubeObject = _json(
            self.core.patch_namespaced_service(
                meta["name"], meta["namespace"], body, _content_type=MERGE_PATCH, _preload_content=False
            )
        )
        return updated

    def patch_load_balancer_status(self, svc: KubeObject, ingress: list[dict[str, Any]]) -> bool:
        """Write status.loadBalancer.ingress (no precondition, as upstream). False if the Service is gone."""
        meta = svc["metadata"]
        body = {"status": {"loadBalancer": {"ingress": ingress or None}}}
        try:
            self.core.patch_namespaced_service_status(
                meta["name"], meta["namespace"], body, _content_type=MERGE_PATCH, _preload_content=False
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def record_event(self, obj: KubeObject, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = _now()
        namespace = meta.get("namespace", "default")
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{secrets.token_hex(8)}",
                "namespace": meta.get("namespace", "default"),
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", "v1"),
                "kind": obj.get("kind", "Service"),
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": self.reporting_instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.core.create_namespaced_event(namespace, event, _preload_content=False)  # type: ignore[arg-type]
