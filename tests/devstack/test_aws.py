"""seed_world builds the cluster network it promises, and node_objects() matches the instances."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.aws import World, client, seed_world

from .conftest import REGION

CLUSTER = "seeded"


@pytest.fixture(scope="module")
def world(endpoint: str) -> World:
    return seed_world(endpoint, REGION, CLUSTER, nodes=3)


@pytest.fixture(scope="module")
def ec2(endpoint: str) -> Any:
    return client("ec2", endpoint, REGION)


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def test_vpc_and_internet_gateway(world: World, ec2: Any) -> None:
    (vpc,) = ec2.describe_vpcs(VpcIds=[world.vpc_id])["Vpcs"]
    assert vpc["CidrBlock"] == "10.0.0.0/16"
    assert f"kubernetes.io/cluster/{CLUSTER}" in _tags(vpc)
    (igw,) = ec2.describe_internet_gateways(InternetGatewayIds=[world.internet_gateway_id])["InternetGateways"]
    assert igw["Attachments"][0]["VpcId"] == world.vpc_id


def test_subnets_per_az_with_role_tags_and_routes(world: World, ec2: Any) -> None:
    assert len(world.azs) >= 2
    assert set(world.public_subnets) == set(world.private_subnets) == set(world.azs)
    in_vpc = [{"Name": "vpc-id", "Values": [world.vpc_id]}]
    tables = ec2.describe_route_tables(Filters=in_vpc)["RouteTables"]
    table_of = {a["SubnetId"]: t for t in tables for a in t.get("Associations", []) if a.get("SubnetId")}
    subnets = {
        s["SubnetId"]: s
        for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["Subnets"]
    }
    for az in world.azs:
        public, private = subnets[world.public_subnets[az]], subnets[world.private_subnets[az]]
        assert public["AvailabilityZone"] == private["AvailabilityZone"] == az
        assert _tags(public)[f"kubernetes.io/cluster/{CLUSTER}"] == "shared"
        assert _tags(public)["kubernetes.io/role/elb"] == "1"
        assert _tags(private)["kubernetes.io/role/internal-elb"] == "1"
        # "public" in cloud-provider-aws terms: the subnet's route table routes to an igw-.
        public_gateways = {r.get("GatewayId", "") for r in table_of[public["SubnetId"]]["Routes"]}
        private_gateways = {r.get("GatewayId", "") for r in table_of[private["SubnetId"]]["Routes"]}
        assert world.internet_gateway_id in public_gateways
        assert not any(g.startswith("igw-") for g in private_gateways)
    cluster_tables = [t for t in tables if f"kubernetes.io/cluster/{CLUSTER}" in _tags(t)]
    assert [t["RouteTableId"] for t in cluster_tables] == [world.private_route_table_id]


def test_node_security_group_is_tagged(world: World, ec2: Any) -> None:
    (sg,) = ec2.describe_security_groups(GroupIds=[world.node_sg_id])["SecurityGroups"]
    assert sg["VpcId"] == world.vpc_id
    assert _tags(sg)[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"


def test_instances_running_round_robin_over_azs(world: World, ec2: Any) -> None:
    assert len(world.instances) == 3
    assert [i.az for i in world.instances] == [world.azs[n % len(world.azs)] for n in range(3)]
    described = {
        i["InstanceId"]: i
        for r in ec2.describe_instances(InstanceIds=[i.instance_id for i in world.instances])["Reservations"]
        for i in r["Instances"]
    }
    for inst in world.instances:
        live = described[inst.instance_id]
        assert live["State"]["Name"] == "running"
        assert live["Placement"]["AvailabilityZone"] == inst.az
        assert live["SubnetId"] == world.private_subnets[inst.az]
        assert live["PrivateDnsName"] == inst.private_dns and inst.private_dns.startswith("ip-10-0-")
        assert live["PrivateIpAddress"] == inst.private_ip
        assert world.node_sg_id in {g["GroupId"] for g in live["SecurityGroups"]}


def test_node_objects_match_instances(world: World) -> None:
    nodes = world.node_objects()
    assert [n["metadata"]["name"] for n in nodes] == [i.private_dns for i in world.instances]
    for node, inst in zip(nodes, world.instances, strict=True):
        assert node["spec"]["providerID"] == f"aws:///{inst.az}/{inst.instance_id}"
        assert {"type": "InternalIP", "address": inst.private_ip} in node["status"]["addresses"]
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
        labels = node["metadata"]["labels"]
        assert labels["topology.kubernetes.io/zone"] == inst.az
        assert labels["topology.kubernetes.io/region"] == REGION
    assert world.node_objects() == nodes  # stable uids across calls
