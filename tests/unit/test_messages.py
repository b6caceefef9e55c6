import json

import pytest

from ccm.contracts import messages
from tests.factories import node, service


def test_round_trip_and_attributes():
    svc = service(annotations={"service.beta.kubernetes.io/aws-load-balancer-internal": "true", "other": "x"})
    delta = messages.delta_for("Service", "ADDED", svc, observed_at=100.5)
    parsed = messages.parse_delta(delta.to_body())
    assert parsed == delta
    assert parsed.key == "default/web" and parsed.group_id == "default/web"
    assert parsed.object["annotations"] == {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
    assert [p["port"] for p in parsed.object["ports"]] == [80, 443]


def test_dedup_id_collapses_upserts_but_not_deletes():
    svc = service()
    added = messages.delta_for("Service", "ADDED", svc)
    synced = messages.delta_for("Service", "SYNC", svc)
    deleted = messages.delta_for("Service", "DELETED", svc)
    assert added.deduplication_id == synced.deduplication_id
    assert added.deduplication_id != deleted.deduplication_id
    svc["metadata"]["resourceVersion"] = "2"
    assert messages.delta_for("Service", "MODIFIED", svc).deduplication_id != added.deduplication_id
    assert len(added.deduplication_id) <= 128


def test_node_trim_drops_images_and_heartbeats():
    n = node("ip-10-0-0-1", "i-0abc")
    n["status"]["images"] = [{"names": ["x" * 100]}] * 50
    n["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:00Z"
    delta = messages.delta_for("Node", "MODIFIED", n)
    body = delta.to_body()
    assert "images" not in body and "lastHeartbeatTime" not in body
    assert delta.object["ready"] == "True" and delta.object["providerID"].endswith("i-0abc")


@pytest.mark.parametrize(
    "change",
    [
        {"loadBalancerSourceRanges": ["203.0.113.0/24"]},
        {"sessionAffinity": "ClientIP"},
        {"loadBalancerIP": "192.0.2.10"},
    ],
)
def test_service_trim_keeps_every_spec_field_the_reconciler_reads(change):
    # The watcher drops an update whose trimmed object did not change: these changes must show in it.
    svc = service()
    before = messages.trim_service(svc)
    svc["spec"].update(change)
    after = messages.trim_service(svc)
    assert after != before and after.items() >= change.items()


def test_long_group_ids_are_hashed():
    long_key = "n" * 200
    assert len(messages.message_group_id(long_key)) <= 128
    assert messages.message_group_id(long_key) == messages.message_group_id(long_key)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "not JSON"),
        (json.dumps({"v": 2}), "schema"),
        (
            json.dumps(
                {
                    "v": 1,
                    "kind": "Pod",
                    "type": "ADDED",
                    "key": "a/b",
                    "uid": "u",
                    "resourceVersion": "1",
                    "observedAt": 1,
                    "object": {},
                }
            ),
            "schema",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "kind": "Service",
                    "type": "ADDED",
                    "key": "nonamespace",
                    "uid": "u",
                    "resourceVersion": "1",
                    "observedAt": 1,
                    "object": {},
                }
            ),
            "namespace",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "kind": "Service",
                    "type": "ADDED",
                    "key": "a/b",
                    "uid": "u",
                    "resourceVersion": "1",
                    "observedAt": 1,
                    "object": {},
                    "extra": True,
                }
            ),
            "schema",
        ),
    ],
)
def test_invalid_bodies_are_rejected_with_a_reason(body, reason):
    with pytest.raises(messages.InvalidDelta, match=reason):
        messages.parse_delta(body)


def test_endpoints_hint_round_trip_group_and_dedup_class():
    hint = messages.endpoints_hint("default/web", "uid-1", {"web-a": "5"}, {"web-b": "3"}, observed_at=10.0, changes=4)
    parsed = messages.parse_delta(hint.to_body())
    assert parsed == hint
    assert (parsed.kind, parsed.type, parsed.uid) == ("Service", "ENDPOINTS", "uid-1")
    assert parsed.group_id == messages.message_group_id("default/web")  # ordered with the Service's reconciles
    assert parsed.object == {"slices": 1, "deleted": 1, "changes": 4}
    assert parsed.resource_version.startswith("endpoints-") and len(parsed.resource_version) <= 64
    # Its own deduplication class: never equal to an upsert's id even with the same uid and "resourceVersion".
    assert parsed.deduplication_id != messages.deduplication_id("uid-1", parsed.resource_version, "SYNC")


@pytest.mark.parametrize(
    ("kind", "obj"),
    [
        ("Node", {"slices": 1}),
        ("Service", {"slices": 1, "type": "LoadBalancer"}),  # would read as "was ours" to ccm.service.decisions
        ("Service", {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}),
    ],
)
def test_endpoints_hints_carry_no_service_fields_and_name_a_service(kind, obj):
    body = {
        "v": 1,
        "kind": kind,
        "type": "ENDPOINTS",
        "key": "default/web",
        "uid": "u",
        "resourceVersion": "endpoints-x",
        "observedAt": 1,
        "object": obj,
    }
    with pytest.raises(messages.InvalidDelta, match="ENDPOINTS goes with kind Service"):
        messages.parse_delta(json.dumps(body))
