"""The Kubernetes reads and writes of `ip` targets (ccm.contracts.kube.KubeEndpoints): a Service's EndpointSlices,
the pods of gated endpoints, and our readiness-gate condition on pods/status.

Cost: one LIST (a page per 500 slices) per Service for the slices. Pods are read only for endpoints that are
neither ready nor terminating (ccm.contracts.endpoints.gate_candidates), so a steady Service reads none: up to
GET_MAX names are fetched one GET each; more (a rollout) in one LIST by the Service's own selector, the set the
EndpointSlice controller took the endpoints from, filtered to the names. A field selector cannot do it: it takes
one value per field (`metadata.name=a` only, no set), so many names would still be many requests.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from ccm.contracts.endpoints import SERVICE_NAME_LABEL
from ccm.contracts.kube import KubeObject
from ccm.k8s.rest import STRATEGIC_MERGE_PATCH, ApiError, KubeRest, quote

GET_MAX: Final = 3
PAGE_SIZE: Final = 500


def endpoint_slices_path(namespace: str) -> str:
    return f"/apis/discovery.k8s.io/v1/namespaces/{quote(namespace)}/endpointslices"


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods"


def pod_path(namespace: str, name: str) -> str:
    return f"{pods_path(namespace)}/{quote(name)}"


def label_selector(labels: Mapping[str, str]) -> str:
    """A Service's spec.selector (equality on every key) as a labelSelector parameter."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _list_all(get_page: Callable[[dict[str, str | int]], Any], selector: str, page_size: int) -> list[KubeObject]:
    """Every page of a LIST by label. `get_page(query)` makes the call, so the resource it lists is written where
    it is called (tests/deploy/test_manifests.py derives the RBAC from the calls)."""
    items: list[KubeObject] = []
    token: str | None = None
    while True:
        query: dict[str, str | int] = {"labelSelector": selector, "limit": page_size}
        if token:
            query["continue"] = token
        page = get_page(query)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


class EndpointReads:
    """Mixed into ccm.k8s.kube.Kube; needs only `api`."""

    api: KubeRest
    page_size: int = PAGE_SIZE

    def list_endpoint_slices(self, namespace: str, service_name: str) -> list[KubeObject]:
        selector = f"{SERVICE_NAME_LABEL}={service_name}"
        return _list_all(lambda q: self.api.get(endpoint_slices_path(namespace), q), selector, self.page_size)

    def pods_by_name(
        self, namespace: str, names: Collection[str], selector: Mapping[str, str] | None = None
    ) -> dict[str, KubeObject]:
        wanted = set(names)
        if not wanted:
            return {}
        if selector and len(wanted) > GET_MAX:
            pods = _list_all(lambda q: self.api.get(pods_path(namespace), q), label_selector(selector), self.page_size)
            return {p["metadata"]["name"]: p for p in pods if p["metadata"]["name"] in wanted}
        found: dict[str, KubeObject] = {}
        for name in sorted(wanted):
            try:
                found[name] = self.api.get(pod_path(namespace, name))
            except ApiError as err:
                if err.status != 404:
                    raise
        return found

    def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, str]) -> KubeObject | None:
        """A strategic merge patch of pods/status: PodStatus.conditions has patchStrategy merge, patchMergeKey
        type (k8s.io/api core/v1 types.go), so only our condition changes and the kubelet's stay. The pod's UID
        rides in the patch as the LBC does (`buildPodConditionPatch`): the server refuses a different UID as an
        immutable field (422), so a pod re-created under the name is never written."""
        # Merged by type means merged field by field: a reason or message left out would stay from the last write
        # (a True condition still saying Elb.InitialHealthChecking); null deletes it.
        sent: dict[str, str | None] = {"reason": None, "message": None, **condition}
        body: dict[str, object] = {"status": {"conditions": [sent]}}
        if uid:
            body["metadata"] = {"uid": uid}
        try:
            written: KubeObject = self.api.patch(pod_path(namespace, name) + "/status", body, STRATEGIC_MERGE_PATCH)
        except ApiError as err:
            if err.status == 404 or (err.status == 422 and "metadata.uid" in err.message):
                return None
            raise
        return written
