"""The checkpoint of what was applied (ccm.aws.applied) behind LoadBalancers, on in-process moto answering as AWS
does: what it saves, and that it never hides a change (a spec change, a load balancer deleted behind our back, a
target group gone, orphans carrying the UID tag)."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from ccm.aws.applied import FULL_READ_SECONDS, AppliedTable, fingerprint
from ccm.aws.balancers import LoadBalancers
from ccm.aws.clb import ClassicLoadBalancers
from ccm.aws.clients import CallCounter
from ccm.aws.nlb import NetworkLoadBalancers
from ccm.aws.ownership import Ownership
from ccm.aws.security_groups import SecurityGroups
from ccm.aws.table import ClusterTable
from ccm.contracts.cloud import PassFlags, RetryError
from ccm.contracts.cluster import Cluster
from devstack import aws_faithful
from devstack.aws_faithful import FaithfulSettings
from tests.factories import service
from tests.integration.conftest import CLUSTER, REGION, World

OUR_CLASS = "ccm.aws/serverless"
FIRST = PassFlags(trust_applied=True)
RETRY = PassFlags(thorough=True)


class Env:
    def __init__(self, world: World, lb_type: str = "nlb") -> None:
        self.world = world
        self.now = 1_000_000.0
        ddb = boto3.client("dynamodb", region_name=REGION)
        ddb.create_table(
            TableName="members",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        self.table = AppliedTable(ClusterTable("members", world.clients))
        ec2 = boto3.client("ec2", region_name=REGION)
        ec2.create_security_group(  # the node group: without it every pass would stay full (a Warning to retry)
            GroupName="nodes",
            Description="nodes",
            VpcId=world.vpc_id,
            TagSpecifications=[
                {
                    "ResourceType": "security-group",
                    "Tags": [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}],
                }
            ],
        )
        groups = SecurityGroups(world.clients, Cluster(CLUSTER, world.vpc_id))
        groups.forget_node_groups()
        self.lbs = LoadBalancers(
            NetworkLoadBalancers(world.clients, Cluster(CLUSTER, world.vpc_id, OUR_CLASS), groups),
            ClassicLoadBalancers(world.clients, Cluster(CLUSTER, world.vpc_id, OUR_CLASS), groups),
            Cluster(CLUSTER, world.vpc_id, OUR_CLASS, default_lb_type="nlb" if lb_type == "nlb" else "clb"),
            security_groups=groups,
            applied=self.table,
            ownership=Ownership(world.clients, Cluster(CLUSTER, world.vpc_id, OUR_CLASS)),
            clock=lambda: self.now,
        )
        self.elbv2 = boto3.client("elbv2", region_name=REGION)

    def calls(self, fn: Any, *args: Any) -> tuple[Any, dict[str, int]]:
        """AWS calls (not the table's) made by fn(*args)."""
        self.world.clients.counter.reset_thread()
        result = fn(*args)
        calls = self.world.clients.counter.thread_calls()
        return result, {op: n for op, n in calls.items() if not op.startswith("dynamodb:")}

    def created(self, **kwargs: Any) -> dict[str, Any]:
        svc = service(ports=[(80, 30080), (443, 30443)], finalizers=["service.kubernetes.io/load-balancer-cleanup"])
        svc["spec"].update(kwargs)
        self.lbs.ensure_load_balancer(svc, self.world.nodes(), PassFlags())
        return svc

    def registered(self) -> dict[int, set[str]]:
        out: dict[int, set[str]] = {}
        for tg in self.elbv2.describe_target_groups()["TargetGroups"]:
            health = self.elbv2.describe_target_health(TargetGroupArn=tg["TargetGroupArn"])
            out[tg["Port"]] = {t["Target"]["Id"] for t in health["TargetHealthDescriptions"]}
        return out


@pytest.fixture
def env(world: World) -> Env:
    return Env(world)


def test_a_converged_service_costs_one_read_until_its_full_read_is_due(env: Env) -> None:
    svc = env.created()
    status, calls = env.calls(env.lbs.ensure_unchanged, svc)
    assert status is not None and status.ingress[0].hostname.startswith("a")
    assert calls == {"elbv2:DescribeLoadBalancers": 1}
    env.now += FULL_READ_SECONDS * 1.3  # past its (spread) period: the full read-and-repair runs
    assert env.lbs.ensure_unchanged(svc) is None


def test_a_changed_spec_never_matches_the_checkpoint(env: Env) -> None:
    svc = env.created()
    changed = {
        **svc,
        "metadata": {
            **svc["metadata"],
            "annotations": {"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval": "10"},
        },
    }
    _, calls = env.calls(env.lbs.ensure_unchanged, changed)
    assert calls == {}  # the fingerprint differs: no AWS call, a full ensure follows
    assert env.lbs.ensure_unchanged(changed) is None


def test_a_load_balancer_deleted_behind_our_back_is_noticed_and_recreated(env: Env) -> None:
    svc = env.created()
    (lb,) = env.elbv2.describe_load_balancers()["LoadBalancers"]
    env.elbv2.delete_load_balancer(LoadBalancerArn=lb["LoadBalancerArn"])
    assert env.lbs.ensure_unchanged(svc) is None
    env.lbs.ensure_load_balancer(svc, env.world.nodes(), FIRST)
    assert len(env.elbv2.describe_load_balancers()["LoadBalancers"]) == 1
    assert env.lbs.ensure_unchanged(svc) is not None


def test_host_updates_apply_only_the_difference_by_stored_arns(env: Env) -> None:
    svc = env.created()
    nodes = env.world.nodes()
    _, calls = env.calls(env.lbs.update_load_balancer, svc, nodes[:2], FIRST)
    assert calls == {"elbv2:DeregisterTargets": 2}  # one per target group, no read
    assert env.registered() == {30080: set(env.world.instances[:2]), 30443: set(env.world.instances[:2])}
    _, calls = env.calls(env.lbs.update_load_balancer, svc, nodes[:2], FIRST)
    assert calls == {}  # the checkpoint's target set followed
    _, calls = env.calls(env.lbs.update_load_balancer, svc, nodes, FIRST)
    assert calls == {"elbv2:RegisterTargets": 2}
    assert env.registered() == {30080: set(env.world.instances), 30443: set(env.world.instances)}


def test_a_target_group_gone_drops_the_checkpoint_and_the_retry_reads_everything(env: Env) -> None:
    svc = env.created()
    (lb,) = env.elbv2.describe_load_balancers()["LoadBalancers"]
    listeners = env.elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]
    victim = next(ls for ls in listeners if ls["Port"] == 443)
    env.elbv2.delete_listener(ListenerArn=victim["ListenerArn"])
    env.elbv2.delete_target_group(TargetGroupArn=victim["DefaultActions"][0]["TargetGroupArn"])
    with pytest.raises(RetryError):
        env.lbs.update_load_balancer(svc, env.world.nodes()[:1], FIRST)
    assert env.table.get(svc["metadata"]["uid"]) is None
    env.lbs.ensure_load_balancer(svc, env.world.nodes()[:1], RETRY)
    assert env.registered() == {30080: {env.world.instances[0]}, 30443: {env.world.instances[0]}}


