"""The whole watcher in-process against the Kubernetes API emulator and SQS FIFO in moto (both real HTTP)."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from ccm.contracts.messages import Delta, parse_delta
from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.store import FUTURE_WATCH_SHAPES, FUTURE_WATCH_SILENT
from tests.watcher.conftest import (
    MakeWatcher,
    deltas,
    free_port,
    metric,
    receive_all,
    sqs_client,
    summary,
    wait_until,
)
from tests.watcher.objects import node, service


def edit(
    emu: Emulator,
    plural: str,
    namespace: str | None,
    name: str,
    change: Callable[[dict], None],
    subresource: str | None = None,
) -> dict[str, Any]:
    obj = copy.deepcopy(emu.get(plural, namespace, name))
    assert obj is not None
    obj.setdefault("apiVersion", "v1")
    obj.setdefault("kind", "Service" if plural == "services" else "Node")
    change(obj)
    return emu.update(obj, subresource)


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# --- Services -------------------------------------------------------------------------------------------------


def test_initial_list_syncs_existing_relevant_objects_across_pages(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    for i in range(3):
        emulator.create(service(f"lb-{i}"))
    emulator.create(service("internal", svc_type="ClusterIP"))
    emulator.create(node("n1"))
    watcher = make_watcher(list_page_size=2)
    got = deltas(sqs, queues["Service"], expect=3)
    assert sorted(summary(got)) == [("SYNC", f"default/lb-{i}") for i in range(3)]
    assert summary(deltas(sqs, queues["Node"], expect=1)) == [("SYNC", "n1")]
    log = emulator.request_log.snapshot()
    paged = [e for e in log if e["path"] == "/api/v1/services" and "continue=" in e["query"]]
    assert paged, "the initial list should have used limit/continue pages"
    assert metric(watcher, "watcher_dropped_irrelevant_total", kind="Service") == 1


def test_service_lifecycle_forwards_only_what_matters(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    watcher = make_watcher()
    url = queues["Service"]
    emulator.create(service("web"))
    [added] = deltas(sqs, url, expect=1)
    assert (added.type, added.key, added.object["type"]) == ("ADDED", "default/web", "LoadBalancer")

    edit(emulator, "services", "default", "web", lambda s: s["spec"]["ports"][0].update(port=8080))
    [modified] = deltas(sqs, url, expect=1)
    assert modified.type == "MODIFIED" and modified.object["ports"][0]["port"] == 8080

    dropped_before = metric(watcher, "watcher_dropped_irrelevant_total", kind="Service")
    edit(emulator, "services", "default", "web", lambda s: s["metadata"].setdefault("labels", {}).update(team="a"))
    edit(
        emulator,
        "services",
        "default",
        "web",
        lambda s: s.update(status={"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}),
        "status",
    )
    emulator.create(service("internal", svc_type="ClusterIP"))
    emulator.create(service("barrier"))  # delivered after the three changes above were processed
    assert summary(deltas(sqs, url, expect=1)) == [("ADDED", "default/barrier")]
    assert metric(watcher, "watcher_dropped_irrelevant_total", kind="Service") == dropped_before + 3

    emulator.delete("services", "default", "web")
    [deleted] = deltas(sqs, url, expect=1)
    assert (deleted.type, deleted.key, deleted.uid) == ("DELETED", "default/web", added.uid)


def test_lb_turned_clusterip_is_forwarded_once(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("web"))
    make_watcher()
    assert summary(deltas(sqs, queues["Service"], expect=1)) == [("SYNC", "default/web")]

    def to_cluster_ip(svc: dict[str, Any]) -> None:
        svc["spec"]["type"] = "ClusterIP"
        for port in svc["spec"]["ports"]:
            port.pop("nodePort", None)

    edit(emulator, "services", "default", "web", to_cluster_ip)
    edit(emulator, "services", "default", "web", lambda s: s["spec"]["ports"][0].update(port=81))
    emulator.create(service("barrier"))
    got = deltas(sqs, queues["Service"], expect=2)
    assert summary(got) == [("MODIFIED", "default/web"), ("ADDED", "default/barrier")]
    assert got[0].object["type"] == "ClusterIP"


def test_dropped_watch_resumes_from_last_resource_version_without_duplicates(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    watcher = make_watcher()
    emulator.create(service("a"))
    assert summary(deltas(sqs, queues["Service"], expect=1)) == [("ADDED", "default/a")]
    last_rv = watcher.informers["Service"].resource_version
    assert last_rv is not None
    emulator.clear_log()

    assert emulator.drop_watches() >= 2
    emulator.create(service("b"))
    edit(emulator, "services", "default", "a", lambda s: s["spec"]["ports"][0].update(port=81))
    got = deltas(sqs, queues["Service"], expect=2)
    assert summary(got) == [("ADDED", "default/b"), ("MODIFIED", "default/a")]

    rewatch = [e for e in emulator.request_log.snapshot() if e["path"] == "/api/v1/services" and e["watch"]]
    assert rewatch and f"resourceVersion={last_rv}" in rewatch[0]["query"]
    assert "allowWatchBookmarks=true" in rewatch[0]["query"]
    assert not [e for e in emulator.request_log.snapshot() if e["path"] == "/api/v1/services" and not e["watch"]]
    assert metric(watcher, "watcher_deltas_sent_total", kind="Service") == 3  # no duplicate sends either
    assert metric(watcher, "watcher_relists_total", kind="Service", reason="initial") == 1


def test_in_stream_410_relists_and_forwarding_continues(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("a"))
    watcher = make_watcher()
    assert summary(deltas(sqs, queues["Service"], expect=1)) == [("SYNC", "default/a")]
    emulator.clear_log()
    emulator.compact()  # open watches receive an ERROR event with code 410
    wait_until(lambda: metric(watcher, "watcher_relists_total", kind="Service", reason="gone") == 1)
    # The relist is over once the informer watches again; from then on a new object is a watch event (ADDED). (The
    # relist counter moves when the relist starts: creating "b" before its list is served would make it a SYNC.)
    wait_until(lambda: [e for e in emulator.request_log.snapshot() if e["path"] == "/api/v1/services" and e["watch"]])
    emulator.create(service("b"))
    assert summary(deltas(sqs, queues["Service"], expect=1)) == [("ADDED", "default/b")]
    assert metric(watcher, "watcher_deltas_sent_total", kind="Service") == 2  # "a" was unchanged: not re-sent


def test_deletes_during_a_watch_gap_are_synthesised_after_410(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    for name in ("keep", "gone"):
        emulator.create(service(name))
        emulator.create(node(name))
    watcher = make_watcher()
    assert len(deltas(sqs, queues["Service"], expect=2)) == 2
    assert len(deltas(sqs, queues["Node"], expect=2)) == 2
    gone_uid = emulator.get("services", "default", "gone")["metadata"]["uid"]

    # The API server is unreachable for list/watch while objects go away and history is compacted.
    emulator.faults.fail_next(10_000, status=503, method="GET", path_regex=r"^/api/v1/(services|nodes)$")
    emulator.drop_watches()
    wait_until(lambda: [e for e in emulator.request_log.snapshot() if e["status"] == 503])
    emulator.delete("services", "default", "gone")
    emulator.delete("nodes", None, "gone")
    emulator.compact()
    emulator.faults.clear()

    [svc_deleted] = deltas(sqs, queues["Service"], expect=1)
    assert (svc_deleted.type, svc_deleted.key, svc_deleted.uid) == ("DELETED", "default/gone", gone_uid)
    assert svc_deleted.object["type"] == "LoadBalancer"  # last known trimmed state
    assert summary(deltas(sqs, queues["Node"], expect=1)) == [("DELETED", "gone")]
    for kind in ("Service", "Node"):
        assert metric(watcher, "watcher_relists_total", kind=kind, reason="gone") >= 1
    # Unchanged objects are not re-sent by a 410 relist.
    assert metric(watcher, "watcher_deltas_sent_total", kind="Service") == 3


def test_api_errors_are_retried_until_the_initial_list_succeeds(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("web"))
    emulator.faults.fail_next(3, status=500, method="GET", path_regex=r"^/api/v1/services$")
    watcher = make_watcher(wait_ready=False)
    wait_until(lambda: watcher.ready, timeout=10)
    assert summary(deltas(sqs, queues["Service"], expect=1)) == [("SYNC", "default/web")]
    failures = [e for e in emulator.request_log.snapshot() if e["path"] == "/api/v1/services" and e["status"] == 500]
    assert len(failures) == 3


# --- Nodes ----------------------------------------------------------------------------------------------------


def test_node_join_heartbeat_and_ready_flip(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    watcher = make_watcher()
    url = queues["Node"]
    emulator.create(node("n1"))
    [joined] = deltas(sqs, url, expect=1)
    assert (joined.type, joined.key, joined.object["ready"]) == ("ADDED", "n1", "True")

    def heartbeat(second: int) -> Callable[[dict[str, Any]], None]:
        def change(n: dict[str, Any]) -> None:
            for condition in n["status"]["conditions"]:
                condition["lastHeartbeatTime"] = f"2024-01-01T00:05:{second:02d}Z"

        return change

    for second in (10, 20, 30):  # kubelet status updates that only move heartbeats
        edit(emulator, "nodes", None, "n1", heartbeat(second), "status")
    edit(
        emulator,
        "nodes",
        None,
        "n1",
        lambda n: n["status"]["conditions"][0].update(status="False", reason="KubeletNotReady"),
        "status",
    )
    [flipped] = deltas(sqs, url, expect=1)
    assert (flipped.type, flipped.object["ready"]) == ("MODIFIED", "False")
    assert metric(watcher, "watcher_dropped_irrelevant_total", kind="Node") == 3

    edit(
        emulator,
        "nodes",
        None,
        "n1",
        lambda n: n["spec"].update(taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]),
    )
    [tainted] = deltas(sqs, url, expect=1)  # admission's not-ready taint replaced by the lifecycle controller's
    assert tainted.object["taints"] == [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]


# --- resync, overflow, health ---------------------------------------------------------------------------------


def test_periodic_resync_sends_sync_for_relevant_services(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.create(service("web"))
    emulator.create(service("internal", svc_type="ClusterIP"))
    sent: list[Delta] = []
    sqs.meta.events.register(
        "before-call.sqs.SendMessageBatch",
        lambda params, **_: sent.extend(parse_delta(e["MessageBody"]) for e in json.loads(params["body"])["Entries"]),
    )
    watcher = make_watcher(resync_seconds=0.3)
    wait_until(lambda: len([d for d in sent if d.kind == "Service"]) >= 3)
    watcher.stop(flush_timeout=1)
    services = [d for d in sent if d.kind == "Service"]
    assert {(d.type, d.key) for d in services} == {("SYNC", "default/web")}
    # Same uid/resourceVersion => same deduplication id: SQS keeps one copy inside its 5-minute window. (moto only
    # deduplicates against undeleted messages, hence receiving after the watcher stopped.)
    assert len({d.deduplication_id for d in services}) == 1
    assert len(deltas(sqs, queues["Service"], expect=1)) == 1


def test_sqs_outage_with_buffer_overflow_recovers_by_relisting(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    port = free_port()
    watcher = make_watcher(sqs_override=sqs_client(f"http://127.0.0.1:{port}"), wait_ready=False, buffer_size=3)
    wait_until(lambda: all(i.synced.is_set() for i in watcher.informers.values()))
    assert not watcher.ready  # SQS unreachable
    for i in range(6):
        emulator.create(service(f"svc-{i}"))
    wait_until(lambda: metric(watcher, "watcher_deltas_dropped_total", kind="Service", reason="buffer_full") == 3)
    assert len(watcher.buffer) == 3

    late_sqs = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    late_sqs.start()
    try:
        # 3 buffered deltas, then the overflow relist re-sends all 6 services as SYNC.
        wait_until(lambda: metric(watcher, "watcher_deltas_sent_total", kind="Service") == 9, timeout=15)
        assert metric(watcher, "watcher_relists_total", kind="Service", reason="overflow") == 1
        got = deltas(sqs, queues["Service"], expect=6)
        # The refused services arrive through the relist; the re-sent buffered ones collapse (same dedup id).
        assert sorted(summary(got), key=lambda t: t[1]) == [("ADDED", f"default/svc-{i}") for i in range(3)] + [
            ("SYNC", f"default/svc-{i}") for i in range(3, 6)
        ]
        wait_until(lambda: watcher.ready)
    finally:
        watcher.stop(flush_timeout=1)
        late_sqs.stop()


def test_health_readiness_and_metrics_endpoints(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    emulator.faults.fail_next(10_000, status=503, method="GET", path_regex=r"^/api/v1/nodes$")
    watcher = make_watcher(wait_ready=False)
    port = watcher.health_port
    wait_until(
        lambda: (
            all(watcher.informers[k].synced.is_set() for k in ("Service", "EndpointSlice")) and watcher.sender.reachable
        )
    )
    status, body = http_get(port, "/readyz")
    assert status == 503 and json.loads(body)["synced"] == {"Service": True, "Node": False, "EndpointSlice": True}
    assert http_get(port, "/healthz")[0] == 200  # retrying the API is not being wedged

    emulator.faults.clear()
    wait_until(lambda: http_get(port, "/readyz")[0] == 200)
    emulator.create(service("web"))
    deltas(sqs, queues["Service"], expect=1)
    status, text = http_get(port, "/metrics")
    assert status == 200
    for needle in (
        'watcher_deltas_seen_total{kind="Service"}',
        'watcher_deltas_sent_total{kind="Service"} 1.0',
        "watcher_deltas_failed_total",
        "watcher_dropped_irrelevant_total",
        'watcher_relists_total{kind="Node",reason="initial"}',
        "watcher_buffer_deltas",
        'watcher_queue_lag_seconds_count{kind="Service"} 1.0',
        "watcher_last_successful_send_timestamp_seconds",
    ):
        assert needle in text, needle
    assert http_get(port, "/nope")[0] == 404

    watcher.stop(flush_timeout=1)
    assert not watcher.liveness()[0] and not watcher.ready


def test_a_delta_larger_than_an_sqs_message_is_trimmed_not_dropped(
    emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    # A legal Service: kube-apiserver accepts up to 262,144 bytes of annotations (keys + values). Its whole trimmed
    # object made a message over SQS's 262,144-byte default (moto patched to that default, see the conftest), which
    # the watcher used to drop: the delete never reached the reconciler and the load balancer leaked.
    big_key = "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags"
    small = {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    filler = 262_000 - len(big_key) - sum(len(k) + len(v) for k, v in small.items())
    watcher = make_watcher()
    created = emulator.create(service("big", annotations={big_key: "x" * filler, **small}))
    uid = created["metadata"]["uid"]
    # One at a time: an ADDED still buffered when the DELETED arrives is coalesced into it (watcher.buffer).
    messages = receive_all(sqs, queues["Service"], expect=1, timeout=60)  # 256 KiB through a busy host
    emulator.delete("services", "default", "big")
    messages += receive_all(sqs, queues["Service"], expect=1, timeout=60)
    assert [len(m["Body"].encode()) <= 262_144 for m in messages] == [True, True]
    got = [parse_delta(m["Body"]) for m in messages]
    assert [(d.type, d.key, d.uid) for d in got] == [("ADDED", "default/big", uid), ("DELETED", "default/big", uid)]
    for delta in got:
        # What a decision reads without the live object survives; only the oversized annotation went.
        assert delta.object["type"] == "LoadBalancer" and delta.object["annotations"] == small
        assert delta.object["trimmedToFit"] == ["annotations"]
    assert metric(watcher, "watcher_deltas_trimmed_total", kind="Service") == 2
    assert metric(watcher, "watcher_deltas_dropped_total", kind="Service", reason="rejected") == 0


@pytest.mark.parametrize("shape", FUTURE_WATCH_SHAPES)
def test_a_server_behind_the_watchers_resource_version_is_relisted_not_retried_forever(
    shape: str, emulator: Emulator, make_watcher: MakeWatcher, sqs: Any, queues: dict[str, str]
) -> None:
    # An API server whose etcd was restored from an older backup cannot serve a watch from a newer resourceVersion.
    # kube-apiserver 1.28 answers it 200 and stays silent until timeoutSeconds (no event, no bookmark: what is
    # written meanwhile never arrives); others answer 504 "Too large resource version", as the answer or as the
    # stream's ERROR event. Resuming can never work: whatever the shape, the watcher relists (as client-go does).
    emulator.store.future_watch = shape
    emulator.create(service("a"))
    watcher = make_watcher(watch_timeout_seconds=2)  # a silent watch is known for one only once it has ended
    assert summary(deltas(sqs, queues["Service"], expect=1)) == [("SYNC", "default/a")]
    with emulator.store.lock:
        emulator.store.rv = 1  # the restored store is behind every resourceVersion the watcher has seen
    emulator.drop_watches()
    wait_until(lambda: metric(watcher, "watcher_relists_total", kind="Service", reason="too_large_rv") >= 1, 30)
    emulator.create(service("b"))
    # Seen by the watch after the relist (ADDED), or by the relist itself when it lists after the create (SYNC).
    assert {key for kind, key in summary(deltas(sqs, queues["Service"], expect=1)) if kind in ("ADDED", "SYNC")} == {
        "default/b"
    }
    # Only a watch that heard nothing at all is checked: a healthy one always gets its bookmarks.
    silent = metric(watcher, "watcher_silent_watches_total", kind="Service")
    assert (silent >= 1) if shape == FUTURE_WATCH_SILENT else (silent == 0)
