"""The watcher heartbeat in the v1 delta schema: one message per period whichever replica sends it."""

import json

import pytest

from ccm.contracts import messages
from ccm.node.events import InvalidNodeMessage, parse_node_message


def test_heartbeat_round_trips_and_is_its_own_group():
    beat = messages.heartbeat_for("watcher-7d9f-abc", 1_732_240_075.5, 60)
    parsed = messages.parse_delta(beat.to_body())
    assert parsed == beat
    assert (parsed.kind, parsed.type) == ("Watcher", "HEARTBEAT")
    assert parsed.resource_version == "1732240020"  # start of the minute
    assert parsed.observed_at == 1_732_240_075.5
    assert parsed.group_id == "watcher/heartbeat" and parsed.object == {"replica": "watcher-7d9f-abc"}


def test_replicas_share_the_dedup_id_of_a_period_and_periods_differ():
    a = messages.heartbeat_for("replica-a", 1_000_020.0, 60)
    b = messages.heartbeat_for("replica-b", 1_000_079.9, 60)
    nxt = messages.heartbeat_for("replica-a", 1_000_080.0, 60)
    assert a.deduplication_id == b.deduplication_id
    assert a.deduplication_id != nxt.deduplication_id
    assert a.to_body() != b.to_body()  # the bodies differ: content-based deduplication would not collapse them


@pytest.mark.parametrize(
    ("kind", "type_"), [("Watcher", "ADDED"), ("Service", "HEARTBEAT"), ("Node", "HEARTBEAT"), ("Pod", "HEARTBEAT")]
)
def test_heartbeat_type_and_watcher_kind_only_go_together(kind, type_):
    body = json.loads(messages.heartbeat_for("r", 100.0, 60).to_body())
    body.update(kind=kind, type=type_)
    with pytest.raises(messages.InvalidDelta):
        messages.parse_delta(json.dumps(body))


def test_watcher_kind_is_not_an_object_kind():
    # The watcher's buffers are per object kind; a heartbeat never goes through them.
    assert "Watcher" not in messages.KINDS


def test_nodes_lambda_rejects_a_heartbeat():
    with pytest.raises(InvalidNodeMessage):
        parse_node_message(messages.heartbeat_for("r", 100.0, 60).to_body())
