"""Pure halves of the EC2 driver (provider IDs, addresses) and of the nodes queue message parsing."""

from __future__ import annotations

import json

import pytest

from ccm.aws.instances import metadata_from_instance, node_addresses
from ccm.contracts.messages import delta_for
from ccm.contracts.provider_id import instance_id_from_provider_id
from ccm.node.events import (
    InstanceStateChange,
    InvalidNodeMessage,
    SafetyPass,
    ec2_state_change_body,
    parse_node_message,
    scheduled_event_body,
)
from tests.factories import node, service


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        ("aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0"),
        ("aws:////i-0123abcd", "i-0123abcd"),
        ("aws:///i-0123abcd", "i-0123abcd"),
        ("aws:///us-east-1a/fargate-ip-10-0-0-1", None),
        ("eks-hybrid:///us-west-2/my-cluster/node-1", None),
        ("gce://project/zone/name", None),
        ("aws:///a/b/i-0123abcd", None),
        ("", None),
    ],
)
def test_instance_id_from_provider_id(provider_id: str, expected: str | None) -> None:
    assert instance_id_from_provider_id(provider_id) == expected


INSTANCE = {
    "InstanceId": "i-0123456789abcdef0",
    "InstanceType": "c6g.xlarge",
    "Placement": {"AvailabilityZone": "us-east-1b"},
    "State": {"Name": "running"},
    "PrivateDnsName": "ip-10-0-1-4.ec2.internal",
    "PrivateIpAddress": "10.0.1.4",
    "PublicDnsName": "ec2-54-1-2-3.compute-1.amazonaws.com",
    "PublicIpAddress": "54.1.2.3",
    "NetworkInterfaces": [
        {  # listed first, attached second: device-index order wins
            "Status": "in-use",
            "Attachment": {"DeviceIndex": 1},
            "PrivateIpAddresses": [
                {"PrivateIpAddress": "10.0.1.113", "Primary": False},
                {"PrivateIpAddress": "10.0.1.18", "Primary": True},
            ],
        },
        {
            "Status": "detaching",
            "Attachment": {"DeviceIndex": 2},
            "PrivateIpAddresses": [{"PrivateIpAddress": "10.9.9.9"}],
        },
        {
            "Status": "in-use",
            "Attachment": {"DeviceIndex": 0},
            "PrivateIpAddresses": [{"PrivateIpAddress": "10.0.1.4"}],
        },
    ],
}


def test_addresses_follow_device_index_and_primary_first() -> None:
    assert node_addresses(INSTANCE) == (
        ("InternalIP", "10.0.1.4"),
        ("InternalIP", "10.0.1.18"),
        ("InternalIP", "10.0.1.113"),
        ("ExternalIP", "54.1.2.3"),
        ("InternalDNS", "ip-10-0-1-4.ec2.internal"),
        ("Hostname", "ip-10-0-1-4.ec2.internal"),
        ("ExternalDNS", "ec2-54-1-2-3.compute-1.amazonaws.com"),
    )


def test_metadata_from_instance() -> None:
    meta = metadata_from_instance(INSTANCE, "us-east-1", {"us-east-1b": "use1-az1"})
    assert (meta.provider_id, meta.instance_type, meta.zone, meta.region, meta.zone_id, meta.state) == (
        "aws:///us-east-1b/i-0123456789abcdef0",
        "c6g.xlarge",
        "us-east-1b",
        "us-east-1",
        "use1-az1",
        "running",
    )
    assert meta.exists and not meta.shutdown
    stopped = metadata_from_instance({**INSTANCE, "State": {"Name": "stopped"}}, "us-east-1", {})
    assert stopped.exists and stopped.shutdown and stopped.zone_id == ""
    assert not metadata_from_instance({**INSTANCE, "State": {"Name": "terminated"}}, "r", {}).exists


def test_parse_ec2_state_change_and_scheduled_events() -> None:
    event = parse_node_message(ec2_state_change_body("i-0123456789abcdef0", "terminated", "e1"))
    assert event == InstanceStateChange("e1", "i-0123456789abcdef0", "terminated", "2026-01-01T00:00:00Z")
    assert parse_node_message(scheduled_event_body("tick")) == SafetyPass("tick", "2026-01-01T00:00:00Z")


def test_parse_node_delta_and_reject_service_deltas() -> None:
    delta = delta_for(
        "Node", "ADDED", {**node("n1", "i-1"), "metadata": {"name": "n1", "uid": "u", "resourceVersion": "1"}}
    )
    assert parse_node_message(delta.to_body()) == delta
    svc = delta_for("Service", "ADDED", service())
    with pytest.raises(InvalidNodeMessage, match="Service delta"):
        parse_node_message(svc.to_body())


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        json.dumps({"v": 1, "kind": "Node"}),
        ec2_state_change_body("i-0123456789abcdef0", "exploded", "e1"),
        ec2_state_change_body("vol-0123456789abcdef0", "running", "e1"),
        json.dumps(
            {"id": "x", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2", "detail": {}}
        ),
        json.dumps({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}),  # no id
        json.dumps({"id": "x", "detail-type": "Scheduled Event", "source": "evil.source", "detail": {}}),
    ],
)
def test_anything_else_is_rejected_with_a_reason(body: str) -> None:
    with pytest.raises(InvalidNodeMessage) as err:
        parse_node_message(body)
    assert str(err.value)
