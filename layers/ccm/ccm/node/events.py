"""The three kinds of message on the nodes queue, parsed and validated (pure).

1. Node deltas from the watcher (`ccm.contracts.messages`, kind Node), group = node name.
2. EC2 "EC2 Instance State-change Notification" events, delivered by an EventBridge rule. EventBridge's SQS
   target takes a static MessageGroupId only (`SqsParameters.MessageGroupId`, no JSON path), so all of them share
   the group `ec2-instance-state`: they are processed in order, one at a time, which is plenty for state changes.
3. "Scheduled Event"s from an EventBridge schedule rule, group `node-safety-pass`: the periodic safety pass.

Anything else is rejected with a reason (InvalidNodeMessage) and goes to the DLQ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from ccm.contracts.messages import Delta, InvalidDelta, parse_delta
from ccm.contracts.provider_id import is_well_formed_instance_id

EC2_STATE_CHANGE: Final = "EC2 Instance State-change Notification"
SCHEDULED_EVENT: Final = "Scheduled Event"
INSTANCE_STATES: Final = ("pending", "running", "shutting-down", "terminated", "stopping", "stopped")
EC2_EVENTS_GROUP: Final = "ec2-instance-state"
SAFETY_PASS_GROUP: Final = "node-safety-pass"


class InvalidNodeMessage(ValueError):
    """The body is neither a Node delta nor an EventBridge event we handle; it belongs in the DLQ."""


@dataclass(frozen=True, slots=True)
class InstanceStateChange:
    event_id: str
    instance_id: str
    state: str
    time: str = ""


@dataclass(frozen=True, slots=True)
class SafetyPass:
    event_id: str
    time: str = ""


NodeMessage = Delta | InstanceStateChange | SafetyPass


def parse_node_message(body: str) -> NodeMessage:
    try:
        data = json.loads(body)
    except (TypeError, ValueError) as err:
        raise InvalidNodeMessage(f"body is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise InvalidNodeMessage("body is not a JSON object")
    if "detail-type" in data:
        return _eventbridge(data)
    try:
        delta = parse_delta(body)
    except InvalidDelta as err:
        raise InvalidNodeMessage(str(err)) from err
    if delta.kind != "Node":
        raise InvalidNodeMessage(f"a {delta.kind} delta on the nodes queue")
    return delta


def _eventbridge(data: dict[str, Any]) -> NodeMessage:
    detail_type, source = data.get("detail-type"), data.get("source")
    event_id = str(data.get("id") or "")
    detail = data.get("detail")
    if not event_id or not isinstance(detail, dict):
        raise InvalidNodeMessage("EventBridge event without id or detail")
    if detail_type == EC2_STATE_CHANGE and source == "aws.ec2":
        instance_id, state = detail.get("instance-id"), detail.get("state")
        if not isinstance(instance_id, str) or not is_well_formed_instance_id(instance_id):
            raise InvalidNodeMessage(f"EC2 state-change event with invalid instance-id {instance_id!r}")
        if state not in INSTANCE_STATES:
            raise InvalidNodeMessage(f"EC2 state-change event with unknown state {state!r}")
        return InstanceStateChange(event_id, instance_id, str(state), str(data.get("time") or ""))
    if detail_type == SCHEDULED_EVENT and source == "aws.events":
        return SafetyPass(event_id, str(data.get("time") or ""))
    raise InvalidNodeMessage(f"unexpected EventBridge event {detail_type!r} from {source!r}")


def ec2_state_change_body(instance_id: str, state: str, event_id: str, time: str = "2026-01-01T00:00:00Z") -> str:
    """An EventBridge-shaped body, as the rule delivers it (for tests, sample events and the devstack)."""
    return json.dumps(
        {
            "version": "0",
            "id": event_id,
            "detail-type": EC2_STATE_CHANGE,
            "source": "aws.ec2",
            "account": "123456789012",
            "time": time,
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "state": state},
        }
    )


def scheduled_event_body(event_id: str, time: str = "2026-01-01T00:00:00Z") -> str:
    return json.dumps(
        {
            "version": "0",
            "id": event_id,
            "detail-type": SCHEDULED_EVENT,
            "source": "aws.events",
            "account": "123456789012",
            "time": time,
            "region": "us-east-1",
            "resources": ["arn:aws:events:us-east-1:123456789012:rule/node-safety-pass"],
            "detail": {},
        }
    )
