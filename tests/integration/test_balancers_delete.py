"""Both drivers behind LoadBalancers, sharing one security-group manager, against moto answering as AWS does
(devstack.aws_faithful): a group is in use while any load balancer lists it (DependencyViolation), and for a while
after its load balancer is deleted.

A Service with source ranges has its own frontend group, named after the LB name (`k8s-elb-<name>`), and an NLB
and a Classic ELB of one Service share that name: a driver must delete only its own load balancer, and the group
goes only once every load balancer using it is gone. Every LB also carries the cluster's shared backend group,
whose one node rule stays. The migration from the previous design (a group and a node rule per LB) and the
delete of an LB on the shared groups only (no EC2 call) are here too.
"""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from ccm.aws import security_groups_model as sgm
from ccm.aws.balancers import LoadBalancers
from ccm.aws.clb import ClassicLoadBalancers
from ccm.aws.lbconfig import parse_load_balancer_config
from ccm.aws.nlb import NetworkLoadBalancers
from ccm.aws.ownership import Ownership
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cloud import PassFlags, RetryError
from ccm.contracts.cluster import Cluster
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
        self.groups = groups = SecurityGroups(world.clients, Cluster(CLUSTER, world.vpc_id))
        groups.forget_node_groups()  # the cache is per execution environment; every moto world is a new VPC
        self.lbs = LoadBalancers(
            NetworkLoadBalancers(world.clients, Cluster(CLUSTER, world.vpc_id, OUR_CLASS), groups),
            ClassicLoadBalancers(world.clients, Cluster(CLUSTER, world.vpc_id, OUR_CLASS), groups),
            Cluster(CLUSTER, world.vpc_id, OUR_CLASS, default_lb_type="clb"),
            security_groups=groups,
            ownership=Ownership(world.clients, Cluster(CLUSTER, world.vpc_id, OUR_CLASS)),
        )

    def node_rule_sources(self) -> list[str]:
        (group,) = self.ec2.describe_security_groups(GroupIds=[self.node_group])["SecurityGroups"]
        return sorted(p["GroupId"] for perm in group["IpPermissions"] for p in perm.get("UserIdGroupPairs", []))

    def backend(self) -> list[str]:
        return [self.groups.shared.group_id(sgm.ROLE_BACKEND)]

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


def _svc(lb_type: str, ranges: list[str] | None = None) -> dict[str, Any]:
    """With source ranges by default: the LB has a group of its own (k8s-elb-<name>) besides the backend group."""
    return service(annotations={TYPE: lb_type}, loadBalancerSourceRanges=["10.0.0.0/8"] if ranges is None else ranges)


def test_deleting_a_classic_elb_service_deletes_the_clb_then_its_group(env: Env) -> None:
    svc = _svc("clb")
    env.lbs.ensure_load_balancer(svc, env.world.nodes())
    assert len(env.managed_groups()) == 1
    assert env.node_rule_sources() == env.backend()  # the one shared rule, no rule of its own
    # Before: the NLB cleanup ran first, found the CLB's group by its name, revoked its node rule (cutting the
    # traffic of a CLB still serving) and failed with DependencyViolation: the CLB was never deleted.
    env.lbs.delete_for_uid(svc["metadata"]["uid"])
    assert env.clbs() == []
    assert env.managed_groups() == []
    assert env.node_rule_sources() == env.backend()


def test_a_delete_waits_for_aws_to_release_the_group_then_completes(env: Env, faithful_aws: FaithfulSettings) -> None:
    faithful_aws.sg_release_seconds = 1.0
    for lb_type in ("nlb", "clb"):
        svc = _svc(lb_type)
        env.lbs.ensure_load_balancer(svc, env.world.nodes())
        with pytest.raises(RetryError, match="still in use"):
            env.lbs.delete_for_uid(svc["metadata"]["uid"])
        assert env.clbs() == env.nlbs() == []  # the load balancer itself went at once
        env.delete_until_done(svc["metadata"]["uid"])  # the queue coming back until AWS lets go
        assert env.managed_groups() == []
        assert env.node_rule_sources() == env.backend()


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
    env.lbs.ensure_load_balancer(svc, env.world.nodes())
    with pytest.raises(RetryError, match="not readable yet"):
        env.lbs.delete_for_uid(svc["metadata"]["uid"])
    assert env.clbs() + env.nlbs() != []  # kept: it is the one record of its group until reads show the group
    env.delete_until_done(svc["metadata"]["uid"])
    faithful_aws.eventual_consistency = False  # the test's own reads: everything visible
    assert env.managed_groups() == []
    assert env.node_rule_sources() == env.backend()


