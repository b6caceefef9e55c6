"""In-process moto (mock_aws) with a small VPC: public subnets in two AZs and three running instances.

moto answers as AWS does (devstack.aws_faithful) for every test here, except that a deleted load balancer's security
group is released at once and a new group or rule is visible at once (the driver tests call a delete once and read
right after writing); tests of those behaviours switch them on themselves (`faithful_aws`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest
from moto import mock_aws

from ccm.aws.balancers import LoadBalancers
from ccm.aws.clients import AwsClients
from ccm.aws.nlb import NetworkLoadBalancers
from ccm.contracts.cluster import Cluster
from devstack import aws_faithful
from tests.factories import node
from tests.lb_types import only

REGION = "us-east-1"
CLUSTER = "test-cluster"


@dataclass
class World:
    vpc_id: str
    instances: list[str]
    clients: AwsClients
    nlb: LoadBalancers  # the pass with the NLB deployer alone (tests.lb_types.only)

    def nodes(self) -> list[dict]:
        return [node(f"n{i}", iid) for i, iid in enumerate(self.instances)]


@pytest.fixture(autouse=True)
def faithful_aws() -> aws_faithful.FaithfulSettings:
    """The settings in force for this test (a test may change them); process-wide, so set before every test."""
    return aws_faithful.install(aws_faithful.FaithfulSettings(sg_release_seconds=0, eventual_consistency=False))


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
        subnets = []
        for i, az in enumerate(("us-east-1a", "us-east-1b")):
            sid = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=az)["Subnet"]["SubnetId"]
            ec2.associate_route_table(RouteTableId=table, SubnetId=sid)
            ec2.create_tags(Resources=[sid], Tags=[{"Key": "kubernetes.io/role/elb", "Value": "1"}])
            subnets.append(sid)
        image = "ami-12c6146b"  # a moto built-in AMI; describing all images costs seconds
        instances = [
            ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnets[i % 2])["Instances"][0][
                "InstanceId"
            ]
            for i in range(3)
        ]
        clients = AwsClients(region=REGION)
        cluster = Cluster(CLUSTER, vpc, "ccm.aws/serverless")
        yield World(vpc, instances, clients, only("nlb", NetworkLoadBalancers(clients, cluster), cluster))
