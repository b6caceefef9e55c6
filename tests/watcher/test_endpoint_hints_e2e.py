"""ENDPOINTS hints end to end: the watcher in-process against the Kubernetes API emulator and SQS FIFO in moto (both
real HTTP); slices are written as kube-controller-manager would (or by devstack.endpointslices from pods)."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

from ccm.contracts.messages import Delta, parse_delta
from devstack.endpointslices import EndpointSliceController
from devstack.k8s_emulator import Emulator
from devstack.pod_world import FakeClock, Kubelet, PodSet, RollingUpdate, container
from tests.watcher.conftest import MakeWatcher, deltas, metric, receive_all, summary, wait_until
from tests.watcher.objects import service
from watcher.endpoints import TARGET_TYPE_ANNOTATION

IP = {TARGET_TYPE_ANNOTATION: "ip"}


def pod_endpoint(ip: str, ready: bool = True) -> dict[str, Any]:
    """A ready endpoint backed by a pod, as the EndpointSlice controller writes it (only those can be targets)."""
    pod = "web-" + ip.replace(".", "-")
    return {"addresses": [ip], "conditions": {"ready": ready}, "targetRef": {"kind": "Pod", "name": pod}}


def endpoint_slice(
    name: str, svc: str = "web", ips: Sequence[str] = ("10.0.1.1",), namespace: str = "default"
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": svc,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "endpoints": [pod_endpoint(ip) for ip in ips],
        "ports": [{"name": "p80", "port": 8080, "protocol": "TCP"}],
    }


def set_ips(emu: Emulator, name: str, ips: Sequence[str], namespace: str = "default") -> dict[str, Any]:
    obj = copy.deepcopy(emu.get("endpointslices", namespace, name))
    assert obj is not None
    obj["endpoints"] = [pod_endpoint(ip) for ip in ips]
    return emu.update(obj)


def hints(items: list[Delta]) -> list[Delta]:
    return [d for d in items if d.type == "ENDPOINTS"]


def test_a_slice_change_of_an_ip_service_is_one_hint_in_the_services_group(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    watcher = make_watcher()
    url = queues["Service"]
    uid = emulator.create(service("web", annotations=IP))["metadata"]["uid"]
    assert summary(deltas(sqs, url, expect=1)) == [("ADDED", "default/web")]

    emulator.create(endpoint_slice("web-a"))
    [message] = receive_all(sqs, url, expect=1)
    hint = parse_delta(message["Body"])
    assert (hint.kind, hint.type, hint.key, hint.uid) == ("Service", "ENDPOINTS", "default/web", uid)
    assert hint.object == {"slices": 1, "deleted": 0, "changes": 1}
    attributes = message["Attributes"]
    assert attributes["MessageGroupId"] == "default/web"
    assert attributes["MessageDeduplicationId"] == hint.deduplication_id

    emulator.delete("endpointslices", "default", "web-a")  # a deletion is a change too
    [deleted] = hints(deltas(sqs, url, expect=1))
    assert deleted.object == {"slices": 0, "deleted": 1, "changes": 1}
    assert metric(watcher, "watcher_endpoint_hints_total", outcome="queued") == 2


def test_slices_of_instance_mode_other_classes_or_unlabelled_services_send_nothing(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("inst", annotations={TARGET_TYPE_ANNOTATION: "instance"}))
    emulator.create(service("plain"))
    emulator.create(service("internal", svc_type="ClusterIP", annotations=IP))
    emulator.create(service("web", annotations=IP))
    other_class = service("lbc", annotations=IP)
    other_class["spec"]["loadBalancerClass"] = "service.k8s.aws/nlb"  # the AWS Load Balancer Controller's
    emulator.create(other_class)
    watcher = make_watcher()
    url = queues["Service"]
    assert len(deltas(sqs, url, expect=4)) == 4  # the LoadBalancer Services' SYNCs
    for name in ("inst", "plain", "internal", "lbc"):
        emulator.create(endpoint_slice(f"{name}-a", name))
        set_ips(emulator, f"{name}-a", ["10.0.2.1", "10.0.2.2"])
    unlabelled = endpoint_slice("loose-a")
    del unlabelled["metadata"]["labels"]["kubernetes.io/service-name"]
    emulator.create(unlabelled)
    emulator.create(endpoint_slice("web-a"))  # the barrier: seen after everything above
    assert [(d.type, d.key) for d in deltas(sqs, url, expect=1)] == [("ENDPOINTS", "default/web")]
    assert metric(watcher, "watcher_dropped_irrelevant_total", kind="EndpointSlice") == 8
    assert metric(watcher, "watcher_cache_entries", kind="EndpointSlice") == 5  # labelled slices: keys and versions


def test_a_hundred_changes_in_a_window_are_one_or_a_few_hints_per_service(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    for name in ("web", "api"):
        emulator.create(service(name, annotations=IP))
        emulator.create(endpoint_slice(f"{name}-a", name))
    watcher = make_watcher(endpoints_window_seconds=1.0)
    url = queues["Service"]
    first = deltas(sqs, url, expect=4)  # a fresh watcher: a SYNC and a hint per ip Service
    assert sorted(summary(first)) == sorted((t, f"default/{n}") for n in ("api", "web") for t in ("ENDPOINTS", "SYNC"))

    started = time.monotonic()
    for i in range(100):
        set_ips(emulator, "web-a", [f"10.0.1.{i + 2}"])
        if i % 25 == 0:
            set_ips(emulator, "api-a", [f"10.0.3.{i + 1}"])
    written_in = time.monotonic() - started
    wait_until(lambda: metric(watcher, "watcher_deltas_seen_total", kind="EndpointSlice") == 2 + 104)
    wait_until(lambda: metric(watcher, "watcher_endpoint_pending_services") == 0 and len(watcher.buffer) == 0)
    got = hints(deltas(sqs, url, expect=2))
    by_key = {key: [d for d in got if d.key == key] for key in ("default/web", "default/api")}
    # Every change is in a hint (none lost), and the two Services' changes were never merged.
    assert sum(d.object["changes"] for d in by_key["default/web"]) == 100
    assert sum(d.object["changes"] for d in by_key["default/api"]) == 4
    assert 1 <= len(by_key["default/web"]) <= 2 + int(written_in), (len(by_key["default/web"]), written_in)
    assert metric(watcher, "watcher_endpoint_changes_coalesced_total") == 104 - len(got)


def test_slice_changes_while_the_watcher_was_down_are_hinted_after_the_relist(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    url = queues["Service"]
    for name in ("web", "calm"):
        emulator.create(service(name, annotations=IP))
        emulator.create(endpoint_slice(f"{name}-a", name))
    emulator.create(endpoint_slice("web-b", "web", ["10.0.1.9"]))
    watcher = make_watcher()
    assert sorted(summary(hints(deltas(sqs, url, expect=4)))) == [
        ("ENDPOINTS", "default/calm"),
        ("ENDPOINTS", "default/web"),
    ]

    # The watch is cut and the API refuses slice lists while web's slices change and history is compacted: the
    # relist (410) finds what changed from the versions it remembered, and only there.
    emulator.faults.fail_next(
        10_000, status=503, method="GET", path_regex=r"^/apis/discovery.k8s.io/v1/endpointslices$"
    )
    emulator.drop_watches()
    wait_until(lambda: [e for e in emulator.request_log.snapshot() if e["status"] == 503])
    set_ips(emulator, "web-a", ["10.0.1.2"])
    emulator.delete("endpointslices", "default", "web-b")
    emulator.compact()
    emulator.faults.clear()
    [hint] = hints(deltas(sqs, url, expect=1))
    assert (hint.key, hint.object["slices"], hint.object["deleted"]) == ("default/web", 1, 1)
    assert metric(watcher, "watcher_relists_total", kind="EndpointSlice", reason="gone") >= 1

    # A restarted watcher remembers nothing: one hint per ip Service with slices (beside their SYNCs).
    watcher.stop(flush_timeout=1)
    set_ips(emulator, "web-a", ["10.0.1.3"])
    make_watcher()
    assert sorted(summary(deltas(sqs, url, expect=4))) == sorted(
        (t, f"default/{n}") for n in ("calm", "web") for t in ("ENDPOINTS", "SYNC")
    )


def test_a_service_switched_to_ip_mode_has_its_next_slice_change_forwarded(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("web"))
    emulator.create(endpoint_slice("web-a"))
    watcher = make_watcher()
    url = queues["Service"]
    assert summary(deltas(sqs, url, expect=1)) == [("SYNC", "default/web")]
    # A slice listed before the Services were is judged when its window closes: let that pass first.
    wait_until(lambda: metric(watcher, "watcher_endpoint_pending_services") == 0)
    ignored = metric(watcher, "watcher_dropped_irrelevant_total", kind="EndpointSlice")
    set_ips(emulator, "web-a", ["10.0.1.2"])  # instance mode: nothing
    wait_until(lambda: metric(watcher, "watcher_dropped_irrelevant_total", kind="EndpointSlice") == ignored + 1)

    svc = copy.deepcopy(emulator.get("services", "default", "web"))
    assert svc is not None
    svc["metadata"]["annotations"] = IP
    emulator.update(svc)
    assert summary(deltas(sqs, url, expect=1)) == [("MODIFIED", "default/web")]  # its reconcile reads the slices
    set_ips(emulator, "web-a", ["10.0.1.3"])
    assert summary(deltas(sqs, url, expect=1)) == [("ENDPOINTS", "default/web")]


def test_a_pending_hint_of_a_deleted_service_is_dropped(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("web", annotations=IP))
    watcher = make_watcher(endpoints_window_seconds=1.0)
    url = queues["Service"]
    assert summary(deltas(sqs, url, expect=1)) == [("SYNC", "default/web")]
    emulator.create(endpoint_slice("web-a"))
    wait_until(lambda: metric(watcher, "watcher_endpoint_pending_services") == 1)
    emulator.delete("services", "default", "web")
    assert summary(deltas(sqs, url, expect=1)) == [("DELETED", "default/web")]
    wait_until(lambda: metric(watcher, "watcher_endpoint_hints_total", outcome="dropped") == 1)
    assert deltas(sqs, url) == []


def test_two_replicas_seeing_the_same_slices_send_one_hint(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("web", annotations=IP))
    replicas = [make_watcher(), make_watcher()]
    url = queues["Service"]
    assert summary(deltas(sqs, url, expect=1)) == [("SYNC", "default/web")]  # deduplicated by SQS
    emulator.create(endpoint_slice("web-a"))
    wait_until(lambda: all(metric(w, "watcher_deltas_sent_total", kind="Service") == 2 for w in replicas))
    assert summary(deltas(sqs, url)) == [("ENDPOINTS", "default/web")]
    set_ips(emulator, "web-a", ["10.0.1.2"])  # a later state: a new id
    wait_until(lambda: all(metric(w, "watcher_deltas_sent_total", kind="Service") == 3 for w in replicas))
    assert summary(deltas(sqs, url)) == [("ENDPOINTS", "default/web")]


def test_a_rolling_update_of_20_pods_is_a_few_hints_carrying_every_slice_write(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    """Pods, kubelet and kube-controller-manager's EndpointSlice controller of the devstack; the issue's rollout shape
    (maxSurge 25 %, maxUnavailable 0), its clock stepped a second per Deployment step."""
    nodes = ["node-a", "node-b"]
    for i, name in enumerate(nodes):
        emulator.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"podCIDR": f"10.1.{i}.0/24"}}
        )
    emulator.create(service("web", annotations=IP))
    clock = FakeClock()
    kubelet, controller = Kubelet(emulator, ready_after=1.0, clock=clock), EndpointSliceController(emulator)

    def settle(seconds: float = 1.0) -> None:
        clock.advance(seconds)
        for _ in range(2):  # the kubelet's writes, then the controller's
            kubelet.sync()
            controller.sync_all()

    pods = PodSet(emulator, "web", nodes)
    pods.create(20, {"containers": [container(ports=[{"containerPort": 80}])], "terminationGracePeriodSeconds": 1})
    settle(0.0)
    settle()
    watcher = make_watcher()
    url = queues["Service"]
    assert sorted(summary(deltas(sqs, url, expect=2))) == [("ENDPOINTS", "default/web"), ("SYNC", "default/web")]

    writes = controller.writes
    started = time.monotonic()
    rollout = RollingUpdate(
        pods, {"containers": [container(image="app:2", ports=[{"containerPort": 80}])]}, 20, "25%", 0
    )
    for _ in rollout.run(settle):
        pass
    settle(2.0)  # the last old pods terminate
    writes, took = controller.writes - writes, time.monotonic() - started
    wait_until(lambda: metric(watcher, "watcher_deltas_seen_total", kind="EndpointSlice") >= 1 + writes)
    wait_until(lambda: metric(watcher, "watcher_endpoint_pending_services") == 0 and len(watcher.buffer) == 0)
    got = hints(deltas(sqs, url, expect=1))
    unchanged = metric(watcher, "watcher_endpoint_writes_unchanged_total")
    # Every slice write is in a hint, but those that changed no target and no waiting endpoint: the removals of
    # terminating pods, already deregistered when they began terminating.
    assert sum(d.object["changes"] for d in got) + unchanged == writes
    assert unchanged >= 1
    assert len(got) < writes and len(got) <= 2 + took / 0.25, (writes, len(got), took)
    (final,) = emulator.list("endpointslices", "default")
    assert got[-1].object == {"slices": 1, "deleted": 0, "changes": got[-1].object["changes"]}
    assert len(final["endpoints"]) == 20
