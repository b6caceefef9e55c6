"""Service defaulting, allocation and validation (422) like the real API server."""

from __future__ import annotations

import ipaddress
from typing import Any

import kubernetes
import pytest

from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.errors import ApiError

from .conftest import Raw, service_body

PATH = "/api/v1/namespaces/default/services"


def test_cluster_ip_defaults(emu: Emulator) -> None:
    svc = emu.create(service_body("web"))
    spec = svc["spec"]
    assert spec["type"] == "ClusterIP"
    assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/16")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    assert spec["sessionAffinity"] == "None" and spec["internalTrafficPolicy"] == "Cluster"
    assert spec["ports"] == [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]
    assert "externalTrafficPolicy" not in spec and "nodePort" not in spec["ports"][0]
    headless = emu.create(service_body("headless", clusterIP="None", ports=[{"port": 53, "protocol": "UDP"}]))
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["ports"][0]["targetPort"] == 53


def test_load_balancer_defaults_and_unique_node_ports(emu: Emulator) -> None:
    ports = [{"name": f"p{i}", "port": 1000 + i} for i in range(5)]
    a = emu.create(service_body("a", type="LoadBalancer", ports=ports))
    b = emu.create(service_body("b", type="NodePort", ports=ports))
    spec = a["spec"]
    assert spec["externalTrafficPolicy"] == "Cluster" and spec["allocateLoadBalancerNodePorts"] is True
    assert "healthCheckNodePort" not in spec
    node_ports = [p["nodePort"] for s in (a, b) for p in s["spec"]["ports"]]
    assert len(set(node_ports)) == 10 and all(30000 <= p <= 32767 for p in node_ports)
    assert a["spec"]["clusterIP"] != b["spec"]["clusterIP"]
    no_alloc = emu.create(service_body("c", type="LoadBalancer", allocateLoadBalancerNodePorts=False))
    assert "nodePort" not in no_alloc["spec"]["ports"][0]


def test_health_check_node_port_for_local(core: kubernetes.client.CoreV1Api, emu: Emulator) -> None:
    svc = emu.create(service_body("web", type="LoadBalancer", externalTrafficPolicy="Local"))
    hc = svc["spec"]["healthCheckNodePort"]
    assert 30000 <= hc <= 32767 and hc != svc["spec"]["ports"][0]["nodePort"]
    out = core.patch_namespaced_service("web", "default", {"spec": {"externalTrafficPolicy": "Cluster"}})
    assert out.spec.health_check_node_port is None
    out = core.patch_namespaced_service("web", "default", {"spec": {"externalTrafficPolicy": "Local"}})
    assert out.spec.health_check_node_port


def test_update_keeps_allocations_and_type_change_drops_them(core: kubernetes.client.CoreV1Api, emu: Emulator) -> None:
    created = core.create_namespaced_service("default", service_body("web", type="LoadBalancer"))
    node_port = created.spec.ports[0].node_port
    # A PUT that omits clusterIP / nodePort keeps the allocated values (patchAllocatedValues).
    fresh = service_body("web", type="LoadBalancer")
    fresh["metadata"]["resourceVersion"] = created.metadata.resource_version
    replaced = core.replace_namespaced_service("web", "default", fresh)
    assert replaced.spec.cluster_ip == created.spec.cluster_ip
    assert replaced.spec.ports[0].node_port == node_port
    core.patch_namespaced_service_status(
        "web", "default", {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}}
    )
    out = core.patch_namespaced_service("web", "default", {"spec": {"type": "ClusterIP"}})
    assert out.spec.ports[0].node_port is None
    assert out.spec.external_traffic_policy is None and out.spec.allocate_load_balancer_node_ports is None
    assert not out.status.load_balancer.ingress  # LB status is cleared when the type changes
    assert out.spec.cluster_ip == created.spec.cluster_ip
    # The released nodePort can be claimed explicitly by another service.
    other = emu.create(service_body("other", type="NodePort", ports=[{"port": 80, "nodePort": node_port}]))
    assert other["spec"]["ports"][0]["nodePort"] == node_port


