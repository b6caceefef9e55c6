"""The IP targets a Service wants from its EndpointSlices (ccm.contracts.endpoints): slices shaped as
kube-controller-manager's EndpointSlice controller writes them (ports named after the Service's ports, each
carrying the targetPort resolved for the slice's pods; ready / serving / terminating; targetRef to the Pod)."""

from __future__ import annotations

from typing import Any

from ccm.contracts.endpoints import (
    DesiredTargets,
    IpTarget,
    ServicePortKey,
    address_type,
    desired_ip_targets,
    gate_candidates,
    waits_only_on_our_gates,
)
from ccm.contracts.readiness_gates import gate_condition_type

GATE = gate_condition_type("web")
HTTP = ServicePortKey(80, "TCP")
METRICS = ServicePortKey(9090, "TCP")


def svc(*ports: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "uid": "svc-uid"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "web"},
            "ports": list(ports) or [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}],
            **spec,
        },
    }


def ep(
    ip: str,
    pod: str,
    *,
    ready: bool | None = True,
    serving: bool | None = None,
    terminating: bool | None = False,
    node: str = "node-a",
    kind: str = "Pod",
) -> dict[str, Any]:
    conditions: dict[str, Any] = {}
    if ready is not None:
        conditions["ready"] = ready
    conditions["serving"] = ready if serving is None else serving
    if terminating is not None:
        conditions["terminating"] = terminating
    return {
        "addresses": [ip],
        "conditions": conditions,
        "nodeName": node,
        "zone": "us-east-1a",
        "targetRef": {"kind": kind, "namespace": "default", "name": pod, "uid": f"uid-{pod}"},
    }


def eslice(
    name: str, endpoints: list[dict[str, Any]] | None, ports: list[dict[str, Any]] | None, family: str = "IPv4"
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "default",
            "generateName": "web-",
            "labels": {
                "kubernetes.io/service-name": "web",
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": family,
        "endpoints": endpoints,
        "ports": ports,
    }


def port(number: int, name: str = "http", protocol: str = "TCP") -> dict[str, Any]:
    return {"name": name, "port": number, "protocol": protocol}


def pod(
    name: str,
    *,
    gates: list[str] | None = None,
    conditions: dict[str, str] | None = None,
    node: str = "node-a",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node, "readinessGates": [{"conditionType": g} for g in gates or []]},
        "status": {"conditions": [{"type": k, "status": v} for k, v in (conditions or {}).items()]},
    }


def targets(result: DesiredTargets, key: ServicePortKey = HTTP) -> list[tuple[str, int]]:
    return sorted((t.ip, t.port) for t in result.by_port[key])


def test_ready_endpoints_of_every_slice_are_the_targets_and_terminating_ones_never() -> None:
    slices = [
        eslice("web-a", [ep("10.0.0.10", "p1"), ep("10.0.0.11", "p2", ready=False)], [port(8080)]),
        eslice(
            "web-b",
            [
                ep("10.0.1.10", "p3"),
                # terminating and still serving (the pod runs its preStop): deregistered at once
                ep("10.0.1.11", "p4", ready=False, serving=True, terminating=True),
                # a contradictory ready=true while terminating still never registers
                ep("10.0.1.12", "p5", ready=True, terminating=True),
            ],
            [port(8080)],
        ),
    ]
    result = desired_ip_targets(svc(), slices)
    assert targets(result) == [("10.0.0.10", 8080), ("10.0.1.10", 8080)]
    assert set(result.pods) == {"p1", "p3"}


def test_ready_absent_counts_as_ready_and_terminating_absent_as_not_terminating() -> None:
    """discovery/v1 EndpointConditions: "a nil value should be interpreted as ready" (the LBC requires true)."""
    slices = [eslice("web-a", [ep("10.0.0.10", "p1", ready=None, terminating=None)], [port(8080)])]
    assert targets(desired_ip_targets(svc(), slices)) == [("10.0.0.10", 8080)]


