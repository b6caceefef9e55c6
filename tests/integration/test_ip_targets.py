"""ccm.aws.ip_targets.IpTargetRegistrar against moto made faithful (devstack.aws_faithful_elb: `ip` target groups
refuse addresses outside the VPC's subnets, count the 1,000-target quota and drain deregistered targets, as AWS;
ELBv2 API reference, RegisterTargets and TargetDescription), through the repository's clients, whose call counter
counts every API call."""

from __future__ import annotations

from collections import Counter

import boto3
import pytest
from botocore.exceptions import ClientError

from ccm.aws.ip_targets import IpTargetRegistrar, TargetQuotas
from ccm.contracts.endpoints import IpTarget
from devstack import aws_faithful

from .conftest import REGION, World


def ip_group(world: World, name: str = "ip-web") -> str:
    answer = world.clients.elbv2.create_target_group(
        Name=name, Protocol="TCP", Port=8080, VpcId=world.vpc_id, TargetType="ip"
    )
    return str(answer["TargetGroups"][0]["TargetGroupArn"])


def pods(count: int, start: int = 0) -> set[IpTarget]:
    """Addresses in the world's two subnets (10.0.0.0/24 and 10.0.1.0/24)."""
    return {IpTarget(f"10.0.{i // 200}.{i % 200 + 10}", 8080) for i in range(start, start + count)}


def registered(world: World, tg: str) -> set[IpTarget]:
    described = world.clients.elbv2.describe_target_health(TargetGroupArn=tg)["TargetHealthDescriptions"]
    return {
        IpTarget(d["Target"]["Id"], d["Target"]["Port"]) for d in described if d["TargetHealth"]["State"] != "draining"
    }


def calls_of(world: World, before: Counter[str]) -> dict[str, int]:
    return {op: n for op, n in (world.clients.counter.snapshot() - before).items() if n}


def test_250_targets_register_in_two_calls_and_an_unchanged_set_costs_one_describe(world: World) -> None:
    tg = ip_group(world)
    registrar = IpTargetRegistrar(world.clients)
    before = world.clients.counter.snapshot()
    plan = registrar.sync(tg, world.vpc_id, pods(250))
    assert [(verb, len(chunk)) for verb, chunk in plan.calls()] == [("register", 200), ("register", 50)]
    assert calls_of(world, before) == {
        "elbv2:DescribeTargetHealth": 1,
        "ec2:DescribeSubnets": 1,  # once per execution environment and VPC
        "elbv2:RegisterTargets": 2,
    }
    assert registered(world, tg) == pods(250)

    before = world.clients.counter.snapshot()
    assert registrar.sync(tg, world.vpc_id, pods(250)).empty
    assert calls_of(world, before) == {"elbv2:DescribeTargetHealth": 1}


def test_a_churn_of_25_is_one_deregister_then_one_register(world: World) -> None:
    tg = ip_group(world)
    registrar = IpTargetRegistrar(world.clients)
    registrar.sync(tg, world.vpc_id, pods(100))
    rolled = pods(75, start=25) | pods(25, start=300)  # 25 pods replaced by 25 new ones
    before = world.clients.counter.snapshot()
    plan = registrar.sync(tg, world.vpc_id, rolled)
    assert [(verb, len(chunk)) for verb, chunk in plan.calls()] == [("deregister", 25), ("register", 25)]
    assert calls_of(world, before) == {
        "elbv2:DescribeTargetHealth": 1,
        "elbv2:DeregisterTargets": 1,
        "elbv2:RegisterTargets": 1,
    }
    assert registered(world, tg) == rolled
    # The 25 gone are draining now (deregistration delay); wanted again, they are registered again.
    observed = registrar.observe(tg)
    assert {t for t, h in observed.items() if h.state == "draining"} == pods(25)
    back = registrar.sync(tg, world.vpc_id, rolled | pods(5))
    assert back.register == tuple(sorted(pods(5), key=IpTarget.sort_key)) and back.deregister == ()
    assert registered(world, tg) == rolled | pods(5)


def test_an_address_outside_the_vpcs_subnets_is_skipped_with_a_reason_the_rest_registered(world: World) -> None:
    tg = ip_group(world)
    outside = IpTarget("10.0.7.9", 8080)  # inside the VPC's CIDR block, in no subnet (LBC #3714)
    # AWS refuses the whole call for that one address: why the plan leaves it out.
    with pytest.raises(ClientError) as err:
        world.clients.elbv2.register_targets(
            TargetGroupArn=tg, Targets=[{"Id": "10.0.0.10", "Port": 8080}, {"Id": outside.ip, "Port": 8080}]
        )
    assert err.value.response["Error"]["Code"] == "ValidationError"
    registrar = IpTargetRegistrar(world.clients)
    before = world.clients.counter.snapshot()
    plan = registrar.sync(tg, world.vpc_id, pods(3) | {outside})
    assert [(r.target, r.reason) for r in plan.refused] == [(outside, "not in a subnet of the load balancer's VPC")]
    assert plan.warnings()[0][0] == "IpTargetsRefused"
    assert registered(world, tg) == pods(3)
    # Before refusing, the subnets are read again once (one may have been added since they were cached).
    assert calls_of(world, before)["ec2:DescribeSubnets"] == 2

    # A subnet added for it (say, a new node group's): the cached ranges are refreshed and it is registered.
    boto3.client("ec2", region_name=REGION).create_subnet(
        VpcId=world.vpc_id, CidrBlock="10.0.7.0/24", AvailabilityZone="us-east-1a"
    )
    assert registrar.sync(tg, world.vpc_id, pods(3) | {outside}).register == (outside,)
    assert registered(world, tg) == pods(3) | {outside}


def test_more_endpoints_than_the_quota_register_the_first_in_order(
    world: World, faithful_aws: aws_faithful.FaithfulSettings
) -> None:
    faithful_aws.max_targets_per_target_group = 30  # AWS's 1,000, scaled down (the devstack enforces the setting)
    tg = ip_group(world)
    registrar = IpTargetRegistrar(world.clients, TargetQuotas(per_group=30))
    plan = registrar.sync(tg, world.vpc_id, pods(35))
    ordered = sorted(pods(35), key=IpTarget.sort_key)
    assert plan.register == tuple(ordered[:30]) and plan.over_quota == tuple(ordered[30:])
    assert registered(world, tg) == set(ordered[:30])
    # Past the quota AWS would have refused the call (TooManyTargets): the quota held it off.
    with pytest.raises(ClientError) as err:
        world.clients.elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": ordered[30].ip, "Port": 8080}])
    assert err.value.response["Error"]["Code"] == "TooManyTargets"