def _invalid(raw: Raw, body: dict[str, Any]) -> dict[str, Any]:
    status, _, out = raw.request("POST", PATH, body)
    assert status == 422, out
    assert out["kind"] == "Status" and out["reason"] == "Invalid" and out["code"] == 422
    assert out["details"]["kind"] == "Service" and out["details"]["causes"]
    return out


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (service_body("Bad_Name"), "metadata.name"),
        (service_body("1abc"), "metadata.name"),
        ({"metadata": {"labels": {}}, "spec": {"ports": [{"port": 80}]}}, "metadata.name"),
        (service_body("x", ports=[{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]), "spec.ports[1]"),
        (service_body("x", ports=[{"port": 0}]), "spec.ports[0].port"),
        (service_body("x", ports=[{"port": 70000}]), "spec.ports[0].port"),
        (service_body("x", ports=[{"port": 80, "protocol": "HTTP"}]), "spec.ports[0].protocol"),
        (service_body("x", type="NodePort", ports=[{"port": 80, "nodePort": 80}]), "spec.ports[0].nodePort"),
        (service_body("x", ports=[{"port": 80, "nodePort": 30001}]), "spec.ports[0].nodePort"),
        (service_body("x", type="Weird"), "spec.type"),
        (service_body("x", ports=[]), "spec.ports"),
        (service_body("x", ports=[{"port": 80}, {"port": 81}]), "spec.ports[0].name"),
        (service_body("x", type="LoadBalancer", clusterIP="None"), "spec.clusterIPs[0]"),
        (service_body("x", clusterIP="192.168.0.1"), "spec.clusterIPs"),
        (service_body("x", externalTrafficPolicy="Local"), "spec.externalTrafficPolicy"),
        (service_body("x", loadBalancerClass="service.k8s.aws/nlb"), "spec.loadBalancerClass"),
        (service_body("x", type="ExternalName"), "spec.externalName"),
    ],
)
def test_invalid_services(raw: Raw, body: dict[str, Any], field: str) -> None:
    out = _invalid(raw, body)
    assert field in [c["field"] for c in out["details"]["causes"]]


def test_node_port_conflicts(raw: Raw, emu: Emulator) -> None:
    emu.create(service_body("a", type="NodePort", ports=[{"port": 80, "nodePort": 30080}]))
    out = _invalid(raw, service_body("b", type="NodePort", ports=[{"port": 80, "nodePort": 30080}]))
    assert "already allocated" in out["message"]
    a = emu.get("services", "default", "a")
    assert a is not None
    out = _invalid(raw, service_body("c", clusterIP=a["spec"]["clusterIP"]))
    assert "already allocated" in out["message"]


def test_immutable_cluster_ip_and_lb_class(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service(
        "default", service_body("web", type="LoadBalancer", loadBalancerClass="service.k8s.aws/nlb")
    )
    mp = "application/merge-patch+json"
    status, _, out = raw.request(
        "PATCH", f"{PATH}/web", {"spec": {"clusterIP": "10.96.1.1", "clusterIPs": ["10.96.1.1"]}}, mp
    )
    assert status == 422 and "spec.clusterIPs[0]" in out["message"]
    status, _, out = raw.request("PATCH", f"{PATH}/web", {"spec": {"loadBalancerClass": "other.io/x"}}, mp)
    assert status == 422 and "spec.loadBalancerClass" in out["message"]


def test_external_name_has_no_cluster_ip(emu: Emulator) -> None:
    svc = emu.create(service_body("ext", type="ExternalName", externalName="db.example.com", ports=[]))
    assert "clusterIP" not in svc["spec"] and "ipFamilies" not in svc["spec"]


def test_a_dual_stack_cluster_allocates_an_address_per_family() -> None:
    """--service-cluster-ip-range with two CIDRs: PreferDualStack gets the cluster's families (the given one
    first), one cluster IP each; SingleStack the one family; a single-stack cluster refuses IPv6."""
    emu = Emulator(service_families=("IPv4", "IPv6"))
    dual = emu.create(service_body("dual", ipFamilyPolicy="PreferDualStack", ipFamilies=["IPv6"]))["spec"]
    assert dual["ipFamilies"] == ["IPv6", "IPv4"]
    assert [ipaddress.ip_address(ip).version for ip in dual["clusterIPs"]] == [6, 4]
    assert dual["clusterIP"] == dual["clusterIPs"][0]
    single = emu.create(service_body("single"))["spec"]
    assert single["ipFamilies"] == ["IPv4"] and len(single["clusterIPs"]) == 1
    with pytest.raises(ApiError, match="not configured"):
        Emulator().create(service_body("v6", ipFamilies=["IPv6"]))
