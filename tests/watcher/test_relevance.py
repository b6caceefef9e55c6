from __future__ import annotations

import copy

from ccm.contracts.messages import parse_delta, trim_service
from tests.watcher.objects import FINALIZER, bump, node, service, with_uid
from watcher.relevance import (
    CacheEntry,
    Decision,
    decide,
    fingerprint,
    resync_deltas,
    service_is_relevant,
    vanished,
)

NOW = 1_700_000_000.0


def run(kind: str, event: str, obj: dict, previous: CacheEntry | None = None, force: bool = False) -> Decision:
    decision = decide(kind, event, obj, previous, observed_at=NOW, force=force)
    for delta in decision.deltas:
        # Every delta the watcher may emit must satisfy the message contract.
        assert parse_delta(delta.to_body()) == delta
    return decision


def types(decision: Decision) -> list[str]:
    return [d.type for d in decision.deltas]


# --- Services -------------------------------------------------------------------------------------------------


def test_lb_service_added_is_forwarded_and_remembered_with_trimmed_object() -> None:
    svc = with_uid(service("web"), "u1")
    d = run("Service", "ADDED", svc)
    assert types(d) == ["ADDED"]
    delta = d.deltas[0]
    assert (delta.key, delta.uid, delta.resource_version, delta.observed_at) == ("default/web", "u1", "1", NOW)
    assert delta.object == trim_service(svc)
    assert d.entry is not None and d.entry.uid == "u1" and d.entry.trimmed == trim_service(svc)


def test_clusterip_service_is_ignored_and_not_remembered() -> None:
    d = run("Service", "ADDED", with_uid(service("db", svc_type="ClusterIP")))
    assert d.deltas == () and d.entry is None and d.dropped == "irrelevant"


def test_clusterip_updates_and_deletes_stay_ignored() -> None:
    svc = with_uid(service("db", svc_type="ClusterIP"))
    assert run("Service", "MODIFIED", bump(svc, spec__ports=[{"port": 5432}])).deltas == ()
    assert run("Service", "DELETED", svc).deltas == ()


def test_clusterip_becoming_lb_is_forwarded() -> None:
    svc = with_uid(service("db", svc_type="ClusterIP"))
    d = run("Service", "MODIFIED", bump(svc, spec__type="LoadBalancer"))
    assert types(d) == ["MODIFIED"] and d.entry is not None


def test_lb_to_clusterip_is_forwarded_once_then_forgotten() -> None:
    svc = with_uid(service("web"), "u1")
    entry = run("Service", "ADDED", svc).entry
    changed = bump(svc, spec__type="ClusterIP")
    d = run("Service", "MODIFIED", changed, entry)
    assert types(d) == ["MODIFIED"] and d.deltas[0].object["type"] == "ClusterIP"
    assert d.entry is None  # forgotten: later updates of the ClusterIP service are dropped
    assert run("Service", "MODIFIED", bump(changed, metadata__labels={"x": "y"}), d.entry).deltas == ()


def test_service_carrying_our_finalizer_is_forwarded_even_if_not_lb() -> None:
    svc = with_uid(service("old", svc_type="ClusterIP", finalizers=[FINALIZER]))
    assert service_is_relevant(trim_service(svc))
    d = run("Service", "ADDED", svc)
    assert types(d) == ["ADDED"] and d.entry is not None
    # Once the reconciler removed the finalizer the service stops being relevant: forwarded once more.
    done = run("Service", "MODIFIED", bump(svc, metadata__finalizers=[]), d.entry)
    assert types(done) == ["MODIFIED"] and done.entry is None


def test_label_only_update_is_dropped() -> None:
    svc = with_uid(service("web"))
    entry = run("Service", "ADDED", svc).entry
    d = run("Service", "MODIFIED", bump(svc, metadata__labels={"team": "a"}), entry)
    assert d.deltas == () and d.dropped == "unchanged"
    assert d.entry is not None and d.entry.resource_version == "2"  # cache follows the resourceVersion


