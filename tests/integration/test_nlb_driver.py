"""The NLB driver against in-process moto: creation, idempotence, updates, deletion and crash recovery."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from ccm.aws.clients import CallCounter
from ccm.contracts.cloud import CloudStateError, ImplementedElsewhere, PassFlags, RetryError
from ccm.retry import retry_for
from tests.factories import node, service
from tests.integration.conftest import CLUSTER, World

THOROUGH = PassFlags(thorough=True)


def lb_state(world: World, uid: str) -> dict:
    elbv2 = world.clients.session.client("elbv2")
    name = ("a" + uid.replace("-", ""))[:32]
    lb = elbv2.describe_load_balancers(Names=[name])["LoadBalancers"][0]
    listeners = elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]
    state = {"scheme": lb["Scheme"], "dns": lb["DNSName"], "listeners": {}}
    for listener in listeners:
        tg_arn = listener["DefaultActions"][0]["TargetGroupArn"]
        tg = elbv2.describe_target_groups(TargetGroupArns=[tg_arn])["TargetGroups"][0]
        targets = elbv2.describe_target_health(TargetGroupArn=tg_arn)["TargetHealthDescriptions"]
        state["listeners"][listener["Port"]] = {
            "protocol": listener["Protocol"],
            "tg_port": tg["Port"],
            "hc": (tg["HealthCheckProtocol"], str(tg["HealthCheckPort"])),
            "targets": sorted(t["Target"]["Id"] for t in targets),
        }
    return state


def all_target_groups(world: World) -> list[dict]:
    return world.clients.session.client("elbv2").describe_target_groups()["TargetGroups"]


def test_create_then_noop_makes_no_mutating_call(world: World):
    svc = service()
    status = world.nlb.ensure_load_balancer(svc, world.nodes())
    state = lb_state(world, svc["metadata"]["uid"])
    assert status.ingress[0].hostname == state["dns"]
    assert state["scheme"] == "internet-facing"
    assert set(state["listeners"]) == {80, 443}
    assert state["listeners"][80]["targets"] == sorted(world.instances)
    assert state["listeners"][443]["tg_port"] == 30443

    world.clients.counter.reset_thread()
    world.nlb.ensure_load_balancer(svc, world.nodes())
    calls = world.clients.counter.thread_calls()
    assert CallCounter.mutating(calls) == 0
    # LB, LB attributes, listeners, target groups, 2x target health, and the tags of the LB and its groups (a full
    # pass makes sure they carry our UID tag, which a delete by the checkpoint's ARNs needs under IAM).
    assert sum(calls.values()) == 7


def test_update_ports_and_nodes_in_place(world: World):
    svc = service()
    world.nlb.ensure_load_balancer(svc, world.nodes())
    svc["spec"]["ports"] = [
        {"protocol": "TCP", "port": 80, "nodePort": 30080},
        {"protocol": "UDP", "port": 53, "nodePort": 30053},
    ]
    world.nlb.ensure_load_balancer(svc, world.nodes()[:2])
    state = lb_state(world, svc["metadata"]["uid"])
    assert set(state["listeners"]) == {80, 53}
    assert state["listeners"][53]["protocol"] == "UDP"
    assert state["listeners"][80]["targets"] == sorted(world.instances[:2])
    assert len(all_target_groups(world)) == 2  # the 443 group was deleted, not leaked


def test_health_check_protocol_change_switches_only_once_the_new_group_is_healthy(world: World):
    svc = service(ports=[(80, 30080)])
    world.nlb.ensure_load_balancer(svc, world.nodes())
    old_group = all_target_groups(world)[0]["TargetGroupArn"]
    svc["spec"].update(externalTrafficPolicy="Local", healthCheckNodePort=31999)  # TCP -> HTTP health check

    with pytest.raises(RetryError) as waiting:
        world.nlb.ensure_load_balancer(svc, world.nodes())
    # The new group exists and is filled, but traffic still flows through the old, healthy one.
    assert waiting.value.delay_seconds == 20  # interval 10 s x healthy threshold 2 (the Local defaults)
    state = lb_state(world, svc["metadata"]["uid"])
    assert state["listeners"][80]["hc"] == ("TCP", "traffic-port")
    groups = {tg["TargetGroupArn"]: tg for tg in all_target_groups(world)}
    assert len(groups) == 2 and old_group in groups
    new_group = next(arn for arn in groups if arn != old_group)
    health = world.clients.elbv2.describe_target_health(TargetGroupArn=new_group)["TargetHealthDescriptions"]
    assert sorted(d["Target"]["Id"] for d in health) == sorted(world.instances)

    # The queue's retry is a thorough pass: it finds the not yet attached group.
    world.nlb.ensure_load_balancer(svc, world.nodes(), THOROUGH)
    state = lb_state(world, svc["metadata"]["uid"])
    assert state["listeners"][80]["hc"] == ("HTTP", "31999")
    assert [tg["TargetGroupArn"] for tg in all_target_groups(world)] == [new_group]


def test_replacement_does_not_wait_when_the_old_group_serves_nobody(world: World):
    svc = service(ports=[(80, 30080)])
    world.nlb.ensure_load_balancer(svc, [])  # no nodes yet: nothing healthy to protect
    svc["spec"].update(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    world.nlb.ensure_load_balancer(svc, world.nodes())
    assert lb_state(world, svc["metadata"]["uid"])["listeners"][80]["hc"] == ("HTTP", "31999")
    assert len(all_target_groups(world)) == 1


def test_delete_removes_everything_and_is_idempotent(world: World):
    svc = service()
    world.nlb.ensure_load_balancer(svc, world.nodes())
    assert world.nlb.get_load_balancer(svc)[1]
    world.nlb.ensure_load_balancer_deleted(svc)
    world.nlb.ensure_load_balancer_deleted(svc)
    assert world.nlb.get_load_balancer(svc) == (None, False)
    assert all_target_groups(world) == []


def test_crash_after_target_group_creation_is_repaired_by_a_thorough_pass(world: World):
    svc = service(ports=[(80, 30080)])
    elbv2 = world.clients.elbv2
    calls = {"n": 0}

    def crash_on_listener(**_: object) -> None:
        calls["n"] += 1
        raise RuntimeError("crash before CreateListener")

    elbv2.meta.events.register("before-call.elastic-load-balancing-v2.CreateListener", crash_on_listener)
    with pytest.raises(RuntimeError):
        world.nlb.ensure_load_balancer(svc, world.nodes())
    elbv2.meta.events.unregister("before-call.elastic-load-balancing-v2.CreateListener", crash_on_listener)
    assert len(all_target_groups(world)) == 1  # orphaned: not attached to any listener

    # The service is then deleted before any retry succeeded: the orphan must not leak.
    # A delete always looks for tagged groups (delete_for_uid): no pass flag needed.
    world.nlb.ensure_load_balancer_deleted(svc)
    assert all_target_groups(world) == []


def test_crash_after_listener_delete_leaves_no_orphan_after_retry(world: World):
    svc = service()
    world.nlb.ensure_load_balancer(svc, world.nodes())
    svc["spec"]["ports"] = svc["spec"]["ports"][:1]
    elbv2 = world.clients.elbv2

    def crash(**_: object) -> None:
        raise RuntimeError("crash before DeleteTargetGroup")

    elbv2.meta.events.register("before-call.elastic-load-balancing-v2.DeleteTargetGroup", crash)
    with pytest.raises(RuntimeError):
        world.nlb.ensure_load_balancer(svc, world.nodes())
    elbv2.meta.events.unregister("before-call.elastic-load-balancing-v2.DeleteTargetGroup", crash)
    assert len(all_target_groups(world)) == 2
    world.nlb.ensure_load_balancer(svc, world.nodes(), THOROUGH)  # what a retry does
    assert len(all_target_groups(world)) == 1


def test_a_target_group_still_in_use_is_waited_on_then_deleted(world: World):
    # DeleteTargetGroup answers ResourceInUse while a listener still forwards to the group (ELBv2 API reference,
    # DeleteTargetGroup errors); on AWS the listeners of a deleted load balancer go with it a little later. Here
    # another load balancer's listener holds the group. A wait (RetryError), not a failure; the retry deletes it.
    svc = service(ports=[(80, 30080)])
    world.nlb.ensure_load_balancer(svc, world.nodes())
    (tg,) = all_target_groups(world)
    elbv2 = world.clients.session.client("elbv2")
    in_vpc = [{"Name": "vpc-id", "Values": [world.vpc_id]}]
    subnets = [s["SubnetId"] for s in world.clients.session.client("ec2").describe_subnets(Filters=in_vpc)["Subnets"]]
    holder = elbv2.create_load_balancer(Name="holder", Type="network", Subnets=subnets)["LoadBalancers"][0]
    forward = [{"Type": "forward", "TargetGroupArn": tg["TargetGroupArn"]}]
    listener = elbv2.create_listener(
        LoadBalancerArn=holder["LoadBalancerArn"], Port=80, Protocol="TCP", DefaultActions=forward
    )["Listeners"][0]
    with pytest.raises(RetryError) as err:
        world.nlb.ensure_load_balancer_deleted(svc)
    retry = retry_for(err.value, attempt=1)
    assert retry.is_wait and retry.waiting_on == f"target group {tg['TargetGroupArn']} still in use"
    assert world.nlb.get_load_balancer(svc) == (None, False)  # the load balancer itself is gone
    elbv2.delete_listener(ListenerArn=listener["ListenerArn"])
    world.nlb.ensure_load_balancer_deleted(svc)  # the retry finds the group by its UID tag
    assert all_target_groups(world) == []


def test_foreign_service_is_implemented_elsewhere(world: World):
    svc = service(annotations={"service.beta.kubernetes.io/aws-load-balancer-type": "external"})
    with pytest.raises(ImplementedElsewhere):
        world.nlb.ensure_load_balancer(svc, world.nodes())
    with pytest.raises(ClientError):
        world.clients.elbv2.describe_load_balancers(Names=[("a" + svc["metadata"]["uid"].replace("-", ""))[:32]])


def test_adopts_an_nlb_made_by_cloud_provider_aws_and_moves_traffic_without_a_gap(world: World):
    """Migration: cloud-provider-aws made `a<uid>[:32]` with its own target group; we keep the LB (same DNS name),
    fill our group, switch once it is healthy, then delete theirs."""
    svc = service(ports=[(80, 30080)])
    elbv2 = world.clients.session.client("elbv2")
    ec2 = world.clients.session.client("ec2")
    vpc_filter = [{"Name": "vpc-id", "Values": [world.vpc_id]}]
    subnets = [s["SubnetId"] for s in ec2.describe_subnets(Filters=vpc_filter)["Subnets"]]
    upstream_tags = [
        {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"},
        {"Key": "kubernetes.io/service-name", "Value": "default/web"},
    ]
    name = ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]
    lb = elbv2.create_load_balancer(
        Name=name, Type="network", Scheme="internet-facing", Subnets=subnets, Tags=upstream_tags
    )["LoadBalancers"][0]
    theirs = elbv2.create_target_group(
        Name="k8s-default-web-0123456789", Protocol="TCP", Port=30080, VpcId=world.vpc_id, Tags=upstream_tags
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(TargetGroupArn=theirs, Targets=[{"Id": i, "Port": 30080} for i in world.instances])
    elbv2.create_listener(
        LoadBalancerArn=lb["LoadBalancerArn"],
        Port=80,
        Protocol="TCP",
        DefaultActions=[{"Type": "forward", "TargetGroupArn": theirs}],
    )

    with pytest.raises(RetryError):  # ours is created and filled; theirs keeps serving
        world.nlb.ensure_load_balancer(svc, world.nodes())
    listener = elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"][0]
    assert listener["DefaultActions"][0]["TargetGroupArn"] == theirs

    # IAM changes only UID-tagged resources: the LB and their target group got our UID tag before the first write;
    # their listener carries no tag at all (upstream tags none), so it is refused until the operator tags it.
    with pytest.raises(CloudStateError, match="aws elbv2 add-tags --resource-arns"):
        world.nlb.ensure_load_balancer(svc, world.nodes(), THOROUGH)
    uid_tag = {"Key": "serverless-ccm/service-uid", "Value": svc["metadata"]["uid"]}
    for arn in (lb["LoadBalancerArn"], theirs):
        assert uid_tag in elbv2.describe_tags(ResourceArns=[arn])["TagDescriptions"][0]["Tags"], arn
    refused = elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"][0]
    assert refused["DefaultActions"][0]["TargetGroupArn"] == theirs  # nothing switched
    elbv2.add_tags(ResourceArns=[listener["ListenerArn"]], Tags=upstream_tags[:1])  # docs/migration.md
    status = world.nlb.ensure_load_balancer(svc, world.nodes(), THOROUGH)
    assert uid_tag in elbv2.describe_tags(ResourceArns=[listener["ListenerArn"]])["TagDescriptions"][0]["Tags"]
    assert status.ingress[0].hostname == lb["DNSName"]  # same LB: clients keep resolving the same name
    assert [x["LoadBalancerArn"] for x in elbv2.describe_load_balancers()["LoadBalancers"]] == [lb["LoadBalancerArn"]]
    state = lb_state(world, svc["metadata"]["uid"])
    assert state["listeners"][80]["targets"] == sorted(world.instances)
    assert theirs not in {tg["TargetGroupArn"] for tg in all_target_groups(world)}
    assert len(all_target_groups(world)) == 1


def test_an_instance_aws_refuses_is_dropped_and_reported_not_fatal(world: World):
    # AWS refuses the whole RegisterTargets call (InvalidTarget) when one instance is not running or gone.
    svc = service()
    gone, unknown = world.instances[0], "i-0123456789abcdef0"
    world.clients.session.client("ec2").terminate_instances(InstanceIds=[gone])
    nodes = [*world.nodes(), node("ghost", unknown)]
    world.clients.counter.reset_thread()
    status = world.nlb.ensure_load_balancer(svc, nodes)
    calls = world.clients.counter.thread_calls()
    state = lb_state(world, svc["metadata"]["uid"])
    assert {p: ls["targets"] for p, ls in state["listeners"].items()} == {
        80: sorted(world.instances[1:]),
        443: sorted(world.instances[1:]),
    }
    (warning,) = status.warnings
    assert warning.reason == "TargetsRefused"
    assert gone in warning.message and unknown in warning.message
    assert calls["ec2:DescribeInstances"] == 2  # asked only because AWS refused (once per target group)
    world.clients.counter.reset_thread()
    world.nlb.update_load_balancer(svc, nodes[1:3])  # a host update: refused nodes gone, nothing to do
    assert CallCounter.mutating(world.clients.counter.thread_calls()) == 0


def test_a_terminated_instance_alone_is_refused_and_dropped(world: World):
    # No unknown instance beside it: AWS refuses the terminated one by itself ("must be in the running state").
    svc = service()
    gone = world.instances[0]
    world.clients.session.client("ec2").terminate_instances(InstanceIds=[gone])
    status = world.nlb.ensure_load_balancer(svc, world.nodes())
    state = lb_state(world, svc["metadata"]["uid"])
    assert {p: ls["targets"] for p, ls in state["listeners"].items()} == {
        80: sorted(world.instances[1:]),
        443: sorted(world.instances[1:]),
    }
    (warning,) = status.warnings
    assert warning.reason == "TargetsRefused" and gone in warning.message


def test_an_nlb_of_our_name_not_tagged_for_us_is_left_in_place_and_reported(
    world: World, caplog: pytest.LogCaptureFixture
):
    """The drivers' one rule (`Cluster.claim`): the name alone proves nothing."""
    svc, by_hand = service(ports=[(80, 30080)]), service(name="other", ports=[(80, 30080)])
    elbv2 = world.clients.session.client("elbv2")
    ec2 = world.clients.session.client("ec2")
    vpc_filter = [{"Name": "vpc-id", "Values": [world.vpc_id]}]
    subnets = [s["SubnetId"] for s in ec2.describe_subnets(Filters=vpc_filter)["Subnets"]]
    arns = []
    another_cluster, hand_made = {"kubernetes.io/cluster/another-cluster": "owned"}, {"team": "web"}
    for made, tag in ((svc, another_cluster), (by_hand, hand_made)):
        tags = [{"Key": k, "Value": v} for k, v in tag.items()]
        name = ("a" + made["metadata"]["uid"].replace("-", ""))[:32]
        lb = elbv2.create_load_balancer(Name=name, Type="network", Subnets=subnets, Tags=tags)["LoadBalancers"][0]
        group = elbv2.create_target_group(Name=f"{name[:20]}-tg", Protocol="TCP", Port=30080, VpcId=world.vpc_id)
        tg = group["TargetGroups"][0]["TargetGroupArn"]
        action = [{"Type": "forward", "TargetGroupArn": tg}]
        elbv2.create_listener(LoadBalancerArn=lb["LoadBalancerArn"], Port=80, Protocol="TCP", DefaultActions=action)
        arns += [lb["LoadBalancerArn"], tg]

    world.clients.counter.reset_thread()
    with caplog.at_level("WARNING", logger="ccm.aws"):  # the driver and its parts (nlb_adoption, ...)
        world.nlb.ensure_load_balancer_deleted(svc)  # another cluster's
        assert world.nlb.deployers["nlb"].delete_for_uid(by_hand["metadata"]["uid"]) is False  # no cluster tag
    assert CallCounter.mutating(world.clients.counter.thread_calls()) == 0
    assert sorted(lb["LoadBalancerArn"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]) == sorted(
        arns[0::2]
    )
    assert sorted(tg["TargetGroupArn"] for tg in all_target_groups(world)) == sorted(arns[1::2])
    assert [r.getMessage().endswith("not tagged for this cluster, left in place") for r in caplog.records] == [
        True,
        True,
    ]
