"""Both drivers behind LoadBalancers, sharing one security-group manager, against moto answering as AWS does
(devstack.aws_faithful): a group is in use while any load balancer lists it (DependencyViolation), and for a while
after its load balancer is deleted.

The managed group is named after the LB name (`k8s-elb-<name>`), and an NLB and a Classic ELB of one Service
share that name: a driver must delete only its own load balancer, and the group (with its node rule) goes only
once every load balancer using it is gone.
"""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from ccm.aws.balancers import LoadBalancers
from ccm.aws.clb import ClassicLoadBalancers
from ccm.aws.nlb import NetworkLoadBalancers
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cloud import PassFlags, RetryError
from devstack import aws_faithful
from devstack.aws_faithful import FaithfulSettings
from tests.factories import service
from tests.integration.conftest import CLUSTER, REGION, World

TYPE = "service.beta.kubernetes.io/aws-load-balancer-type"
CLUSTER_TAG = f"kubernetes.io/cluster/{CLUSTER}"
OUR_CLASS = "ccm.aws/serverless"


class Env:
    def __init__(self, world: World) -> None:
        self.world = world
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.elb = boto3.client("elb", region_name=REGION)
        self.elbv2 = boto3.client("elbv2", region_name=REGION)
        self.node_group = self.ec2.create_security_group(
            GroupName="nodes",
            Description="nodes",
            VpcId=world.vpc_id,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": [{"Key": CLUSTER_TAG, "Value": "owned"}]}],
        )["GroupId"]
        groups = SecurityGroups(world.clients, world.vpc_id, CLUSTER)
        groups.forget_node_groups()  # the cache is per execution environment; every moto world is a new VPC
        self.lbs = LoadBalancers(
            NetworkLoadBalancers(world.clients, world.vpc_id, OUR_CLASS, groups),
            ClassicLoadBalancers(world.clients, world.vpc_id, OUR_CLASS, groups),
            "clb",
            security_groups=groups,
        )

    def node_rule_sources(self) -> list[str]:
        (group,) = self.ec2.describe_security_groups(GroupIds=[self.node_group])["SecurityGroups"]
        return sorted(p["GroupId"] for perm in group["IpPermissions"] for p in perm.get("UserIdGroupPairs", []))

    def managed_groups(self) -> list[str]:
        vpc = [{"Name": "vpc-id", "Values": [self.world.vpc_id]}, {"Name": "group-name", "Values": ["k8s-elb-*"]}]
        return [g["GroupId"] for g in self.ec2.describe_security_groups(Filters=vpc)["SecurityGroups"]]

    def clbs(self) -> list[str]:
        return [d["LoadBalancerName"] for d in self.elb.describe_load_balancers()["LoadBalancerDescriptions"]]

    def nlbs(self) -> list[str]:
        return [lb["LoadBalancerName"] for lb in self.elbv2.describe_load_balancers()["LoadBalancers"]]

    def delete_until_done(self, uid: str, timeout: float = 30) -> None:
        """Call delete_for_uid as the queue would (RetryError = come back later) until it completes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.lbs.delete_for_uid(uid)
                return
            except RetryError:
                assert time.monotonic() < deadline, "the delete never completed"
                time.sleep(0.2)


@pytest.fixture
def env(world: World) -> Env:
    return Env(world)


def _svc(lb_type: str) -> dict[str, Any]:
    return service(annotations={TYPE: lb_type})


def test_deleting_a_classic_elb_service_deletes_the_clb_then_its_group(env: Env) -> None:
    svc = _svc("clb")
    env.lbs.ensure_load_balancer(CLUSTER, svc, env.world.nodes())
    (group,) = env.managed_groups()
    assert env.node_rule_sources() == [group]
    # Before: the NLB cleanup ran first, found the CLB's group by its name, revoked its node rule (cutting the
    # traffic of a CLB still serving) and failed with DependencyViolation: the CLB was never deleted.
    env.lbs.delete_for_uid(svc["metadata"]["uid"])
    assert env.clbs() == []
    assert env.managed_groups() == []
    assert env.node_rule_sources() == []


def test_a_delete_waits_for_aws_to_release_the_group_then_completes(env: Env, faithful_aws: FaithfulSettings) -> None:
    faithful_aws.sg_release_seconds = 1.0
    for lb_type in ("nlb", "clb"):
        svc = _svc(lb_type)
        env.lbs.ensure_load_balancer(CLUSTER, svc, env.world.nodes())
        with pytest.raises(RetryError, match="still in use"):
            env.lbs.delete_for_uid(svc["metadata"]["uid"])
        assert env.clbs() == env.nlbs() == []  # the load balancer itself went at once
        env.delete_until_done(svc["metadata"]["uid"])  # the queue coming back until AWS lets go
        assert env.managed_groups() == []
        assert env.node_rule_sources() == []


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_a_delete_right_after_the_create_waits_for_the_group_to_be_readable(
    env: Env, faithful_aws: FaithfulSettings, lb_type: str
) -> None:
    """EC2 reads are eventually consistent: a Service deleted moments after its load balancer was created finds no
    managed group by name. Before: the delete concluded "no group", the finalizer went and the group leaked (seen
    on CI: create and delete 0.4 s apart). Now the load balancer stays until its groups are readable."""
    aws_faithful.settle()  # the node group existed long before
    faithful_aws.eventual_consistency, faithful_aws.consistency_seconds = True, 1.5
    svc = _svc(lb_type)
    env.lbs.ensure_load_balancer(CLUSTER, svc, env.world.nodes())
    with pytest.raises(RetryError, match="not readable yet"):
        env.lbs.delete_for_uid(svc["metadata"]["uid"])
    assert env.clbs() + env.nlbs() != []  # kept: it is the one record of its group until reads show the group
    env.delete_until_done(svc["metadata"]["uid"])
    faithful_aws.eventual_consistency = False  # the test's own reads: everything visible
    assert env.managed_groups() == []
    assert env.node_rule_sources() == []


@pytest.mark.parametrize(("before", "after"), [("nlb", "clb"), ("clb", "nlb")])
def test_switching_type_keeps_the_shared_group_and_its_node_rule(env: Env, before: str, after: str) -> None:
    svc = _svc(before)
    env.lbs.ensure_load_balancer(CLUSTER, svc, env.world.nodes())
    (group,) = env.managed_groups()
    svc["metadata"]["annotations"][TYPE] = after
    # A resync (thorough): the old LB is looked for and deleted once the new one is up.
    # Before: the old driver's cleanup revoked the node rule the new LB uses, then failed with DependencyViolation.
    env.lbs.ensure_load_balancer(CLUSTER, svc, env.world.nodes(), PassFlags(thorough=True))
    assert (env.nlbs(), env.clbs()) == (([], [svc_name(svc)]) if after == "clb" else ([svc_name(svc)], []))
    assert env.managed_groups() == [group]
    assert env.node_rule_sources() == [group]
    env.delete_until_done(svc["metadata"]["uid"])
    assert env.managed_groups() == [] and env.node_rule_sources() == []


def svc_name(svc: dict[str, Any]) -> str:
    return ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_a_load_balancer_of_the_service_name_tagged_for_another_cluster_is_never_deleted(
    env: Env, lb_type: str
) -> None:
    """The cluster name reaches both drivers' ownership check (ccm.aws.ownership.ours_to_delete): a delete by UID
    alone would accept any cluster's tag."""
    svc = _svc(lb_type)
    name = ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]
    tags = [{"Key": "kubernetes.io/cluster/another-cluster", "Value": "owned"}]
    vpc_filter = [{"Name": "vpc-id", "Values": [env.world.vpc_id]}]
    subnets = [s["SubnetId"] for s in env.ec2.describe_subnets(Filters=vpc_filter)["Subnets"]]
    if lb_type == "nlb":
        env.elbv2.create_load_balancer(Name=name, Type="network", Subnets=subnets, Tags=tags)
    else:
        listeners = [{"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080}]
        env.elb.create_load_balancer(LoadBalancerName=name, Listeners=listeners, Subnets=subnets, Tags=tags)
    env.lbs.ensure_load_balancer_deleted(CLUSTER, svc)
    assert (env.nlbs() if lb_type == "nlb" else env.clbs()) == [name]