def test_status_only_update_written_by_us_is_dropped() -> None:
    svc = with_uid(service("web"))
    entry = run("Service", "ADDED", svc).entry
    ingress = {"loadBalancer": {"ingress": [{"hostname": "lb-123.elb.amazonaws.com"}]}}
    assert run("Service", "MODIFIED", bump(svc, status=ingress), entry).deltas == ()


def test_our_finalizer_added_to_a_live_lb_service_is_an_echo_and_dropped() -> None:
    svc = with_uid(service("web"))
    entry = run("Service", "ADDED", svc).entry
    d = run("Service", "MODIFIED", bump(svc, metadata__finalizers=[FINALIZER]), entry)
    assert d.deltas == () and d.dropped == "unchanged"
    assert d.entry is not None and d.entry.trimmed is not None and d.entry.trimmed["finalizers"] == [FINALIZER]
    # A foreign finalizer, or ours on a Service being deleted, still goes through.
    foreign = bump(svc, metadata__finalizers=[FINALIZER, "example.com/keep"])
    assert types(run("Service", "MODIFIED", foreign, d.entry)) == ["MODIFIED"]
    deleting = bump(svc, metadata__finalizers=[FINALIZER], metadata__deletionTimestamp="2026-01-01T00:00:00Z")
    assert types(run("Service", "MODIFIED", deleting, d.entry)) == ["MODIFIED"]


