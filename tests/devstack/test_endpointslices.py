"""The devstack's EndpointSlice controller (devstack.endpointslices) and pod world (devstack.pod_world) against the
emulator's store: what kube-controller-manager's EndpointSlice controller would write for the same pods."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.endpointslices import CONTROLLER_NAME, EndpointSliceController
from devstack.k8s_emulator import Emulator
from devstack.pod_world import FakeClock, Kubelet, PodSet, RollingUpdate, container

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
NODES = [f"ip-10-0-{128 + i}-10.ec2.internal" for i in range(3)]


def _node(name: str, zone: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
        "spec": {"podCIDR": f"10.0.{128 + index}.0/24"},
        "status": {"addresses": [{"type": "InternalIP", "address": f"10.0.{128 + index}.10"}]},
    }


class World:
    def __init__(self, emu: Emulator, ready_after: float = 2.0, max_endpoints: int = 100) -> None:
        self.emu, self.clock = emu, FakeClock()
        self.kubelet = Kubelet(emu, ready_after=ready_after, clock=self.clock)
        self.controller = EndpointSliceController(emu, max_endpoints_per_slice=max_endpoints)

    def settle(self, seconds: float = 0.0) -> None:
        """Runs the kubelet and the controller, lets ``seconds`` pass, runs them again."""
        for step in (0.0, seconds):
            self.clock.advance(step)
            for _ in range(2):  # the kubelet's writes, then the controller's
                self.kubelet.sync()
                self.controller.sync_all()

    def slices(self, service: str = "web") -> list[dict[str, Any]]:
        return sorted(
            (
                s
                for s in self.emu.list("endpointslices", "default")
                if (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name") == service
            ),
            key=lambda s: s["metadata"]["name"],
        )

    def endpoints(self, service: str = "web") -> dict[str, dict[str, Any]]:
        return {e["targetRef"]["name"]: e for s in self.slices(service) for e in s["endpoints"] or []}


@pytest.fixture
def world() -> Iterator[World]:
    emu = Emulator()
    for i, (name, zone) in enumerate(zip(NODES, ZONES, strict=True)):
        emu.create(_node(name, zone, i))
    yield World(emu)


def _service(world: World, name: str = "web", target: int | str = 8080, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"team": "ccm"}},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": target}], **spec},
    }
    return world.emu.create(body)


def _template(ports: list[dict[str, Any]] | None = None, image: str = "app:1", **spec: Any) -> dict[str, Any]:
    return {
        "containers": [container(image=image, ports=ports or [{"name": "http", "containerPort": 8080}])],
        "terminationGracePeriodSeconds": 30,
        **spec,
    }


def test_endpoints_follow_readiness_and_graceful_termination(world: World) -> None:
    svc = _service(world)
    pods = PodSet(world.emu, "web", NODES)
    names = pods.create(3, _template())
    world.settle()
    (slice_,) = world.slices()
    assert slice_["metadata"]["name"].startswith("web-") and len(slice_["metadata"]["name"]) == len("web-") + 5
    assert slice_["metadata"]["labels"] == {
        "team": "ccm",
        "kubernetes.io/service-name": "web",
        "endpointslice.kubernetes.io/managed-by": CONTROLLER_NAME,
    }
    owner = slice_["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Service",
        "web",
        svc["metadata"]["uid"],
        True,
    )
    assert slice_["addressType"] == "IPv4"
    assert slice_["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    endpoints = world.endpoints()
    assert sorted(endpoints) == sorted(names)
    first = world.emu.get("pods", "default", names[0])
    assert first is not None
    assert endpoints[names[0]] == {
        "addresses": [first["status"]["podIP"]],
        "conditions": {"ready": False, "serving": False, "terminating": False},
        "nodeName": NODES[0],
        "zone": ZONES[0],
        "targetRef": {"kind": "Pod", "namespace": "default", "name": names[0], "uid": first["metadata"]["uid"]},
    }
    assert first["status"]["podIP"].startswith("10.0.128.") and first["status"]["hostIP"] == "10.0.128.10"
    world.settle(2.0)  # containers ready
    assert all(
        e["conditions"] == {"ready": True, "serving": True, "terminating": False} for e in world.endpoints().values()
    )
    deleted = world.emu.delete("pods", "default", names[1])
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 30 and deleted["metadata"]["deletionTimestamp"]
    world.settle(1.0)
    assert world.endpoints()[names[1]]["conditions"] == {"ready": False, "serving": True, "terminating": True}
    world.settle(30.0)  # the grace period is over: the kubelet deletes the pod, the endpoint goes
    assert sorted(world.endpoints()) == sorted([names[0], names[2]])
    assert world.emu.get("pods", "default", names[1]) is None
    assert world.controller.sync_all() == 0  # nothing left to write: no spurious updates


def test_named_target_ports_resolve_per_pod_into_separate_slices(world: World) -> None:
    _service(world, target="http")
    pods = PodSet(world.emu, "web", NODES)
    on_8080 = pods.create(2, _template([{"name": "http", "containerPort": 8080}]))
    on_9090 = pods.create(2, _template([{"name": "http", "containerPort": 9090}], image="app:2"))
    without = pods.create(1, _template([{"name": "metrics", "containerPort": 9100}], image="app:3"))
    world.settle()
    by_ports = {
        tuple(p["port"] for p in s["ports"] or []): sorted(e["targetRef"]["name"] for e in s["endpoints"])
        for s in world.slices()
    }
    # A pod without the named port still is an endpoint, in a slice without that port (podutil.FindPort fails).
    assert by_ports == {(8080,): sorted(on_8080), (9090,): sorted(on_9090), (): sorted(without)}


def test_more_than_100_endpoints_are_split_and_a_shrink_keeps_endpoints_in_place(world: World) -> None:
    _service(world)
    pods = PodSet(world.emu, "web", NODES)
    pods.create(250, _template())
    world.settle(2.0)
    sizes = sorted(len(s["endpoints"]) for s in world.slices())
    assert sizes == [50, 100, 100]
    before = {s["metadata"]["name"]: {e["targetRef"]["name"] for e in s["endpoints"]} for s in world.slices()}
    for pod in pods.pods()[:30]:
        world.emu.delete("pods", "default", pod["metadata"]["name"], grace_period=0)
    world.settle()
    after = {s["metadata"]["name"]: {e["targetRef"]["name"] for e in s["endpoints"]} for s in world.slices()}
    assert set(after) == set(before)  # same slices; each lost only its removed endpoints
    assert all(after[name] <= before[name] for name in after) and sum(map(len, after.values())) == 220
    pods.create(10, _template())
    world.settle(2.0)
    # New endpoints fill an existing slice with room (the fullest that takes them all), not a new slice.
    assert len(world.slices()) == 3 and sum(len(s["endpoints"]) for s in world.slices()) == 230
    assert max(len(s["endpoints"]) for s in world.slices()) <= 100


def test_a_service_without_endpoints_has_one_placeholder_slice_recycled_later(world: World) -> None:
    _service(world)
    world.settle()
    (placeholder,) = world.slices()
    assert placeholder["endpoints"] is None and placeholder["ports"] is None
    PodSet(world.emu, "web", NODES).create(2, _template())
    world.settle()
    (slice_,) = world.slices()
    assert slice_["metadata"]["name"] == placeholder["metadata"]["name"] and len(slice_["endpoints"]) == 2
    world.emu.delete("services", "default", "web")
    world.settle()
    assert world.slices() == []  # what the garbage collector does through the ownerReference


def test_readiness_gates_hold_the_endpoint_not_ready_until_their_condition_is_true(world: World) -> None:
    _service(world)
    gate = "target-health.elbv2.k8s.aws/k8s-web-0123456789"
    (name,) = PodSet(world.emu, "web", NODES).create(1, _template(readinessGates=[{"conditionType": gate}]))
    world.settle()
    world.settle(5.0)
    pod = world.emu.get("pods", "default", name)
    assert pod is not None
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert world.endpoints()[name]["conditions"] == {"ready": False, "serving": False, "terminating": False}
    pod["status"]["conditions"].append({"type": gate, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    world.emu.update(pod, subresource="status")  # what a controller honouring the gate writes
    world.settle()
    assert world.endpoints()[name]["conditions"] == {"ready": True, "serving": True, "terminating": False}


def test_a_rolling_update_of_20_pods_produces_the_expected_slices_at_each_step(world: World) -> None:
    _service(world)
    pods = PodSet(world.emu, "web", NODES)
    pods.create(20, _template())
    world.settle(2.0)
    rollout = RollingUpdate(pods, _template(image="app:2"), replicas=20, max_surge="25%", max_unavailable="25%")
    assert (rollout.max_surge, rollout.max_unavailable) == (5, 5)
    steps = []
    for action in rollout.run(lambda: world.settle(1.0)):
        steps.append(action)
        live = {p["metadata"]["name"]: p for p in pods.pods(include_terminating=True)}
        endpoints = world.endpoints()
        # Every pod with an IP is an endpoint, with the conditions its state gives, in slices of <= 100.
        assert set(endpoints) == {n for n, p in live.items() if p["status"].get("podIP")}
        for name, endpoint in endpoints.items():
            terminating = bool(live[name]["metadata"].get("deletionTimestamp"))
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in live[name]["status"]["conditions"])
            assert endpoint["conditions"] == {
                "ready": ready and not terminating,
                "serving": ready,
                "terminating": terminating,
            }
        assert len(world.slices()) == 1  # at most 25 + 5 terminating endpoints: one slice throughout
        ready_endpoints = sum(1 for e in endpoints.values() if e["conditions"]["ready"])
        assert ready_endpoints >= 20 - 5  # maxUnavailable holds at every step
        assert sum(1 for p in live.values() if not p["metadata"].get("deletionTimestamp")) <= 20 + 5  # maxSurge
    # First step: 5 new pods (surge), 5 old ones terminating (unavailable budget).
    assert steps[0] == {"created": 5, "deleted": 5}
    assert sum(step["created"] for step in steps) == 20 and sum(step["deleted"] for step in steps) == 20
    world.settle(31.0)
    final = world.endpoints()
    assert len(final) == 20 and all(e["conditions"]["ready"] for e in final.values())
    assert {p["spec"]["containers"][0]["image"] for p in pods.pods()} == {"app:2"}
    assert len(world.slices()) == 1


def test_the_background_loop_follows_changes() -> None:
    emu = Emulator()
    emu.create(_node(NODES[0], ZONES[0], 0))
    kubelet = Kubelet(emu, ready_after=0.0)
    controller = EndpointSliceController(emu, interval=0.02).start()
    try:
        emu.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
            }
        )
        PodSet(emu, "web", NODES[:1]).create(2, _template())
        kubelet.sync()
        kubelet.sync()
        deadline = time.monotonic() + 5
        while True:
            slices = emu.list("endpointslices", "default")
            ready = [e for s in slices for e in s["endpoints"] or [] if e["conditions"]["ready"]]
            if len(ready) == 2:
                break
            assert time.monotonic() < deadline, slices
            time.sleep(0.02)
        assert slices[0]["ports"] == [{"name": "", "port": 80, "protocol": "TCP"}]
    finally:
        controller.stop()


def test_a_dual_stack_service_gets_slices_of_each_family_with_the_pods_address_of_it() -> None:
    """reconcileByAddressType: one set of slices per spec.ipFamilies entry, each endpoint the pod's address of
    that family (podIPs); a pod without one is no endpoint of that family; a family dropped loses its slices."""
    emu = Emulator(service_families=("IPv4", "IPv6"))  # a dual-stack cluster
    for i, (name, zone) in enumerate(zip(NODES, ZONES, strict=True)):
        emu.create(_node(name, zone, i))
    world = World(emu)
    world.kubelet.ipv6_pools = {NODES[0]: "2600:1f18:0:8000::/64", NODES[1]: "2600:1f18:0:8001::/64"}
    svc = _service(world, ipFamilies=["IPv6", "IPv4"], ipFamilyPolicy="PreferDualStack")
    PodSet(world.emu, "web", NODES).create(3, _template())
    world.settle(3.0)
    by_family = {s["addressType"]: s for s in world.slices()}
    assert sorted(by_family) == ["IPv4", "IPv6"]
    v6 = {e["targetRef"]["name"]: e["addresses"] for e in by_family["IPv6"]["endpoints"]}
    v4 = {e["targetRef"]["name"]: e["addresses"] for e in by_family["IPv4"]["endpoints"]}
    assert len(v4) == 3 and len(v6) == 2  # the third node gives its pods no IPv6 address
    assert all(addresses[0].startswith("2600:1f18:0:800") for addresses in v6.values())
    assert all(e["conditions"]["ready"] for e in by_family["IPv6"]["endpoints"])
    assert by_family["IPv6"]["ports"] == by_family["IPv4"]["ports"]

    assert svc["spec"]["ipFamilies"] == ["IPv6", "IPv4"] and len(svc["spec"]["clusterIPs"]) == 2
    # Downgraded to single-stack: the secondary family's slices go.
    svc["spec"]["ipFamilies"], svc["spec"]["ipFamilyPolicy"] = ["IPv6"], "SingleStack"
    svc = world.emu.update(svc)
    assert svc["spec"]["ipFamilies"] == ["IPv6"] and len(svc["spec"]["clusterIPs"]) == 1
    world.settle()
    assert [s["addressType"] for s in world.slices()] == ["IPv6"]
