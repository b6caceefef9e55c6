"""Validation the real kube-apiserver applies (observed on a real server) and the emulator once did not.

Each test cites the upstream rule (k8s.io/kubernetes pkg/apis/core/validation/validation.go unless noted) and
fails against the emulator as it was before.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from devstack.k8s_emulator import Emulator

from .conftest import Raw, service_body

SVC = "/api/v1/namespaces/default/services"
MERGE = "application/merge-patch+json"


def test_same_port_on_tcp_and_udp_gets_one_node_port(emu: Emulator) -> None:
    # registry/core/service/storage/alloc.go initNodePorts keys allocation by port number.
    ports = [
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        {"name": "dns-udp", "port": 53, "protocol": "UDP"},
        {"name": "web", "port": 80, "protocol": "TCP"},
    ]
    svc = emu.create(service_body("dns", type="LoadBalancer", ports=ports))
    node_ports = [p["nodePort"] for p in svc["spec"]["ports"]]
    assert node_ports[0] == node_ports[1] and node_ports[2] != node_ports[0]
    # A requested nodePort on one of them is shared too.
    ports[1]["nodePort"] = 31053
    svc = emu.create(service_body("dns2", type="NodePort", ports=ports))
    assert [p["nodePort"] for p in svc["spec"]["ports"]][:2] == [31053, 31053]


@pytest.mark.parametrize(
    ("spec", "annotations", "field", "value"),
    [
        ({"loadBalancerSourceRanges": ["10.0.0.1"]}, {}, "spec.LoadBalancerSourceRanges", "[10.0.0.1]"),
        (
            {"loadBalancerSourceRanges": ["10.0.0.0/8", "bogus"]},
            {},
            "spec.LoadBalancerSourceRanges",
            "[10.0.0.0/8 bogus]",
        ),
        (
            {},
            {"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8,10.0.0.1"},
            "metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges]",
            "10.0.0.0/8,10.0.0.1",
        ),
    ],
)
def test_source_ranges_must_be_cidrs(
    raw: Raw, spec: dict[str, Any], annotations: dict[str, str], field: str, value: str
) -> None:
    body = service_body("lb", type="LoadBalancer", **spec)
    body["metadata"]["annotations"] = annotations
    status, _, out = raw.request("POST", SVC, body)
    assert status == 422, out
    assert out["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": field,
            "message": f'Invalid value: "{value}": must be a list of IP ranges. For example, '
            "10.240.0.0/24,10.250.0.0/24 ",
        }
    ]


def test_valid_source_ranges_are_accepted(emu: Emulator) -> None:
    # Space padding is allowed (historical), host bits may be set (net.ParseCIDR).
    svc = emu.create(service_body("lb", type="LoadBalancer", loadBalancerSourceRanges=[" 10.0.0.1/8", "::/0"]))
    assert svc["spec"]["loadBalancerSourceRanges"] == [" 10.0.0.1/8", "::/0"]


@pytest.mark.parametrize(
    ("finalizer", "ok"),
    [
        ("example.com/cleanup", True),
        ("kubernetes", True),
        ("orphan", True),
        ("foregroundDeletion", True),
        ("cleanup", False),  # neither standard nor fully qualified
        ("bad/", False),
        ("not a name", False),
    ],
)
def test_finalizer_names(raw: Raw, finalizer: str, ok: bool) -> None:
    body = service_body("f")
    body["metadata"]["finalizers"] = ["example.com/first", finalizer]
    status, _, out = raw.request("POST", SVC, body)
    assert (status == 201) == ok, out
    if not ok:  # each finalizer named by its index, as kube-apiserver does
        assert status == 422 and out["details"]["causes"][0]["field"] == "metadata.finalizers[1]"
        assert out["message"].startswith('Service "f" is invalid: metadata.finalizers[1]: Invalid value: ')
    if finalizer == "cleanup":
        assert out["message"] == (
            'Service "f" is invalid: metadata.finalizers[1]: Invalid value: "cleanup": '
            "name is neither a standard finalizer name nor is it fully qualified"
        )


def test_node_provider_id_and_pod_cidrs_only_go_from_unset(raw: Raw, emu: Emulator) -> None:
    emu.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}})
    path = "/api/v1/nodes/n1"
    first = {"spec": {"providerID": "aws:///us-east-1a/i-1", "podCIDR": "10.1.0.0/24", "podCIDRs": ["10.1.0.0/24"]}}
    assert raw.request("PATCH", path, first, MERGE)[0] == 200
    status, _, out = raw.request("PATCH", path, {"spec": {"providerID": "aws:///us-east-1a/i-2"}}, MERGE)
    assert status == 422
    assert out["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "field": "spec.providerID",
            "message": 'Forbidden: node updates may not change providerID except from "" to valid',
        }
    ]
    status, _, out = raw.request("PATCH", path, {"spec": {"podCIDRs": ["10.2.0.0/24"]}}, MERGE)
    assert status == 422 and out["details"]["causes"][0]["field"] == "spec.podCIDRs"
    # The status subresource ignores spec, so it cannot trip the rule.
    status, _, _ = raw.request("PATCH", path + "/status", {"spec": {"providerID": "x"}, "status": {}}, MERGE)
    assert status == 200 and emu.get("nodes", None, "n1")["spec"]["providerID"] == "aws:///us-east-1a/i-1"


def test_server_side_apply_needs_a_field_manager(raw: Raw) -> None:
    body = service_body("ssa")
    body["apiVersion"], body["kind"] = "v1", "Service"
    status, _, out = raw.request("PATCH", f"{SVC}/ssa", body, "application/apply-patch+yaml")
    assert status == 422, out
    assert out["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    status, _, out = raw.request("PATCH", f"{SVC}/ssa?fieldManager=test", body, "application/apply-patch+yaml")
    assert status == 201, out


def test_event_with_null_involved_object_namespace_is_accepted(raw: Raw) -> None:
    # A Node's Event as some clients send it: involvedObject.namespace null (Go decodes it to "").
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "metadata": {"name": "n1.1", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "n1", "namespace": None, "uid": "u1"},
        "reason": "Registered",
        "message": "registered",
        "type": "Normal",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": "test"},
    }
    status, _, out = raw.request("POST", "/api/v1/namespaces/default/events", event)
    assert status == 201, out


def test_annotations_are_limited_to_256_kib(raw: Raw) -> None:
    # apimachinery ValidateAnnotationsSize: keys + values at most TotalAnnotationSizeLimitB (262,144 bytes).
    key = "example.com/big"
    fits = service_body("fits")
    fits["metadata"]["annotations"] = {key: "x" * (262_144 - len(key))}
    assert raw.request("POST", SVC, fits)[0] == 201
    over = service_body("over")
    over["metadata"]["annotations"] = {key: "x" * (262_145 - len(key))}
    status, _, out = raw.request("POST", SVC, over)
    assert status == 422 and out["details"]["causes"][0]["message"] == "Too long: may not be more than 262144 bytes"