def test_foreign_annotation_dropped_but_lb_annotation_forwarded() -> None:
    svc = with_uid(service("web"))
    entry = run("Service", "ADDED", svc).entry
    assert run("Service", "MODIFIED", bump(svc, metadata__annotations={"example.com/x": "1"}), entry).deltas == ()
    lb_anno = {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"}
    assert types(run("Service", "MODIFIED", bump(svc, metadata__annotations=lb_anno), entry)) == ["MODIFIED"]


def test_port_change_and_deletion_timestamp_are_forwarded() -> None:
    svc = with_uid(service("web"))
    entry = run("Service", "ADDED", svc).entry
    assert types(run("Service", "MODIFIED", bump(svc, spec__ports=[{"port": 8080, "nodePort": 31000}]), entry)) == [
        "MODIFIED"
    ]
    assert types(run("Service", "MODIFIED", bump(svc, metadata__deletionTimestamp="2024-01-01T00:00:00Z"), entry)) == [
        "MODIFIED"
    ]


def test_delete_of_forwarded_service_is_forwarded_even_after_type_change() -> None:
    svc = with_uid(service("web"))
    entry = run("Service", "ADDED", svc).entry
    d = run("Service", "DELETED", bump(svc, spec__type="ClusterIP"), entry)
    assert types(d) == ["DELETED"] and d.entry is None
    # An LB service deleted before we remembered it (e.g. right after a restart) is forwarded too.
    assert types(run("Service", "DELETED", svc)) == ["DELETED"]


def test_new_uid_under_same_name_emits_delete_of_old_incarnation_first() -> None:
    old = with_uid(service("web"), "old-uid")
    entry = run("Service", "ADDED", old).entry
    new = with_uid(service("web"), "new-uid", rv="7")
    d = run("Service", "ADDED", new, entry)
    assert [(x.type, x.uid) for x in d.deltas] == [("DELETED", "old-uid"), ("ADDED", "new-uid")]
    assert d.deltas[0].object == trim_service(old)  # the old LB's last known shape
    assert d.entry is not None and d.entry.uid == "new-uid"


def test_relist_sync_reports_only_changes_unless_forced() -> None:
    svc = with_uid(service("web"))
    entry = run("Service", "ADDED", svc).entry
    assert run("Service", "SYNC", svc, entry).deltas == ()
    assert types(run("Service", "SYNC", svc, entry, force=True)) == ["SYNC"]
    assert types(run("Service", "SYNC", bump(svc, spec__ports=[]), entry)) == ["SYNC"]
    # Forcing never resurrects irrelevant services.
    assert run("Service", "SYNC", with_uid(service("db", svc_type="ClusterIP")), None, force=True).deltas == ()


def test_vanished_and_resync_build_deltas_from_cache_alone() -> None:
    svc = with_uid(service("web"), "u1", rv="5")
    cache = {
        "default/web": run("Service", "ADDED", svc).entry,
        "default/gone": run("Service", "ADDED", with_uid(service("gone"), "u2")).entry,
    }
    gone = vanished("Service", cache, ["default/web"], NOW)
    assert [(d.type, d.key, d.uid) for d in gone] == [("DELETED", "default/gone", "u2")]
    sync = resync_deltas("Service", cache, NOW)
    assert sorted((d.type, d.key, d.resource_version) for d in sync) == [
        ("SYNC", "default/gone", "1"),
        ("SYNC", "default/web", "5"),
    ]
    assert all(parse_delta(d.to_body()) == d for d in gone + sync)


def test_fingerprint_covers_uid() -> None:
    trimmed = trim_service(service("web"))
    assert fingerprint("a", trimmed) != fingerprint("b", trimmed)
    assert fingerprint("a", trimmed) == fingerprint("a", copy.deepcopy(trimmed))


# --- Nodes ----------------------------------------------------------------------------------------------------


def test_node_join_is_forwarded_and_remembered_without_object() -> None:
    d = run("Node", "ADDED", with_uid(node("n1")))
    assert types(d) == ["ADDED"] and d.deltas[0].key == "n1"
    assert d.entry is not None and d.entry.trimmed is None


def test_node_heartbeat_only_update_is_dropped() -> None:
    n = with_uid(node("n1"))
    entry = run("Node", "ADDED", n).entry
    beat = copy.deepcopy(n)
    beat["metadata"]["resourceVersion"] = "2"
    for condition in beat["status"]["conditions"]:
        condition["lastHeartbeatTime"] = "2024-01-01T00:00:40Z"
    beat["status"]["images"].append({"names": ["busybox"], "sizeBytes": 2})
    d = run("Node", "MODIFIED", beat, entry)
    assert d.deltas == () and d.dropped == "unchanged"


def test_node_ready_flip_is_forwarded() -> None:
    n = with_uid(node("n1"))
    entry = run("Node", "ADDED", n).entry
    flipped = with_uid(node("n1", ready="False", heartbeat="2024-01-01T00:01:00Z"), n["metadata"]["uid"], rv="2")
    d = run("Node", "MODIFIED", flipped, entry)
    assert types(d) == ["MODIFIED"] and d.deltas[0].object["ready"] == "False"


def test_node_spec_and_label_changes_are_forwarded() -> None:
    n = with_uid(node("n1"))
    entry = run("Node", "ADDED", n).entry
    uid = n["metadata"]["uid"]
    variants = {
        "taint": node(
            "n1",
            taints=[{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}],
        ),
        "label": node("n1", labels={"kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "us-east-1a"}),
        "podCIDR": node("n1", pod_cidrs=["10.244.1.0/24"]),
        "providerID": node("n1", provider_id="aws:///us-east-1b/i-0fedcba9876543210"),
        "address": node("n1", address="10.0.0.99"),
        "deletion": bump(n, metadata__deletionTimestamp="2024-01-01T00:00:00Z"),
    }
    for what, changed in variants.items():
        d = run("Node", "MODIFIED", with_uid(changed, uid, rv="3"), entry)
        assert types(d) == ["MODIFIED"], what


def test_node_delete_is_forwarded_and_forgotten() -> None:
    n = with_uid(node("n1"))
    entry = run("Node", "ADDED", n).entry
    d = run("Node", "DELETED", n, entry)
    assert types(d) == ["DELETED"] and d.entry is None


def test_vanished_node_tombstone_carries_empty_object() -> None:
    cache = {"n1": run("Node", "ADDED", with_uid(node("n1"), "u1", rv="4")).entry}
    [gone] = vanished("Node", cache, [], NOW)
    assert (gone.type, gone.key, gone.uid, gone.resource_version, gone.object) == ("DELETED", "n1", "u1", "4", {})
    assert resync_deltas("Node", cache, NOW) == []
