"""The Kubernetes calls a service reconcile makes, returning plain JSON dicts (no model deserialisation: it is
slower than the reconcile itself and the decisions work on dicts anyway)."""

from __future__ import annotations

from typing import Any

from ccm.contracts.cloud import KubeObject
from ccm.k8s.endpoints import EndpointReads
from ccm.k8s.events import SERVICE_CONTROLLER, EventRecorder, now
from ccm.k8s.rest import JSON_PATCH, MERGE_PATCH, ApiError, KubeRest, quote

UID_TEST_PATH = "/metadata/uid"  # named by the 422 of a failed test: "testing value /metadata/uid failed"

__all__ = ["MERGE_PATCH", "ApiError", "Kube", "KubeRest", "node_path", "now", "service_path"]


def service_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/services/{quote(name)}"


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


class Kube(EndpointReads):
    """Thin, typed edge over the API for services, nodes and events (and, from EndpointReads, EndpointSlices and
    pods for `ip` targets)."""

    def __init__(self, api: KubeRest, reporting_instance: str = "serverless-ccm") -> None:
        self.api = api
        self.reporting_instance = reporting_instance
        self.events = EventRecorder(api, reporting_instance)

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

    def patch_load_balancer_status(self, svc: KubeObject, ingress: list[dict[str, Any]]) -> KubeObject | None:
        """Write status.loadBalancer.ingress of THIS Service, so a reconcile that outlived its Service never writes
        its load balancer onto one re-created under the same name. Returns the Service as written; None if it is gone or
        is another one.

        The guard is a JSON patch `test` of metadata.uid before the write: the server applies the patch to the
        object it holds, inside its optimistic-concurrency loop, so nothing can come between the test and the write.
        (A UID in a merge patch is no precondition on PATCH: kube-apiserver applies it and refuses the change of an
        immutable field with a 422 like any invalid status; only PUT and DELETE take UID preconditions.) A failed
        test is a 422 naming the tested path, told apart from an invalid status by that path."""
        meta = svc["metadata"]
        ops: list[dict[str, Any]] = []
        if meta.get("uid"):
            ops.append({"op": "test", "path": "/metadata/uid", "value": meta["uid"]})
        # `add` of a member replaces it; status.loadBalancer is a struct the server always renders ({}).
        ops.append({"op": "add", "path": "/status/loadBalancer", "value": {"ingress": ingress} if ingress else {}})
        try:
            written: KubeObject = self.api.patch(
                service_path(meta["namespace"], meta["name"]) + "/status", ops, JSON_PATCH
            )
        except ApiError as err:
            if err.status == 404 or (err.status == 422 and UID_TEST_PATH in str(err)):
                return None
            raise
        return written

    def record_event(
        self, obj: KubeObject, event_type: str, reason: str, message: str, component: str = SERVICE_CONTROLLER
    ) -> None:
        meta = obj["metadata"]
        involved = {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj.get("kind", "Service"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        self.post_event(involved, event_type, reason, message, component)

    def post_event(
        self,
        involved: dict[str, Any],
        event_type: str,
        reason: str,
        message: str,
        component: str = SERVICE_CONTROLLER,
    ) -> None:
        """A core/v1 Event about `involved` (an involvedObject), aggregated with its repeats (ccm.k8s.events)."""
        self.events.post(involved, event_type, reason, message, component)
