"""Status subresource isolation and deletion with finalizers."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from devstack.k8s_emulator import Emulator

from .conftest import Raw, service_body

MERGE = "application/merge-patch+json"
LB_STATUS = {"status": {"loadBalancer": {"ingress": [{"hostname": "abc.elb.us-east-1.amazonaws.com"}]}}}


def test_status_patch_ignores_spec_but_keeps_metadata(core: kubernetes.client.CoreV1Api) -> None:
    # serviceStatusStrategy.PrepareForUpdate (pkg/registry/core/service/strategy.go) only puts the old spec back:
    # the real server keeps metadata changes sent to /status (and validates them like any metadata update).
    core.create_namespaced_service("default", service_body("web", type="LoadBalancer"))
    out = core.patch_namespaced_service_status(
        "web", "default", {**LB_STATUS, "metadata": {"labels": {"extra": "yes"}}, "spec": {"type": "ClusterIP"}}
    )
    assert out.status.load_balancer.ingress[0].hostname == "abc.elb.us-east-1.amazonaws.com"
    assert out.spec.type == "LoadBalancer"
    assert out.metadata.labels == {"app": "web", "extra": "yes"}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_service_status("web", "default", {"metadata": {"finalizers": ["unqualified"]}})
    assert exc.value.status == 422


def test_main_resource_update_ignores_status(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web", type="LoadBalancer"))
    core.patch_namespaced_service_status("web", "default", LB_STATUS)
    out = core.patch_namespaced_service(
        "web",
        "default",
        {"metadata": {"labels": {"a": "b"}}, "status": {"loadBalancer": {"ingress": [{"ip": "9.9.9.9"}]}}},
    )
    assert out.metadata.labels["a"] == "b"
    assert out.status.load_balancer.ingress[0].hostname == "abc.elb.us-east-1.amazonaws.com"
    # Status set on create is dropped too.
    body = service_body("other", type="LoadBalancer")
    body["status"] = {"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}]}}
    created = core.create_namespaced_service("default", body)
    assert not created.status.load_balancer.ingress


def test_status_put_honours_resource_version(core: kubernetes.client.CoreV1Api) -> None:
    svc = core.create_namespaced_service("default", service_body("web", type="LoadBalancer"))
    svc.status = kubernetes.client.V1ServiceStatus(
        load_balancer=kubernetes.client.V1LoadBalancerStatus(
            ingress=[kubernetes.client.V1LoadBalancerIngress(ip="10.1.2.3")]
        )
    )
    out = core.replace_namespaced_service_status("web", "default", svc)
    assert out.status.load_balancer.ingress[0].ip == "10.1.2.3"
    assert out.status.load_balancer.ingress[0].ip_mode == "VIP"  # defaulted like the real server
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_service_status("web", "default", svc)  # svc has the old RV
    assert exc.value.status == 409


def test_status_validation(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web", type="LoadBalancer"))
    path = "/api/v1/namespaces/default/services/web/status"
    mp = "application/merge-patch+json"
    status, _, body = raw.request("PATCH", path, {"status": {"loadBalancer": {"ingress": [{"ip": "not-an-ip"}]}}}, mp)
    assert status == 422 and body["details"]["causes"][0]["field"] == "status.loadBalancer.ingress[0].ip"
    status, _, body = raw.request(
        "PATCH", path, {"status": {"loadBalancer": {"ingress": [{"hostname": "1.2.3.4"}]}}}, mp
    )
    assert status == 422
    status, _, body = raw.request("PATCH", path, {"status": {"conditions": [{"type": "Ready", "status": "Yes"}]}}, mp)
    assert status == 422


def test_status_conditions_merge_by_type(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web", type="LoadBalancer"))
    cond = {"status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}
    core.patch_namespaced_service_status("web", "default", {"status": {"conditions": [{"type": "A", **cond}]}})
    out = core.patch_namespaced_service_status(
        "web", "default", {"status": {"conditions": [{"type": "B", **cond}, {"type": "A", **cond, "status": "False"}]}}
    )
    # Upstream strategic-merge order: the patch's order, the new B first (normalizeElementOrder).
    assert [(c.type, c.status) for c in out.status.conditions] == [("B", "True"), ("A", "False")]


def test_node_status_subresource(core: kubernetes.client.CoreV1Api) -> None:
    core.create_node({"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///us-east-1a/i-1"}})
    out = core.patch_node_status(
        "n1",
        {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}, "spec": {"providerID": "changed"}},
    )
    assert out.status.addresses[0].address == "10.0.0.1"
    assert out.spec.provider_id == "aws:///us-east-1a/i-1"
    out = core.patch_node(
        "n1", {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}, "status": {"addresses": []}}
    )
    assert out.spec.taints[0].key == "k" and out.status.addresses[0].address == "10.0.0.1"


def test_delete_with_finalizers_then_release(core: kubernetes.client.CoreV1Api, emu: Emulator) -> None:
    body = service_body("web")
    body["metadata"]["finalizers"] = ["service.k8s.aws/resources"]
    core.create_namespaced_service("default", body)
    pending = core.delete_namespaced_service("web", "default")
    assert pending.metadata.deletion_timestamp is not None
    stored = emu.get("services", "default", "web")
    assert stored is not None and stored["metadata"]["deletionTimestamp"]
    again = core.delete_namespaced_service("web", "default")  # idempotent while pending
    assert again.metadata.resource_version == pending.metadata.resource_version
    with pytest.raises(ApiException) as exc:  # no new finalizers while terminating
        core.patch_namespaced_service("web", "default", {"metadata": {"finalizers": ["other.io/x"]}})
    assert exc.value.status == 422
    core.patch_namespaced_service(
        "web", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["service.k8s.aws/resources"]}}
    )
    assert emu.get("services", "default", "web") is None


def test_delete_http_codes(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    body = service_body("web")
    body["metadata"]["finalizers"] = ["x.io/y"]
    core.create_namespaced_service("default", body)
    # Held by a finalizer: 200 with the object (apiserver handlers/delete.go); 202 only for orphanDependents=false.
    status, _, obj = raw.request("DELETE", "/api/v1/namespaces/default/services/web")
    assert status == 200 and obj["metadata"]["deletionTimestamp"] and obj["metadata"]["finalizers"] == ["x.io/y"]
    status, _, obj = raw.request("DELETE", "/api/v1/namespaces/default/services/web", {"orphanDependents": False})
    assert status == 202 and obj["metadata"]["deletionTimestamp"]
    core.create_namespaced_service("default", service_body("plain"))
    status, _, obj = raw.request("DELETE", "/api/v1/namespaces/default/services/plain")
    assert status == 200 and obj["metadata"]["name"] == "plain"


def test_a_new_node_is_tainted_not_ready_until_something_removes_it(emu: Emulator, raw: Raw) -> None:
    """TaintNodesByCondition admission: on create only, added once (a Node sent with it keeps one), kept by later
    writes that do not remove it (status updates, a Ready condition), gone once a write removes it."""
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    status, _, node = raw.request(
        "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}, "status": ready}
    )
    assert status == 201 and node["spec"]["taints"] == [not_ready]
    theirs = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}, "spec": {"taints": [theirs, not_ready]}}
    assert raw.request("POST", "/api/v1/nodes", body)[2]["spec"]["taints"] == [theirs, not_ready]
    status, _, node = raw.request("PATCH", "/api/v1/nodes/a/status", {"status": ready}, MERGE)
    assert status == 200 and node["spec"]["taints"] == [not_ready]
    status, _, node = raw.request("PATCH", "/api/v1/nodes/a", {"metadata": {"labels": {"x": "y"}}}, MERGE)
    assert node["spec"]["taints"] == [not_ready]
    status, _, node = raw.request("PATCH", "/api/v1/nodes/a", {"spec": {"taints": None}}, MERGE)
    assert status == 200 and "taints" not in node["spec"]


def test_empty_finalizers_and_taints_are_omitted(raw: Raw, core: kubernetes.client.CoreV1Api, emu: Emulator) -> None:
    # Go's `omitempty`: the real server never returns `finalizers: []` or `taints: []`.
    body = service_body("web")
    body["metadata"]["finalizers"] = ["x.io/y"]
    core.create_namespaced_service("default", body)
    status, _, svc = raw.request(
        "PATCH", "/api/v1/namespaces/default/services/web", {"metadata": {"finalizers": []}}, MERGE
    )
    assert status == 200 and "finalizers" not in svc["metadata"]
    emu.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {"taints": []}})
    # Admission (TaintNodesByCondition) taints every new Node not-ready, whatever it was sent with.
    assert emu.get("nodes", None, "n1")["spec"]["taints"] == [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    ]
    taint = {"key": "k", "effect": "NoSchedule"}
    assert raw.request("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": [taint]}}, MERGE)[2]["spec"]["taints"]
    status, _, node = raw.request("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": []}}, MERGE)
    assert status == 200 and "taints" not in node["spec"]