def test_a_named_target_port_resolves_per_slice_to_different_numbers() -> None:
    """Two pod templates name `http` differently (a rollout changing the container port): the controller puts them
    in different slices, each slice's `http` port carrying its own number."""
    slices = [
        eslice("web-old", [ep("10.0.0.10", "old-1"), ep("10.0.0.11", "old-2")], [port(8080)]),
        eslice("web-new", [ep("10.0.1.20", "new-1")], [port(9000)]),
    ]
    result = desired_ip_targets(svc(), slices)
    assert targets(result) == [("10.0.0.10", 8080), ("10.0.0.11", 8080), ("10.0.1.20", 9000)]


def test_each_service_port_takes_the_slice_port_of_its_name_and_protocol() -> None:
    service = svc(
        {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
        {"name": "metrics", "port": 9090, "protocol": "TCP", "targetPort": 9100},
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
    )
    slices = [
        eslice(
            "web-a",
            [ep("10.0.0.10", "p1")],
            # a slice port of another protocol under a Service port's name is not that port
            [port(8080), port(9100, "metrics"), port(5353, "dns", "UDP"), port(7000, "http", "UDP")],
        ),
        # the pods of this slice lack the named port `http`: the controller wrote no such port, so no http target
        eslice("web-b", [ep("10.0.1.10", "p2")], [port(9100, "metrics"), port(5353, "dns", "UDP")]),
    ]
    result = desired_ip_targets(service, slices)
    assert targets(result, HTTP) == [("10.0.0.10", 8080)]
    assert targets(result, METRICS) == [("10.0.0.10", 9100), ("10.0.1.10", 9100)]
    assert targets(result, ServicePortKey(53, "UDP")) == [("10.0.0.10", 5353), ("10.0.1.10", 5353)]
    assert result.pods["p1"] == {
        (HTTP, IpTarget("10.0.0.10", 8080)),
        (METRICS, IpTarget("10.0.0.10", 9100)),
        (ServicePortKey(53, "UDP"), IpTarget("10.0.0.10", 5353)),
    }


def test_an_unnamed_single_port_matches_the_slice_port_named_empty() -> None:
    service = svc({"port": 80, "targetPort": 8080})  # no name, protocol defaulted by the server (absent here)
    slices = [eslice("web-a", [ep("10.0.0.10", "p1")], [{"name": "", "port": 8080, "protocol": "TCP"}])]
    assert targets(desired_ip_targets(service, slices)) == [("10.0.0.10", 8080)]


def test_a_placeholder_slice_and_a_service_without_slices_want_nothing() -> None:
    placeholder = eslice("web-a", None, None)  # endpoints: null, ports: null, as the real server returns it
    assert desired_ip_targets(svc(), [placeholder]).by_port == {HTTP: frozenset()}
    assert desired_ip_targets(svc(), []).by_port == {HTTP: frozenset()}


def test_an_endpoint_in_two_slices_counts_once_and_ready_wins() -> None:
    """During a move between slices the same pod is listed twice, once with stale conditions."""
    for order in (1, -1):
        slices = [
            eslice("web-a", [ep("10.0.0.10", "p1", ready=False)], [port(8080)]),
            eslice("web-b", [ep("10.0.0.10", "p1"), ep("10.0.0.11", "p2")], [port(8080)]),
        ][::order]
        result = desired_ip_targets(svc(), slices)
        assert targets(result) == [("10.0.0.10", 8080), ("10.0.0.11", 8080)]


def test_only_the_services_family_and_pod_backed_endpoints_count() -> None:
    slices = [
        eslice("web-v4", [ep("10.0.0.10", "p1"), ep("10.0.0.99", "vm", kind="Node")], [port(8080)]),
        eslice("web-v6", [ep("2600:1f18::10", "p1")], [port(8080)], family="IPv6"),
        eslice("web-fqdn", [ep("web.example.com", "p9")], [port(8080)], family="FQDN"),
    ]
    assert targets(desired_ip_targets(svc(), slices)) == [("10.0.0.10", 8080)]
    dual = svc(ipFamilies=["IPv6", "IPv4"], ipFamilyPolicy="PreferDualStack")
    assert address_type(dual) == "IPv6"
    assert targets(desired_ip_targets(dual, slices)) == [("2600:1f18::10", 8080)]


def test_external_traffic_policy_local_does_not_filter_ip_targets() -> None:
    """Unlike instance targets, traffic to an ip target goes to the pod itself, never through a node's
    kube-proxy, so every ready endpoint on every node is a target (the LBC resolves ip endpoints alike)."""
    slices = [eslice("web-a", [ep("10.0.0.10", "p1", node="a"), ep("10.0.1.10", "p2", node="b")], [port(8080)])]
    cluster = desired_ip_targets(svc(externalTrafficPolicy="Cluster"), slices)
    local = desired_ip_targets(svc(externalTrafficPolicy="Local", healthCheckNodePort=32000), slices)
    assert cluster == local and len(local.by_port[HTTP]) == 2


def test_a_pod_waiting_only_on_our_gate_on_a_ready_node_is_registered() -> None:
    """The exception: its gate turns True only once the target is healthy, so it must be registered first."""
    slices = [
        eslice(
            "web-a",
            [
                ep("10.0.0.10", "gated", ready=False, node="node-a"),
                ep("10.0.0.11", "starting", ready=False, node="node-a"),
                ep("10.0.0.12", "other-gate", ready=False, node="node-a"),
                ep("10.0.0.13", "bad-node", ready=False, node="node-b"),
                ep("10.0.0.14", "no-gate", ready=False, node="node-a"),
                ep("10.0.0.15", "leaving", ready=False, terminating=True, node="node-a"),
                ep("10.0.0.16", "two-services", ready=False, node="node-a"),
                ep("10.0.0.17", "unread", ready=False, node="node-a"),
            ],
            [port(8080)],
        )
    ]
    assert gate_candidates(slices) == {
        "gated", "starting", "other-gate", "bad-node", "no-gate", "two-services", "unread"
    }  # fmt: skip
    ours_pending = {"Ready": "False", "ContainersReady": "True", GATE: "False"}
    pods = {
        "gated": pod("gated", gates=[GATE], conditions=ours_pending),
        "starting": pod("starting", gates=[GATE], conditions={"Ready": "False", "ContainersReady": "False"}),
        "other-gate": pod(
            "other-gate", gates=[GATE, "example.com/warm"], conditions={**ours_pending, "example.com/warm": "False"}
        ),
        "bad-node": pod("bad-node", gates=[GATE], conditions=ours_pending, node="node-b"),
        "no-gate": pod("no-gate", conditions={"Ready": "False", "ContainersReady": "True"}),
        "two-services": pod("two-services", gates=[GATE, gate_condition_type("api")], conditions=ours_pending),
    }
    result = desired_ip_targets(svc(), slices, pods=pods, ready_nodes={"node-a"}, gate=GATE)
    assert targets(result) == [("10.0.0.10", 8080), ("10.0.0.16", 8080)]
    # may become registrable with no slice change (the pod stays not Ready, so its endpoint does not change):
    # containers becoming ready, another gate turning True, a node turning Ready, a pod not read yet
    assert result.pending == {"starting", "other-gate", "bad-node", "unread"}
    # without a gate (the Service has none of ours) the exception never applies
    assert targets(desired_ip_targets(svc(), slices, pods=pods, ready_nodes={"node-a"})) == []


def test_a_deleted_gated_pod_is_not_registered() -> None:
    slices = [eslice("web-a", [ep("10.0.0.10", "p1", ready=False, terminating=None)], [port(8080)])]
    pods = {"p1": pod("p1", gates=[GATE], conditions={"ContainersReady": "True"}, deleting=True)}
    result = desired_ip_targets(svc(), slices, pods=pods, ready_nodes={"node-a"}, gate=GATE)
    assert targets(result) == [] and result.pending == set()


def test_waits_only_on_our_gates() -> None:
    assert waits_only_on_our_gates(pod("p", gates=[GATE], conditions={"ContainersReady": "True"}), GATE)
    assert not waits_only_on_our_gates(pod("p", conditions={"ContainersReady": "True"}), GATE)
    assert not waits_only_on_our_gates(pod("p", gates=[GATE], conditions={"ContainersReady": "False"}), GATE)


def test_targets_sort_numerically() -> None:
    ips = [IpTarget("10.0.0.10", 80), IpTarget("10.0.0.9", 80), IpTarget("::1", 80), IpTarget("10.0.0.9", 79)]
    assert sorted(ips, key=IpTarget.sort_key) == [ips[3], ips[1], ips[0], ips[2]]
