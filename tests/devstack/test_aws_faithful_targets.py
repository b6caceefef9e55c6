"""The devstack's moto answers as AWS does about target families and the NLB-wide target quotas
(devstack.aws_faithful_elb_targets), over HTTP with the real protocols. Each test fails against plain moto 5.2.

- ELB user guide, "Target groups for your Network Load Balancers", IP address type: one family per target group;
  IPv6 target groups only behind dualstack Network Load Balancers.
- EC2 API reference, SubnetIpv6CidrBlockAssociation: Ipv6CidrBlockState is a SubnetCidrBlockState.
- "Quotas for your Network Load Balancers": 500 targets per Availability Zone per NLB, 3,000 per NLB, a target in N
  target groups counting N times; with cross-zone load balancing the per-zone number per NLB.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devstack import aws_faithful
from devstack.aws import World, client, seed_world
from devstack.aws_faithful import FaithfulSettings

from .conftest import REGION

NO_RETRIES = Config(retries={"mode": "standard", "max_attempts": 1})


@pytest.fixture(scope="module")
def world(endpoint: str) -> World:
    return seed_world(endpoint, REGION, "faithful-targets", nodes=2)


@pytest.fixture
def faithful() -> Iterator[FaithfulSettings]:
    yield aws_faithful.install(FaithfulSettings(sg_release_seconds=0, eventual_consistency=False))
    aws_faithful.install(FaithfulSettings(sg_release_seconds=0))


def _refused(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    return str(err.value.response["Error"]["Code"]), str(err.value.response["Error"]["Message"])


def _ip_group(world: World, name: str, **kwargs: Any) -> str:
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    created = elbv2.create_target_group(
        Name=name, Protocol="TCP", Port=8080, VpcId=world.vpc_id, TargetType="ip", **kwargs
    )
    return str(created["TargetGroups"][0]["TargetGroupArn"])


def _nlb(world: World, name: str, **kwargs: Any) -> str:
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    subnets = list(world.public_subnets.values())
    created = elbv2.create_load_balancer(Name=name, Type="network", Subnets=subnets, **kwargs)
    return str(created["LoadBalancers"][0]["LoadBalancerArn"])


def _forward(tg: str) -> list[dict[str, str]]:
    return [{"Type": "forward", "TargetGroupArn": tg}]


def _ipv6_block(world: World) -> str:
    """An IPv6 /64 associated with the first private subnet (the VPC gets an Amazon-provided /56 first)."""
    ec2 = client("ec2", world.endpoint_url, REGION)
    subnet = world.private_subnets[sorted(world.private_subnets)[0]]
    (described,) = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]
    for assoc in described.get("Ipv6CidrBlockAssociationSet") or []:
        return str(assoc["Ipv6CidrBlock"])
    vpc = ec2.associate_vpc_cidr_block(VpcId=world.vpc_id, AmazonProvidedIpv6CidrBlock=True)
    block = ipaddress.ip_network(vpc["Ipv6CidrBlockAssociation"]["Ipv6CidrBlock"])
    first = str(next(block.subnets(new_prefix=64)))
    ec2.associate_subnet_cidr_block(SubnetId=subnet, Ipv6CidrBlock=first)
    return first


def test_a_target_group_takes_addresses_of_its_own_family_only(world: World, faithful: Any) -> None:
    elbv2 = client("elbv2", world.endpoint_url, REGION, config=NO_RETRIES)
    pod6 = str(ipaddress.ip_network(_ipv6_block(world))[7])
    # DescribeSubnets answers the block's state as a SubnetCidrBlockState (moto 5.2: a stringified dict).
    ec2 = client("ec2", world.endpoint_url, REGION)
    subnet = world.private_subnets[sorted(world.private_subnets)[0]]
    (assoc,) = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["Ipv6CidrBlockAssociationSet"]
    assert assoc["Ipv6CidrBlockState"] == {"State": "associated"}
    v6 = _ip_group(world, "family-v6", IpAddressType="ipv6")
    v4 = _ip_group(world, "family-v4")
    assert _refused(elbv2.register_targets, TargetGroupArn=v6, Targets=[{"Id": "10.0.128.5"}]) == (
        "ValidationError",
        "The IP address '10.0.128.5' is not a valid IPv6 address",
    )
    assert _refused(elbv2.register_targets, TargetGroupArn=v4, Targets=[{"Id": pod6}]) == (
        "ValidationError",
        f"The IP address '{pod6}' is not a valid IPv4 address",
    )
    # An address in the subnet's IPv6 block is in the VPC: it takes the subnet's zone, as an IPv4 one does.
    elbv2.register_targets(TargetGroupArn=v6, Targets=[{"Id": pod6}])
    described = elbv2.describe_target_health(TargetGroupArn=v6)["TargetHealthDescriptions"]
    assert [d["Target"]["Id"] for d in described] == [pod6]


def test_an_ipv6_target_group_needs_a_dualstack_nlb(world: World, faithful: Any) -> None:
    elbv2 = client("elbv2", world.endpoint_url, REGION, config=NO_RETRIES)
    v6, v4 = _ip_group(world, "assoc-v6", IpAddressType="ipv6"), _ip_group(world, "assoc-v4")
    ipv4_lb = _nlb(world, "assoc-ipv4")
    expected = (
        "InvalidConfigurationRequest",
        "You cannot associate an IPv6 target group with a load balancer that has an 'ipv4' IP address type",
    )
    create = {"LoadBalancerArn": ipv4_lb, "Protocol": "TCP", "Port": 80}
    assert _refused(elbv2.create_listener, **create, DefaultActions=_forward(v6)) == expected
    listener = elbv2.create_listener(**create, DefaultActions=_forward(v4))["Listeners"][0]["ListenerArn"]
    assert _refused(elbv2.modify_listener, ListenerArn=listener, DefaultActions=_forward(v6)) == expected
    dual = _nlb(world, "assoc-dual", IpAddressType="dualstack")
    elbv2.create_listener(LoadBalancerArn=dual, Protocol="TCP", Port=80, DefaultActions=_forward(v6))
    (tg,) = elbv2.describe_target_groups(TargetGroupArns=[v6])["TargetGroups"]
    assert tg["LoadBalancerArns"] == [dual] and tg["IpAddressType"] == "ipv6"


def test_targets_per_zone_and_per_nlb_count_every_group_of_the_nlb(world: World, faithful: Any) -> None:
    aws_faithful.install(
        FaithfulSettings(
            sg_release_seconds=0, eventual_consistency=False, max_targets_per_zone_per_nlb=3, max_targets_per_nlb=5
        )
    )
    elbv2 = client("elbv2", world.endpoint_url, REGION, config=NO_RETRIES)
    lb = _nlb(world, "quota-zones")
    first, second = _ip_group(world, "quota-80"), _ip_group(world, "quota-443")
    for port, tg in ((80, first), (443, second)):
        elbv2.create_listener(LoadBalancerArn=lb, Protocol="TCP", Port=port, DefaultActions=_forward(tg))
    zone_a = [{"Id": f"10.0.128.{i}"} for i in (30, 31, 32)]  # the first private subnet's zone
    elbv2.register_targets(TargetGroupArn=first, Targets=zone_a)
    # The same address in a second group of the NLB is another target of its zone: past the 3 per zone.
    assert _refused(elbv2.register_targets, TargetGroupArn=second, Targets=zone_a[:1])[0] == "TooManyTargets"
    zone_b = [{"Id": f"10.0.129.{i}"} for i in (40, 41, 42)]
    elbv2.register_targets(TargetGroupArn=second, Targets=zone_b[:2])  # 5 on the NLB
    assert _refused(elbv2.register_targets, TargetGroupArn=second, Targets=zone_b[2:])[0] == "TooManyTargets"
    assert len(elbv2.describe_target_health(TargetGroupArn=second)["TargetHealthDescriptions"]) == 2
    # A group no listener of the NLB forwards to does not count towards it.
    elbv2.register_targets(TargetGroupArn=_ip_group(world, "quota-free"), Targets=zone_a + zone_b)
    # With cross-zone load balancing the NLB holds the per-zone number in all: 3 already, nothing more is taken.
    elbv2.deregister_targets(TargetGroupArn=second, Targets=zone_b[:2])
    elbv2.modify_load_balancer_attributes(
        LoadBalancerArn=lb, Attributes=[{"Key": "load_balancing.cross_zone.enabled", "Value": "true"}]
    )
    assert _refused(elbv2.register_targets, TargetGroupArn=second, Targets=zone_b[:1])[0] == "TooManyTargets"
