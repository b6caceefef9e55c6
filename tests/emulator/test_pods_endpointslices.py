"""Pods and discovery.k8s.io/v1 EndpointSlices through the real kubernetes client, raw HTTP and kubectl."""

from __future__ import annotations

import threading
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from devstack.k8s_emulator import Emulator

from .conftest import Kubectl, Raw, as_json

SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"


def pod_body(name: str = "web-0", **spec: Any) -> dict[str, Any]:
    body_spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "app:1", "ports": [{"name": "http", "containerPort": 8080}]}]
    }
    body_spec.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}}, "spec": body_spec}


def slice_body(name: str = "web-abcde", service: str = "web", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.128.5"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }
    body.update(fields)
    return body


def test_discovery_lists_pods_and_endpointslices(api_client: kubernetes.client.ApiClient) -> None:
    core = {r.name: r for r in kubernetes.client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/status"} <= set(core) and core["pods"].short_names == ["po"]
    assert set(core["pods"].verbs) >= {"create", "delete", "get", "list", "patch", "update", "watch"}
    discovery = kubernetes.client.DiscoveryV1Api(api_client).get_api_resources()
    assert discovery.group_version == "discovery.k8s.io/v1"
    assert [(r.name, r.kind, r.namespaced) for r in discovery.resources] == [("endpointslices", "EndpointSlice", True)]


def test_pod_create_defaults_status_and_readiness_fields(core: kubernetes.client.CoreV1Api) -> None:
    gate = "target-health.elbv2.k8s.aws/k8s-web-0123456789"
    body = pod_body(readinessGates=[{"conditionType": gate}], nodeName="node-a")
    body["status"] = {"phase": "Running", "podIP": "10.0.128.9"}  # ignored on create: the server's status
    pod = core.create_namespaced_pod("default", body)
    assert pod.status.phase == "Pending" and pod.status.pod_ip is None and pod.status.qos_class == "BestEffort"
    assert pod.spec.restart_policy == "Always" and pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.containers[0].ports[0].protocol == "TCP"
    assert pod.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert pod.spec.readiness_gates[0].condition_type == gate
    status = {
        "status": {
            "phase": "Running",
            "podIP": "10.0.128.9",
            "podIPs": [{"ip": "10.0.128.9"}],
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"},
                {"type": gate, "status": "True"},
            ],
        }
    }
    patched = core.patch_namespaced_pod_status("web-0", "default", status)
    assert patched.status.pod_ip == "10.0.128.9" and {c.type for c in patched.status.conditions} == {"Ready", gate}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod_status("web-0", "default", {"status": {"podIP": "10.0.128.999"}})
    assert err.value.status == 422 and "status.podIP" in err.value.body


def test_pod_validation_and_immutable_spec(core: kubernetes.client.CoreV1Api, raw: Raw) -> None:
    status, _, body = raw.request("POST", "/api/v1/namespaces/default/pods", pod_body(containers=[]))
    assert status == 422 and body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    ]
    bad_port = pod_body(containers=[{"name": "app", "image": "x", "ports": [{"containerPort": 70000}]}])
    status, _, body = raw.request("POST", "/api/v1/namespaces/default/pods", bad_port)
    assert status == 422 and body["message"] == (
        'Pod "web-0" is invalid: spec.containers[0].ports[0].containerPort: Invalid value: 70000: '
        "must be between 1 and 65535, inclusive"
    )
    core.create_namespaced_pod("default", pod_body())
    core.patch_namespaced_pod("web-0", "default", {"spec": {"containers": [{"name": "app", "image": "app:2"}]}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("web-0", "default", {"spec": {"restartPolicy": "Never"}})
    assert err.value.status == 422 and "pod updates may not change fields other than" in err.value.body


def test_graceful_pod_deletion(core: kubernetes.client.CoreV1Api, raw: Raw) -> None:
    core.create_namespaced_pod("default", pod_body("unscheduled"))
    gone = core.delete_namespaced_pod("unscheduled", "default")  # never scheduled: deleted at once
    assert gone.metadata.name == "unscheduled" and core.list_namespaced_pod("default").items == []
    core.create_namespaced_pod("default", pod_body("web-1", nodeName="node-a", terminationGracePeriodSeconds=45))
    pending = core.delete_namespaced_pod("web-1", "default")
    assert pending.metadata.deletion_grace_period_seconds == 45 and pending.metadata.deletion_timestamp is not None
    assert pending.metadata.generation == 2
    # A longer period changes nothing; a shorter one moves the deadline; 0 (the kubelet) removes the pod.
    again = core.delete_namespaced_pod("web-1", "default", grace_period_seconds=60)
    assert again.metadata.deletion_grace_period_seconds == 45
    shorter = core.delete_namespaced_pod("web-1", "default", grace_period_seconds=5)
    assert shorter.metadata.deletion_grace_period_seconds == 5
    # Still there, and writable (a status update does not finish the deletion).
    core.patch_namespaced_pod_status("web-1", "default", {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("web-1", "default").metadata.deletion_timestamp is not None
    status, _, _ = raw.request("DELETE", "/api/v1/namespaces/default/pods/web-1?gracePeriodSeconds=0")
    assert status == 200 and core.list_namespaced_pod("default").items == []


def test_endpointslices_list_and_watch_by_service_name(api_client: kubernetes.client.ApiClient, emu: Emulator) -> None:
    discovery = kubernetes.client.DiscoveryV1Api(api_client)
    created = discovery.create_namespaced_endpoint_slice("default", slice_body("web-abcde"))
    assert created.ports[0].name == "http" and created.endpoints[0].conditions.ready is True
    discovery.create_namespaced_endpoint_slice("default", slice_body("other-abcde", service="other"))
    selected = discovery.list_namespaced_endpoint_slice("default", label_selector="kubernetes.io/service-name=web")
    assert [s.metadata.name for s in selected.items] == ["web-abcde"]
    events: list[tuple[str, str]] = []

    def watch() -> None:
        for event in kubernetes.watch.Watch().stream(
            discovery.list_namespaced_endpoint_slice,
            "default",
            label_selector="kubernetes.io/service-name=web",
            resource_version=selected.metadata.resource_version,
            timeout_seconds=3,
        ):
            events.append((event["type"], event["object"].metadata.name))
            if len(events) == 2:
                return

    thread = threading.Thread(target=watch)
    thread.start()
    discovery.patch_namespaced_endpoint_slice(
        "web-abcde", "default", {"endpoints": [{"addresses": ["10.0.128.6"], "conditions": {"ready": False}}]}
    )
    discovery.patch_namespaced_endpoint_slice("other-abcde", "default", {"metadata": {"labels": {"x": "y"}}})
    discovery.delete_namespaced_endpoint_slice("web-abcde", "default")
    thread.join(timeout=10)
    assert events == [("MODIFIED", "web-abcde"), ("DELETED", "web-abcde")]


def test_endpointslice_defaults_and_null_lists(raw: Raw) -> None:
    body = slice_body(ports=[{"port": 80}], endpoints=[{"addresses": ["10.0.128.5"]}])
    status, _, created = raw.request("POST", SLICES, body)
    assert status == 201
    assert created["ports"] == [{"name": "", "port": 80, "protocol": "TCP"}]  # v1 defaults
    assert created["endpoints"] == [{"addresses": ["10.0.128.5"], "conditions": {}}]
    status, _, empty = raw.request("POST", SLICES, slice_body("empty-abcde", endpoints=[], ports=[]))
    # No omitempty on endpoints and ports: an empty list reads back as null (as a placeholder slice does).
    assert status == 201 and empty["endpoints"] is None and empty["ports"] is None


@pytest.mark.parametrize(
    ("fields", "causes"),
    [
        ({"addressType": None}, [("FieldValueRequired", "addressType", "Required value")]),
        (
            {"addressType": "IP"},
            [
                (
                    "FieldValueNotSupported",
                    "addressType",
                    'Unsupported value: "IP": supported values: "FQDN", "IPv4", "IPv6"',
                )
            ],
        ),
        (
            {"endpoints": [{"addresses": ["2001:db8::1"]}]},
            [
                (
                    "FieldValueInvalid",
                    "endpoints[0].addresses[0]",
                    'Invalid value: "2001:db8::1": must be a valid IPv4 address',
                )
            ],
        ),
        (
            {"endpoints": [{"addresses": ["127.0.0.1"]}]},
            [
                (
                    "FieldValueInvalid",
                    "endpoints[0].addresses[0]",
                    'Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
                )
            ],
        ),
        (
            {"endpoints": [{"addresses": []}]},
            [("FieldValueRequired", "endpoints[0].addresses", "Required value: must contain at least 1 address")],
        ),
        (
            {"endpoints": [{"addresses": [f"10.0.{i // 250}.{i % 250 + 1}"]} for i in range(1001)]},
            [("FieldValueTooMany", "endpoints", "Too many: 1001: must have at most 1000 items")],
        ),
        (
            {"ports": [{"name": f"p{i}", "port": i + 1} for i in range(101)]},
            [("FieldValueTooMany", "ports", "Too many: 101: must have at most 100 items")],
        ),
        (
            {"ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}]},
            [("FieldValueDuplicate", "ports[1].name", 'Duplicate value: "http"')],
        ),
        (
            {"ports": [{"name": "HTTP", "port": 80, "protocol": "ICMP"}]},
            [
                ("FieldValueInvalid", "ports[0].name", None),
                (
                    "FieldValueNotSupported",
                    "ports[0].protocol",
                    'Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
                ),
            ],
        ),
    ],
)
def test_endpointslice_validation(raw: Raw, fields: dict[str, Any], causes: list[tuple[str, str, str | None]]) -> None:
    body = slice_body(**fields)
    if body.get("addressType") is None:
        del body["addressType"]
    status, _, answer = raw.request("POST", SLICES, body)
    assert status == 422 and answer["reason"] == "Invalid"
    assert answer["details"]["kind"] == "EndpointSlice" and answer["details"]["group"] == "discovery.k8s.io"
    got = [(c["reason"], c["field"], c["message"]) for c in answer["details"]["causes"]]
    assert [(r, f) for r, f, _ in got] == [(r, f) for r, f, _ in causes]
    for (_, _, message), (_, _, wanted) in zip(got, causes, strict=True):
        assert wanted is None or message == wanted


def test_endpointslice_address_type_is_immutable(raw: Raw) -> None:
    raw.request("POST", SLICES, slice_body())
    status, _, answer = raw.request(
        "PATCH",
        f"{SLICES}/web-abcde",
        {"addressType": "IPv6", "endpoints": [{"addresses": ["2001:db8::1"]}]},
        content_type="application/merge-patch+json",
    )
    assert status == 422
    assert answer["message"] == (
        'EndpointSlice.discovery.k8s.io "web-abcde" is invalid: addressType: Invalid value: "IPv6": field is immutable'
    )


def test_rbac_covers_pods_and_endpointslices(emu: Emulator, raw: Raw) -> None:
    emu.enable_rbac({"reader": []})
    emu.tokens["reader-token"] = "reader"
    emu.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "slices"},
            "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}],
        }
    )
    emu.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "slices"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "slices"},
            "subjects": [{"kind": "User", "name": "reader", "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    auth = {"Authorization": "Bearer reader-token"}
    assert raw.request("GET", SLICES, headers=auth)[0] == 200
    status, _, body = raw.request("GET", "/api/v1/namespaces/default/pods", headers=auth)
    assert status == 403 and 'cannot list resource "pods"' in body["message"]


def test_kubectl_get_pods_and_endpointslices(kubectl: Kubectl, emu: Emulator) -> None:
    emu.create(pod_body("web-0", nodeName="node-a"))
    emu.create(slice_body())
    table = kubectl("get", "pods,endpointslices").stdout
    assert "pod/web-0" in table and "0/1" in table and "Pending" in table
    assert "endpointslice.discovery.k8s.io/web-abcde" in table and "IPv4" in table and "10.0.128.5" in table
    listed = as_json(kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "json"))
    assert [i["metadata"]["name"] for i in listed["items"]] == ["web-abcde"]
    wide = kubectl("get", "pods", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-2:] == ["READINESS", "GATES"]
    kubectl("delete", "pod", "web-0", "--wait=false")
    assert "Terminating" in kubectl("get", "pods").stdout
