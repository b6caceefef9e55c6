"""devstack.moto_speed keeps moto's answers while skipping its linear scans (over HTTP, boto3 unpatched)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devstack import queues
from devstack.aws import World, client, seed_world

from .conftest import REGION


@pytest.fixture(scope="module")
def world(endpoint: str) -> World:
    return seed_world(endpoint, REGION, "speed", nodes=1)


def _tg(elbv2: Any, world: World, name: str, port: int) -> str:
    return str(
        elbv2.create_target_group(Name=name, Protocol="TCP", Port=port, VpcId=world.vpc_id)["TargetGroups"][0][
            "TargetGroupArn"
        ]
    )


def test_target_groups_by_load_balancer_are_those_its_listeners_forward_to(world: World) -> None:
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    subnets = list(world.public_subnets.values())
    lbs = [
        elbv2.create_load_balancer(Name=f"speed-{i}", Type="network", Subnets=subnets)["LoadBalancers"][0][
            "LoadBalancerArn"
        ]
        for i in range(3)
    ]
    groups = {name: _tg(elbv2, world, f"speed-{name}", port) for port, name in enumerate("abcd", start=80)}
    for lb, names in ((lbs[0], "ab"), (lbs[1], "c")):
        for port, name in enumerate(names, start=80):
            elbv2.create_listener(
                LoadBalancerArn=lb,
                Protocol="TCP",
                Port=port,
                DefaultActions=[{"Type": "forward", "TargetGroupArn": groups[name]}],
            )
    every = elbv2.describe_target_groups()["TargetGroups"]
    for lb in lbs[:2]:
        got = elbv2.describe_target_groups(LoadBalancerArn=lb)["TargetGroups"]
        # What a per-group look at LoadBalancerArns says (moto's own filter, which the patch replaces).
        expected = sorted((tg for tg in every if lb in tg["LoadBalancerArns"]), key=lambda tg: tg["TargetGroupName"])
        assert [tg["TargetGroupArn"] for tg in got] == [tg["TargetGroupArn"] for tg in expected]
        assert got  # the listeners above forward to at least one group each
    assert {tg["TargetGroupArn"] for tg in elbv2.describe_target_groups(LoadBalancerArn=lbs[0])["TargetGroups"]} == {
        groups["a"],
        groups["b"],
    }
    with pytest.raises(ClientError) as err:
        elbv2.describe_target_groups(LoadBalancerArn=lbs[0].replace("speed-0", "speed-none"))
    assert err.value.response["Error"]["Code"] == "LoadBalancerNotFound"


def test_a_fifo_group_in_flight_is_not_deliverable_until_its_timeout(sqs: Any) -> None:
    from moto.sqs.models import sqs_backends

    url = sqs.create_queue(
        QueueName="speed.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": "1", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    queue = sqs_backends["123456789012"][REGION].get_queue("speed.fifo")
    assert not queues._deliverable(queue)  # empty
    sqs.send_message(QueueUrl=url, MessageBody="a1", MessageGroupId="a")
    sqs.send_message(QueueUrl=url, MessageBody="a2", MessageGroupId="a")
    assert queues._deliverable(queue)
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
    assert [m["Body"] for m in first] == ["a1"]
    assert not queues._deliverable(queue)  # a2's group is in flight
    started = time.monotonic()
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in again] == ["a1", "a2"]  # once the timeout passed: the group again, oldest first
    assert 0.5 < time.monotonic() - started < 4