@pytest.mark.parametrize(("before", "after"), [("nlb", "clb"), ("clb", "nlb")])
def test_switching_type_keeps_the_shared_group_and_its_node_rule(env: Env, before: str, after: str) -> None:
    svc = _svc(before)
    env.lbs.ensure_load_balancer(svc, env.world.nodes())
    (group,) = env.managed_groups()
    svc["metadata"]["annotations"][TYPE] = after
    # A resync (thorough): the old LB is looked for and deleted once the new one is up.
    # Before: the old driver's cleanup revoked the node rule the new LB uses, then failed with DependencyViolation.
    env.lbs.ensure_load_balancer(svc, env.world.nodes(), PassFlags(thorough=True))
    assert (env.nlbs(), env.clbs()) == (([], [svc_name(svc)]) if after == "clb" else ([svc_name(svc)], []))
    assert env.managed_groups() == [group]
    assert env.node_rule_sources() == env.backend()
    env.delete_until_done(svc["metadata"]["uid"])
    assert env.managed_groups() == [] and env.node_rule_sources() == env.backend()


def svc_name(svc: dict[str, Any]) -> str:
    return ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]


def _made_elsewhere(env: Env, lb_type: str, name: str, tags: list[dict[str, str]]) -> None:
    """A load balancer of our name, made by someone else with these tags."""
    vpc_filter = [{"Name": "vpc-id", "Values": [env.world.vpc_id]}]
    subnets = [s["SubnetId"] for s in env.ec2.describe_subnets(Filters=vpc_filter)["Subnets"]]
    if lb_type == "nlb":
        env.elbv2.create_load_balancer(Name=name, Type="network", Subnets=subnets, Tags=tags)
    else:
        listeners = [{"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080}]
        env.elb.create_load_balancer(LoadBalancerName=name, Listeners=listeners, Subnets=subnets, Tags=tags)


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_a_load_balancer_of_the_service_name_tagged_for_another_cluster_is_never_deleted(
    env: Env, lb_type: str
) -> None:
    """Both drivers know their cluster (ccm.contracts.cluster.Cluster, given at construction) and ask its one
    ownership rule, `Cluster.claim`, whoever asked for the delete: another cluster's tag is never ours."""
    svc = _svc(lb_type)
    name = ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]
    tags = [{"Key": "kubernetes.io/cluster/another-cluster", "Value": "owned"}]
    _made_elsewhere(env, lb_type, name, tags)
    env.lbs.ensure_load_balancer_deleted(svc)
    assert (env.nlbs() if lb_type == "nlb" else env.clbs()) == [name]


def _groups_of(env: Env, svc: dict[str, Any], lb_type: str) -> list[str]:
    if lb_type == "nlb":
        return list(env.elbv2.describe_load_balancers(Names=[svc_name(svc)])["LoadBalancers"][0]["SecurityGroups"])
    described = env.elb.describe_load_balancers(LoadBalancerNames=[svc_name(svc)])["LoadBalancerDescriptions"]
    return list(described[0]["SecurityGroups"])


def _make_previous_version(env: Env, svc: dict[str, Any], lb_type: str) -> str:
    """Turn a live LB into what the previous version made: its own group k8s-elb-<name> (listener rules) as its
    only group, and a tagged node rule from that group named after the LB."""
    uid, name = svc["metadata"]["uid"], svc_name(svc)
    tags = [{"Key": k, "Value": v} for k, v in {CLUSTER_TAG: "owned", "serverless-ccm/service-uid": uid}.items()]
    gid = env.ec2.create_security_group(
        GroupName=sgm.managed_group_name(name),
        Description="previous version",
        VpcId=env.world.vpc_id,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tags}],
    )["GroupId"]
    listener = {"IpProtocol": "tcp", "FromPort": 80, "ToPort": 80, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
    env.ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[listener])
    if lb_type == "nlb":
        arn = env.elbv2.describe_load_balancers(Names=[name])["LoadBalancers"][0]["LoadBalancerArn"]
        env.elbv2.set_security_groups(LoadBalancerArn=arn, SecurityGroups=[gid])
    else:
        env.elb.apply_security_groups_to_load_balancer(LoadBalancerName=name, SecurityGroups=[gid])
    env.ec2.authorize_security_group_ingress(
        GroupId=env.node_group,
        IpPermissions=sgm.to_permissions([sgm.node_rule(gid, name, uid)]),
        TagSpecifications=sgm.node_rule_tags(CLUSTER_TAG),
    )
    return gid


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_an_lb_of_the_previous_design_moves_to_the_shared_groups(
    env: Env, faithful_aws: FaithfulSettings, lb_type: str
) -> None:
    """Upgrade: the LB's groups converge to [frontend, backend] (SetSecurityGroups / ApplySecurityGroups), its
    node rule is retired and its own group deleted, once AWS lets go of it (RetryError meanwhile)."""
    svc = _svc(lb_type, ranges=[])
    env.lbs.ensure_load_balancer(svc, env.world.nodes())
    shared = _groups_of(env, svc, lb_type)
    old = _make_previous_version(env, svc, lb_type)
    assert sorted(env.node_rule_sources()) == sorted([*env.backend(), old])
    faithful_aws.sg_release_seconds = 1.0  # the LB's interfaces hold the group a while after it is detached
    try:
        env.lbs.ensure_load_balancer(svc, env.world.nodes())
    except RetryError:
        deadline = time.monotonic() + 30
        while True:  # the queue comes back with a thorough pass
            try:
                env.lbs.ensure_load_balancer(svc, env.world.nodes(), PassFlags(thorough=True))
                break
            except RetryError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
    assert sorted(_groups_of(env, svc, lb_type)) == sorted(shared)
    listeners = env.groups.shared.listener_group(sgm.desired_lb_rules(parse_load_balancer_config(svc), lb_type))
    assert sorted(shared) == sorted([listeners, *env.backend()])
    assert env.node_rule_sources() == env.backend()  # its own node rule is gone
    assert env.managed_groups() == []  # and its group deleted


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_deleting_an_lb_on_the_shared_groups_makes_no_ec2_call(env: Env, lb_type: str) -> None:
    svc = _svc(lb_type, ranges=[])
    env.lbs.ensure_load_balancer(svc, env.world.nodes())
    counter = env.world.clients.counter
    counter.reset_thread()
    env.lbs.delete_for_uid(svc["metadata"]["uid"])
    calls = counter.thread_calls()
    assert not [op for op in calls if op.startswith("ec2:")], calls
    assert env.clbs() == env.nlbs() == []
    assert env.node_rule_sources() == env.backend()  # the shared rule serves the cluster's other LBs


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_a_delete_by_uid_knows_the_cluster_too(env: Env, lb_type: str) -> None:
    """The by-UID path (a Service gone, a message's UID) once fell back to "any cluster's tag or our UID tag": an LB
    of this name carrying our UID tag but another cluster's tag was deleted. Now every path asks `Cluster.claim`."""
    svc = _svc(lb_type)
    name, uid = svc_name(svc), svc["metadata"]["uid"]
    tags = [
        {"Key": "kubernetes.io/cluster/another-cluster", "Value": "owned"},
        {"Key": "serverless-ccm/service-uid", "Value": uid},
    ]
    _made_elsewhere(env, lb_type, name, tags)
    env.lbs.delete_for_uid(uid)
    assert (env.nlbs() if lb_type == "nlb" else env.clbs()) == [name]
