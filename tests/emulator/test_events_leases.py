"""Events (core/v1 and events.k8s.io/v1 share storage, as in the real server) and Leases."""

from __future__ import annotations

import datetime as dt

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from devstack.k8s_emulator import Emulator

from .conftest import Raw


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_core_event_create_list_and_selectors(core: kubernetes.client.CoreV1Api) -> None:
    body = {
        "metadata": {"generateName": "web."},
        "involvedObject": {"kind": "Service", "namespace": "default", "name": "web", "uid": "u1", "apiVersion": "v1"},
        "reason": "EnsuringLoadBalancer",
        "message": "Ensuring load balancer",
        "type": "Normal",
        "source": {"component": "service-controller"},
        "count": 1,
        "firstTimestamp": "2024-01-01T00:00:00Z",
        "lastTimestamp": "2024-01-01T00:00:00Z",
    }
    created = core.create_namespaced_event("default", body)
    assert created.metadata.name.startswith("web.")
    found = core.list_namespaced_event("default", field_selector="involvedObject.name=web,reason=EnsuringLoadBalancer")
    assert [e.metadata.name for e in found.items] == [created.metadata.name]
    assert len(core.list_event_for_all_namespaces(field_selector="involvedObject.kind=Node").items) == 0
    bad = dict(body, involvedObject={**body["involvedObject"], "namespace": "kube-system"})  # type: ignore[dict-item]
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_event("default", bad)
    assert exc.value.status == 422


def test_events_k8s_io_v1_roundtrip_and_shared_storage(
    api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api
) -> None:
    events = kubernetes.client.EventsV1Api(api_client)
    body = {
        "metadata": {"name": "web.1"},
        "eventTime": _now(),
        "reportingController": "ccm.example.com/svc",
        "reportingInstance": "lambda-1",
        "action": "Reconcile",
        "reason": "SyncLoadBalancerFailed",
        "type": "Warning",
        "note": "boom",
        "regarding": {"kind": "Service", "namespace": "default", "name": "web", "apiVersion": "v1"},
    }
    created = events.create_namespaced_event("default", body)
    assert created.note == "boom" and created.regarding.name == "web"
    assert created.reporting_controller == "ccm.example.com/svc"
    legacy = core.read_namespaced_event("web.1", "default")
    assert legacy.message == "boom" and legacy.involved_object.name == "web"
    assert legacy.reporting_component == "ccm.example.com/svc"
    patched = events.patch_namespaced_event("web.1", "default", {"series": {"count": 2, "lastObservedTime": _now()}})
    assert patched.series.count == 2
    assert [e.note for e in events.list_namespaced_event("default").items] == ["boom"]


def test_events_k8s_io_validation(raw: Raw) -> None:
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    status, _, body = raw.request(
        "POST",
        path,
        {
            "metadata": {"name": "e"},
            "reason": "X",
            "note": "n",
            "regarding": {"kind": "Service", "namespace": "default"},
        },
    )
    assert status == 422 and body["details"]["group"] == "events.k8s.io"
    assert {c["field"] for c in body["details"]["causes"]} == {"eventTime", "type"}
    status, _, body = raw.request(
        "POST",
        path,
        {
            "metadata": {"name": "e"},
            "eventTime": _now(),
            "type": "Normal",
            "reason": "X",
            "deprecatedCount": 3,
            "regarding": {"kind": "Service", "namespace": "default"},
        },
    )
    assert status == 422
    assert {c["field"] for c in body["details"]["causes"]} == {
        "reportingController",
        "reportingInstance",
        "action",
        "deprecatedCount",
    }


def test_events_k8s_io_watch_converts(emu: Emulator, raw: Raw) -> None:
    emu.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "e1", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n1"},
            "message": "hello",
            "reason": "R",
        }
    )
    _, events = raw.watch("/apis/events.k8s.io/v1/namespaces/default/events?watch=1&timeoutSeconds=1")
    assert events[0]["object"]["apiVersion"] == "events.k8s.io/v1"
    assert events[0]["object"]["note"] == "hello" and events[0]["object"]["regarding"]["name"] == "n1"


def test_lease_crud(api_client: kubernetes.client.ApiClient) -> None:
    coord = kubernetes.client.CoordinationV1Api(api_client)
    lease = coord.create_namespaced_lease(
        "kube-system",
        {
            "metadata": {"name": "ccm-leader"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": _now(), "renewTime": _now()},
        },
    )
    assert lease.spec.holder_identity == "a" and lease.metadata.resource_version
    lease.spec.holder_identity = "b"
    lease.spec.lease_transitions = 1
    updated = coord.replace_namespaced_lease("ccm-leader", "kube-system", lease)
    assert updated.spec.holder_identity == "b" and updated.spec.lease_transitions == 1
    with pytest.raises(ApiException) as exc:  # stale RV: another candidate won the race
        coord.replace_namespaced_lease("ccm-leader", "kube-system", lease)
    assert exc.value.status == 409
    assert [x.metadata.name for x in coord.list_namespaced_lease("kube-system").items] == ["ccm-leader"]
    coord.delete_namespaced_lease("ccm-leader", "kube-system")
    with pytest.raises(ApiException) as exc:
        coord.read_namespaced_lease("ccm-leader", "kube-system")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        coord.create_namespaced_lease("kube-system", {"metadata": {"name": "x"}, "spec": {"leaseDurationSeconds": 0}})
    assert exc.value.status == 422
