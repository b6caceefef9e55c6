"""Which Node deltas reach the routes queue, with which deduplication id; what the routes Lambda accepts."""

from __future__ import annotations

import json

import pytest

from ccm.contracts.messages import Delta, delta_for
from ccm.route.plan import routes_confirmed
from ccm.route.trigger import InvalidTrigger, parse_trigger, route_dedup_id

SCHEDULED = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-01-01T00:05:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/routes-safety-pass"],
    "detail": {},
}


def node(rv: str = "1", cidrs: list[str] | None = None, provider: str = "aws:///us-east-1a/i-0abc") -> dict:
    return {
        "metadata": {"name": "n1", "uid": "u1", "resourceVersion": rv, "labels": {}},
        "spec": {"providerID": provider, "podCIDRs": ["10.244.0.0/24"] if cidrs is None else cidrs},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_routable_node_is_forwarded_and_repeats_collapse() -> None:
    added = route_dedup_id(delta_for("Node", "ADDED", node("1")))
    relabelled = route_dedup_id(delta_for("Node", "MODIFIED", node("2")))
    assert added is not None and len(added) == 64
    # Same route-relevant state at another resourceVersion: same id, so SQS drops the repeat.
    assert relabelled == added


def test_deletion_is_forwarded_even_with_an_empty_object() -> None:
    deleted = Delta("Node", "DELETED", "n1", "u1", "7", 1.0, {})
    dedup = route_dedup_id(deleted)
    assert dedup is not None
    assert dedup != route_dedup_id(delta_for("Node", "ADDED", node()))


def test_a_resync_forwards_only_nodes_whose_routes_are_not_confirmed() -> None:
    resync = delta_for("Node", "SYNC", node("5"))
    assert route_dedup_id(resync) == route_dedup_id(delta_for("Node", "ADDED", node("1")))
    assert route_dedup_id(resync, routed=True) is None
    confirmed = node()
    confirmed["status"]["conditions"].append(
        {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"}
    )
    assert routes_confirmed(confirmed)
    confirmed["status"]["conditions"][-1]["reason"] = "CalicoIsUp"  # somebody else's False is not our confirmation
    assert not routes_confirmed(confirmed)
    assert not routes_confirmed(node())
    deleted = Delta("Node", "DELETED", "n1", "u1", "7", 1.0, {})
    assert route_dedup_id(deleted, routed=True) is not None  # a node gone always matters


@pytest.mark.parametrize(
    "delta",
    [
        delta_for("Node", "ADDED", node(cidrs=[])),  # no pod CIDR yet
        delta_for("Node", "MODIFIED", node(provider="")),  # not initialised yet
        Delta("Service", "ADDED", "default/web", "u2", "1", 1.0, {}),
    ],
)
def test_deltas_that_cannot_change_routes_are_not_forwarded(delta: Delta) -> None:
    assert route_dedup_id(delta) is None


def test_routes_queue_bodies() -> None:
    delta = delta_for("Node", "ADDED", node(), observed_at=123.5)
    trigger = parse_trigger(delta.to_body())
    assert (trigger.source, trigger.key, trigger.observed_at) == ("node", "n1", 123.5)
    scheduled = parse_trigger(json.dumps(SCHEDULED))
    assert (scheduled.source, scheduled.key, scheduled.observed_at) == ("schedule", SCHEDULED["id"], None)
    with pytest.raises(InvalidTrigger):
        parse_trigger("not json")
    with pytest.raises(InvalidTrigger):
        parse_trigger(json.dumps({"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"}))
    with pytest.raises(InvalidTrigger, match="Service delta"):
        parse_trigger(Delta("Service", "ADDED", "default/web", "u2", "1", 1.0, {}).to_body())