def test_delete_by_the_checkpoint_then_its_echo_costs_nothing(env: Env) -> None:
    svc = env.created()
    uid = svc["metadata"]["uid"]
    env.world.clients.counter.reset_thread()
    while True:  # as the queue would: RetryError = come back later (AWS holds the group a while)
        try:
            env.lbs.delete_for_uid(uid)
            break
        except RetryError:
            env.now += 1
    assert env.elbv2.describe_load_balancers()["LoadBalancers"] == []
    assert env.elbv2.describe_target_groups()["TargetGroups"] == []
    assert env.lbs.applied_for(uid) is False  # a tombstone
    _, calls = env.calls(env.lbs.delete_for_uid, uid)
    assert calls == {}


def test_an_orphan_carrying_the_uid_tag_is_deleted_with_the_rest(env: Env) -> None:
    svc = env.created()
    uid = svc["metadata"]["uid"]
    # A crash between two calls of an earlier pass left a target group the checkpoint does not know.
    env.elbv2.create_target_group(
        Name="orphan",
        Protocol="TCP",
        Port=30999,
        VpcId=env.world.vpc_id,
        TargetType="instance",
        Tags=[
            {"Key": "serverless-ccm/service-uid", "Value": uid},
            {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"},
        ],
    )
    for _ in range(100):
        try:
            env.lbs.delete_for_uid(uid)
            break
        except RetryError:
            continue
    assert env.elbv2.describe_target_groups()["TargetGroups"] == []


def test_first_sight_of_our_class_creates_without_looking(env: Env) -> None:
    svc = service(ports=[(80, 30080)])
    svc["spec"]["loadBalancerClass"] = OUR_CLASS
    _, calls = env.calls(
        env.lbs.ensure_load_balancer, svc, env.world.nodes(), PassFlags(trust_applied=True, first_sight=True)
    )
    assert "elbv2:DescribeLoadBalancers" not in calls and "elbv2:DescribeListeners" not in calls
    assert calls["elbv2:CreateLoadBalancer"] == 1
    claimed = service(ports=[(80, 30081)])  # no class: cloud-provider-aws may have made one under this name
    _, calls = env.calls(
        env.lbs.ensure_load_balancer,
        claimed,
        env.world.nodes(),
        PassFlags(trust_applied=True, first_sight=True),
    )
    assert calls["elbv2:DescribeLoadBalancers"] == 1


def test_an_adopted_load_balancer_is_tagged_before_it_is_checkpointed(env: Env) -> None:
    svc = env.created()
    uid = svc["metadata"]["uid"]
    (lb,) = env.elbv2.describe_load_balancers()["LoadBalancers"]
    env.elbv2.remove_tags(ResourceArns=[lb["LoadBalancerArn"]], TagKeys=["serverless-ccm/service-uid"])
    env.table.forget(uid)  # as if cloud-provider-aws had made it: no checkpoint, no UID tag
    env.lbs.ensure_load_balancer(svc, env.world.nodes(), PassFlags())
    tags = env.elbv2.describe_tags(ResourceArns=[lb["LoadBalancerArn"]])["TagDescriptions"][0]["Tags"]
    assert {"Key": "serverless-ccm/service-uid", "Value": uid} in tags
    assert env.table.get(uid) is not None


def test_the_fingerprint_does_not_depend_on_set_order_or_hash_seed() -> None:
    assert fingerprint({"b": frozenset({"x", "y", "z"}), "a": (1, 2)}) == fingerprint(
        {"a": [1, 2], "b": {"z", "y", "x"}}
    )
    assert fingerprint("nlb", 1) != fingerprint("clb", 1)


def test_a_classic_elb_noop_costs_one_read_and_a_host_update_one_call(world: World) -> None:
    env = Env(world, "clb")
    svc = env.created()
    _, calls = env.calls(env.lbs.ensure_unchanged, svc)
    assert calls == {"elb:DescribeLoadBalancers": 1}
    _, calls = env.calls(env.lbs.update_load_balancer, svc, world.nodes()[:1], FIRST)
    assert calls == {"elb:DeregisterInstancesFromLoadBalancer": 1}
    assert CallCounter.mutating(calls) == 1


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_the_hostname_is_published_right_after_create_load_balancer(world: World, lb_type: str) -> None:
    env = Env(world, lb_type)
    seen: list[tuple[str, dict[str, int]]] = []

    def publish(status: Any) -> None:
        seen.append((status.ingress[0].hostname, dict(world.clients.counter.thread_calls())))

    world.clients.counter.reset_thread()
    svc = service(ports=[(80, 30080), (443, 30443)])
    final = env.lbs.ensure_load_balancer(svc, world.nodes(), PassFlags(), publish)
    ((hostname, calls_then),) = seen
    assert hostname == final.ingress[0].hostname
    create = "elbv2:CreateLoadBalancer" if lb_type == "nlb" else "elb:CreateLoadBalancer"
    assert calls_then[create] == 1
    # Nothing of the rest was made yet: the clients see the address while listeners and targets follow.
    assert not {op for op in calls_then if "Listener" in op or "Register" in op or "HealthCheck" in op}
    assert env.lbs.ensure_load_balancer(svc, world.nodes(), PassFlags(), publish) == final
    assert len(seen) == 1  # an existing LB publishes nothing early


def test_a_delete_waiting_on_its_security_group_does_not_delete_the_lb_twice(env: Env) -> None:
    aws_faithful.install(FaithfulSettings(sg_release_seconds=1.0, eventual_consistency=False))
    svc = env.created(loadBalancerSourceRanges=["10.0.0.0/8"])  # its own frontend group, which AWS holds a while
    uid = svc["metadata"]["uid"]
    deletes, waits = 0, 0
    for _ in range(100):
        env.world.clients.counter.reset_thread()
        try:
            env.lbs.delete_for_uid(uid)
            done = True
        except RetryError:
            done, waits = False, waits + 1
            time.sleep(0.1)
        deletes += env.world.clients.counter.thread_calls()["elbv2:DeleteLoadBalancer"]
        if done:
            break
    assert done and waits > 0 and deletes == 1
    assert env.lbs.applied_for(uid) is False


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_a_delete_never_names_a_resource_that_is_gone(world: World, lb_type: str) -> None:
    """IAM judges a delete by the resource's tags: a resource already gone has none, so real AWS answers
    AccessDenied (not NotFound). What the tagging API does not list is read before it is deleted."""
    env = Env(world, lb_type)
    svc = env.created()
    uid = svc["metadata"]["uid"]
    if lb_type == "nlb":
        (lb,) = env.elbv2.describe_load_balancers()["LoadBalancers"]
        env.elbv2.delete_load_balancer(LoadBalancerArn=lb["LoadBalancerArn"])
        for tg in env.elbv2.describe_target_groups()["TargetGroups"]:
            env.elbv2.delete_target_group(TargetGroupArn=tg["TargetGroupArn"])
    else:
        boto3.client("elb", region_name=REGION).delete_load_balancer(LoadBalancerName=env.table.get(uid).lb_id)  # type: ignore[union-attr]
    _, calls = env.calls(env.lbs.delete_for_uid, uid)
    assert not [op for op in calls if op.endswith(("DeleteLoadBalancer", "DeleteTargetGroup"))], calls
    assert env.lbs.applied_for(uid) is False


def test_a_tombstone_never_outlives_a_later_creation(env: Env) -> None:
    """LoadBalancer -> ClusterIP (deleted: a tombstone) -> LoadBalancer again, same UID, and the pass crashes after
    CreateLoadBalancer, before its checkpoint is stored: the delete that follows must still find the LB."""
    svc = env.created()
    uid = svc["metadata"]["uid"]
    env.lbs.delete_for_uid(uid)
    assert env.lbs.applied_for(uid) is False

    def crash(status: Any) -> None:
        raise RuntimeError("crash right after CreateLoadBalancer")

    with pytest.raises(RuntimeError):
        env.lbs.ensure_load_balancer(svc, env.world.nodes(), PassFlags(), crash)
    assert len(env.elbv2.describe_load_balancers()["LoadBalancers"]) == 1
    assert env.lbs.applied_for(uid) is None  # no record: a delete looks everything up by name
    for _ in range(100):
        try:
            env.lbs.delete_for_uid(uid)
            break
        except RetryError:
            time.sleep(0.1)
    assert env.elbv2.describe_load_balancers()["LoadBalancers"] == []


def test_a_record_under_another_key_proves_nothing(env: Env) -> None:
    """A message naming a UID under another Service's key (forged, or a mistake) must not be taken for ours: the
    record says which Service it was applied for, and only that key is trusted (otherwise the tags decide)."""
    svc = env.created()
    uid = svc["metadata"]["uid"]
    assert env.lbs.applied_for(uid, "default/web") is True
    assert env.lbs.applied_for(uid, "default/other") is None
    env.lbs.delete_for_uid(uid)
    assert env.lbs.applied_for(uid, "default/other") is False  # a tombstone deletes nothing, whoever asks
