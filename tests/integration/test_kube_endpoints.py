"""ccm.k8s.endpoints (in ccm.k8s.kube.Kube) over HTTP against the emulator: a Service's EndpointSlices by label,
across pages; the pods of gated endpoints by the cheapest read; our readiness-gate condition on pods/status merged
by type as kube-apiserver's strategic merge patch does, guarded by the pod's UID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccm.contracts.readiness_gates import gate_condition_type
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from devstack.k8s_emulator import Emulator

GATE = gate_condition_type("web")


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = Emulator().start()
    yield emu
    emu.stop()


@pytest.fixture
def kube(emulator: Emulator, tmp_path: Path) -> Kube:
    return Kube(from_kubeconfig(emulator.write_kubeconfig(str(tmp_path / "kubeconfig"))))


def eslice(name: str, service: str, ip: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def pod(name: str, app: str = "web", gates: tuple[str, ...] = (GATE,)) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {
            "containers": [{"name": "app", "image": "app:1"}],
            "readinessGates": [{"conditionType": g} for g in gates],
            "nodeName": "node-a",
        },
    }


def requests(emulator: Emulator, method: str, fragment: str) -> list[dict[str, Any]]:
    return [e for e in emulator.request_log.snapshot() if e["method"] == method and fragment in e["path"]]


def test_slices_of_one_service_by_label_across_pages(emulator: Emulator, kube: Kube) -> None:
    for i in range(5):
        emulator.create(eslice(f"web-{i}", "web", f"10.0.0.{10 + i}"))
    emulator.create(eslice("api-0", "api", "10.0.0.99"))
    emulator.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    emulator.create(eslice("web-elsewhere", "web", "10.0.0.98", namespace="other"))
    kube.page_size = 2
    emulator.clear_log()
    slices = kube.list_endpoint_slices("default", "web")
    assert sorted(s["metadata"]["name"] for s in slices) == [f"web-{i}" for i in range(5)]
    assert len(requests(emulator, "GET", "/endpointslices")) == 3  # 2 + 2 + 1
    assert kube.list_endpoint_slices("default", "none") == []


def test_a_few_pods_are_read_by_name_many_by_the_services_selector(emulator: Emulator, kube: Kube) -> None:
    for i in range(6):
        emulator.create(pod(f"web-{i}"))
    emulator.create(pod("api-0", app="api"))
    emulator.clear_log()
    few = kube.pods_by_name("default", ["web-1", "web-gone"], {"app": "web"})
    assert list(few) == ["web-1"]  # a pod deleted since its endpoint was listed is left out
    assert len(requests(emulator, "GET", "/pods/")) == 2 and not requests(emulator, "GET", "/pods?")
    emulator.clear_log()
    names = ["web-0", "web-2", "web-3", "web-5", "api-0", "web-gone"]
    many = kube.pods_by_name("default", names, {"app": "web"})
    assert sorted(many) == ["web-0", "web-2", "web-3", "web-5"]  # api-0 is not the Service's: not its endpoint
    (listed,) = emulator.request_log.snapshot()
    assert listed["path"] == "/api/v1/namespaces/default/pods"
    assert kube.pods_by_name("default", []) == {}


def test_the_gate_condition_merges_by_type_and_keeps_the_kubelets(emulator: Emulator, kube: Kube) -> None:
    created = emulator.create(pod("web-0"))
    uid = created["metadata"]["uid"]
    kubelet = {
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.10",
            "podIPs": [{"ip": "10.0.0.10"}],
            "conditions": [
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"},
            ],
        }
    }
    kube.api.patch("/api/v1/namespaces/default/pods/web-0/status", kubelet)
    initial = {
        "type": GATE,
        "status": "False",
        "reason": "Elb.InitialHealthChecking",
        "lastTransitionTime": "2026-08-01T12:00:00Z",
    }
    written = kube.patch_pod_condition("default", "web-0", uid, initial)
    assert written is not None
    assert sorted((c["type"], c["status"]) for c in written["status"]["conditions"]) == [
        ("ContainersReady", "True"),
        ("Ready", "False"),
        (GATE, "False"),
    ]
    healthy = {"type": GATE, "status": "True", "lastTransitionTime": "2026-08-01T12:00:30Z"}
    written = kube.patch_pod_condition("default", "web-0", uid, healthy)
    assert written is not None
    ours = [c for c in written["status"]["conditions"] if c["type"] == GATE]
    assert ours == [healthy]  # replaced in place by type, not appended, and the old reason is gone
    assert emulator.get("pods", "default", "web-0")["status"]["phase"] == "Running"


def test_a_pod_gone_or_recreated_under_the_name_is_never_written(emulator: Emulator, kube: Kube) -> None:
    condition = {"type": GATE, "status": "True", "lastTransitionTime": "2026-08-01T12:00:00Z"}
    assert kube.patch_pod_condition("default", "web-0", "0e4d1b2c-0000-4000-8000-000000000000", condition) is None
    emulator.create(pod("web-0"))
    assert kube.patch_pod_condition("default", "web-0", "0e4d1b2c-0000-4000-8000-000000000000", condition) is None
    stored = emulator.get("pods", "default", "web-0")
    assert GATE not in {c.get("type") for c in (stored.get("status") or {}).get("conditions") or []}
