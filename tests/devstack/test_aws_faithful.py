"""The devstack's moto answers as AWS does (devstack.aws_faithful), over HTTP with the real protocols.

Each test fails against plain moto 5.2. What AWS documents, per behaviour:
- DeleteSecurityGroup: "DependencyViolation" while the group is in use (EC2 API reference, DeleteSecurityGroup,
  and "Error codes for the Amazon EC2 API"); a load balancer's network interfaces are released minutes after it is
  deleted.
- TargetGroup.LoadBalancerArns: the load balancers that route traffic to the group (ELBv2 API reference).
- RegisterTargets: InvalidTarget; RegisterInstancesWithLoadBalancer: InvalidInstance (the API references' errors).
- Listener.InstanceProtocol (ELB API reference): kept as created.
- Quotas: Amazon VPC quotas (60 inbound rules per group, 5 groups per network interface), NLB quotas (50
  listeners per load balancer), Classic ELB quotas (100 listeners per load balancer).
- Throttling: "Request throttling for the ELB API" (Describe* 40 / 10 per s) and "Request throttling for the
  Amazon EC2 API" (per action: non-mutating 100 / 20 per s, unfiltered DescribeInstances & co 50 / 10, mutating
  50 / 5, CreateTags 100 / 10).
- EC2 eventual consistency ("Eventual consistency in the Amazon EC2 API").
"""

from __future__ import annotations

import time
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
    return seed_world(endpoint, REGION, "faithful", nodes=2)


@pytest.fixture
def faithful() -> Iterator[FaithfulSettings]:
    """Fresh settings (hold 1 s, consistency off unless a test turns it on); the defaults again afterwards."""
    yield aws_faithful.install(FaithfulSettings(sg_release_seconds=1.0, eventual_consistency=False))
    aws_faithful.install(FaithfulSettings(sg_release_seconds=0))


def _code(err: pytest.ExceptionInfo[ClientError]) -> str:
    return str(err.value.response["Error"]["Code"])


def _group(world: World, name: str) -> str:
    ec2 = client("ec2", world.endpoint_url, REGION)
    return str(ec2.create_security_group(GroupName=name, Description=name, VpcId=world.vpc_id)["GroupId"])


def _nlb(world: World, name: str, groups: list[str]) -> str:
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    return str(
        elbv2.create_load_balancer(
            Name=name, Type="network", Subnets=list(world.public_subnets.values()), SecurityGroups=groups
        )["LoadBalancers"][0]["LoadBalancerArn"]
    )


def _until(predicate: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def _deletes(ec2: Any, group_id: str) -> bool:
    try:
        ec2.delete_security_group(GroupId=group_id)
        return True
    except ClientError as err:
        assert err.response["Error"]["Code"] == "DependencyViolation"
        return False


def test_a_group_is_in_use_while_its_nlb_exists_and_for_the_hold_after(world: World, faithful: Any) -> None:
    ec2, elbv2 = client("ec2", world.endpoint_url, REGION), client("elbv2", world.endpoint_url, REGION)
    group = _group(world, "held-by-nlb")
    arn = _nlb(world, "held", [group])
    with pytest.raises(ClientError) as err:
        ec2.delete_security_group(GroupId=group)
    assert _code(err) == "DependencyViolation"
    elbv2.delete_load_balancer(LoadBalancerArn=arn)
    deleted_at = time.monotonic()
    assert not _deletes(ec2, group)  # the NLB's network interfaces still hold it
    _until(lambda: _deletes(ec2, group))
    assert time.monotonic() - deleted_at >= 1.0


def test_a_group_is_in_use_while_a_classic_elb_lists_it_or_a_rule_references_it(world: World, faithful: Any) -> None:
    ec2, elb = client("ec2", world.endpoint_url, REGION), client("elb", world.endpoint_url, REGION)
    faithful.sg_release_seconds = 0
    group, referrer = _group(world, "held-by-clb"), _group(world, "referrer")
    listener = {"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080}
    elb.create_load_balancer(
        LoadBalancerName="held-clb", Listeners=[listener], Subnets=[world.public_subnets[world.azs[0]]],
        SecurityGroups=[group],
    )  # fmt: skip
    assert not _deletes(ec2, group)
    elb.delete_load_balancer(LoadBalancerName="held-clb")
    ec2.authorize_security_group_ingress(
        GroupId=referrer, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}]
    )
    assert not _deletes(ec2, group)  # another group's rule references it
    ec2.revoke_security_group_ingress(
        GroupId=referrer, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}]
    )
    assert _deletes(ec2, group)


def test_modify_listener_moves_the_target_group_association(world: World, faithful: Any) -> None:
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    lb = _nlb(world, "moves", [])
    old, new = (
        elbv2.create_target_group(Name=n, Protocol="TCP", Port=30080, VpcId=world.vpc_id)["TargetGroups"][0][
            "TargetGroupArn"
        ]
        for n in ("tg-old", "tg-new")
    )
    listener = elbv2.create_listener(
        LoadBalancerArn=lb, Port=80, Protocol="TCP", DefaultActions=[{"Type": "forward", "TargetGroupArn": old}]
    )["Listeners"][0]["ListenerArn"]
    elbv2.modify_listener(ListenerArn=listener, DefaultActions=[{"Type": "forward", "TargetGroupArn": new}])
    of_lb = elbv2.describe_target_groups(LoadBalancerArn=lb)["TargetGroups"]
    assert [tg["TargetGroupArn"] for tg in of_lb] == [new]
    assert of_lb[0]["LoadBalancerArns"] == [lb]
    assert elbv2.describe_target_groups(TargetGroupArns=[old])["TargetGroups"][0]["LoadBalancerArns"] == []
    elbv2.delete_target_group(TargetGroupArn=old)  # no longer in use


def test_unknown_stopped_and_terminated_instances_are_refused_as_targets(world: World, faithful: Any) -> None:
    elbv2, elb = client("elbv2", world.endpoint_url, REGION), client("elb", world.endpoint_url, REGION)
    ec2 = client("ec2", world.endpoint_url, REGION)
    tg = elbv2.create_target_group(Name="refuses", Protocol="TCP", Port=30080, VpcId=world.vpc_id)["TargetGroups"][0]
    with pytest.raises(ClientError) as err:
        elbv2.register_targets(TargetGroupArn=tg["TargetGroupArn"], Targets=[{"Id": "i-0123456789abcdef0"}])
    assert _code(err) == "InvalidTarget"
    doomed = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    ec2.terminate_instances(InstanceIds=[doomed])
    stopped = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    ec2.stop_instances(InstanceIds=[stopped])
    good = world.instances[0].instance_id
    for bad in (doomed, stopped):  # "it must be in the running state when you register it"
        with pytest.raises(ClientError) as err:
            elbv2.register_targets(TargetGroupArn=tg["TargetGroupArn"], Targets=[{"Id": good}, {"Id": bad}])
        assert _code(err) == "InvalidTarget"
        assert bad in err.value.response["Error"]["Message"]
    assert elbv2.describe_target_health(TargetGroupArn=tg["TargetGroupArn"])["TargetHealthDescriptions"] == []
    listener = {"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080}
    elb.create_load_balancer(
        LoadBalancerName="refuses", Listeners=[listener], Subnets=[world.public_subnets[world.azs[0]]]
    )
    for bad in (doomed, stopped, "i-0123456789abcdef0"):
        with pytest.raises(ClientError) as err:
            elb.register_instances_with_load_balancer(LoadBalancerName="refuses", Instances=[{"InstanceId": bad}])
        assert _code(err) == "InvalidInstance"
    for _ in range(2):  # registering twice keeps one registration
        elb.register_instances_with_load_balancer(LoadBalancerName="refuses", Instances=[{"InstanceId": good}])
    described = elb.describe_load_balancers(LoadBalancerNames=["refuses"])["LoadBalancerDescriptions"][0]
    assert described["Instances"] == [{"InstanceId": good}]


def test_classic_listeners_keep_their_instance_protocol(world: World, faithful: Any) -> None:
    elb = client("elb", world.endpoint_url, REGION)
    subnet = world.public_subnets[world.azs[0]]
    first = {"Protocol": "TCP", "LoadBalancerPort": 443, "InstanceProtocol": "SSL", "InstancePort": 30443}
    later = {"Protocol": "TCP", "LoadBalancerPort": 8443, "InstanceProtocol": "SSL", "InstancePort": 30843}
    elb.create_load_balancer(LoadBalancerName="protocols", Listeners=[first], Subnets=[subnet])
    elb.create_load_balancer_listeners(LoadBalancerName="protocols", Listeners=[later])
    described = elb.describe_load_balancers(LoadBalancerNames=["protocols"])["LoadBalancerDescriptions"][0]
    listeners = {d["Listener"]["LoadBalancerPort"]: d["Listener"] for d in described["ListenerDescriptions"]}
    assert {port: ls["InstanceProtocol"] for port, ls in listeners.items()} == {443: "SSL", 8443: "SSL"}
    assert {ls["Protocol"] for ls in listeners.values()} == {"TCP"}


def test_quotas(world: World, faithful: Any) -> None:
    ec2, elbv2 = client("ec2", world.endpoint_url, REGION), client("elbv2", world.endpoint_url, REGION)
    groups = [_group(world, f"quota-{i}") for i in range(6)]
    with pytest.raises(ClientError) as err:
        _nlb(world, "six-groups", groups)
    assert _code(err) == "InvalidConfigurationRequest"
    lb = _nlb(world, "five-groups", groups[:5])
    with pytest.raises(ClientError) as err:
        elbv2.set_security_groups(LoadBalancerArn=lb, SecurityGroups=groups)
    assert _code(err) == "InvalidConfigurationRequest"
    tg = elbv2.create_target_group(Name="quota", Protocol="TCP", Port=30080, VpcId=world.vpc_id)["TargetGroups"][0]
    forward = [{"Type": "forward", "TargetGroupArn": tg["TargetGroupArn"]}]
    for port in range(1000, 1050):
        elbv2.create_listener(LoadBalancerArn=lb, Port=port, Protocol="TCP", DefaultActions=forward)
    with pytest.raises(ClientError) as err:
        elbv2.create_listener(LoadBalancerArn=lb, Port=1050, Protocol="TCP", DefaultActions=forward)
    assert _code(err) == "TooManyListeners"
    ranges = [{"CidrIp": f"10.9.{i}.0/24"} for i in range(31)]
    permissions = [{"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": ranges} for p in (80, 443)]
    with pytest.raises(ClientError) as err:
        ec2.authorize_security_group_ingress(GroupId=groups[0], IpPermissions=permissions)  # 62 rules
    assert _code(err) == "RulesPerSecurityGroupLimitExceeded"
    # All or nothing: the first permission's 31 rules were not kept.
    assert ec2.describe_security_groups(GroupIds=[groups[0]])["SecurityGroups"][0]["IpPermissions"] == []


def test_classic_quotas(world: World, faithful: Any) -> None:
    """Classic ELB: 5 security groups (the VPC quota per network interface) and 100 listeners (ELB quotas)."""
    elb = client("elb", world.endpoint_url, REGION)
    groups = [_group(world, f"clb-quota-{i}") for i in range(6)]
    subnet = world.public_subnets[world.azs[0]]

    def listener(port: int) -> dict[str, Any]:
        return {"Protocol": "TCP", "LoadBalancerPort": port, "InstanceProtocol": "TCP", "InstancePort": 30000 + port}

    with pytest.raises(ClientError) as err:
        elb.create_load_balancer(
            LoadBalancerName="clb-six", Listeners=[listener(1)], Subnets=[subnet], SecurityGroups=groups
        )
    assert _code(err) == "InvalidConfigurationRequest"
    elb.create_load_balancer(
        LoadBalancerName="clb-quota", Listeners=[listener(1)], Subnets=[subnet], SecurityGroups=groups[:5]
    )
    with pytest.raises(ClientError) as err:
        elb.apply_security_groups_to_load_balancer(LoadBalancerName="clb-quota", SecurityGroups=groups)
    assert _code(err) == "InvalidConfigurationRequest"
    elb.create_load_balancer_listeners(
        LoadBalancerName="clb-quota", Listeners=[listener(port) for port in range(2, 101)]
    )  # 100 in all
    with pytest.raises(ClientError) as err:
        elb.create_load_balancer_listeners(LoadBalancerName="clb-quota", Listeners=[listener(101)])
    assert _code(err) == "InvalidConfigurationRequest"  # the ELB API documents no TooManyListeners
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    with pytest.raises(ClientError) as err:
        elb.create_load_balancer(
            LoadBalancerName="clb-101", Listeners=[listener(port) for port in range(1, 102)], Subnets=[subnet]
        )
    assert _code(err) == "InvalidConfigurationRequest"
    described = elb.describe_load_balancers(LoadBalancerNames=["clb-quota"])["LoadBalancerDescriptions"][0]
    assert len(described["ListenerDescriptions"]) == 100
    assert sorted(described["SecurityGroups"]) == sorted(groups[:5])


def test_per_region_load_balancer_and_target_group_quotas(world: World, faithful: Any) -> None:
    """Service Quotas (Elastic Load Balancing): NLBs 50, Classic 20, target groups 3000 per Region, adjustable in a
    real account, so settable here; a create past them answers TooManyLoadBalancers / TooManyTargetGroups."""
    assert (faithful.max_nlbs_per_region, faithful.max_clbs_per_region) == (50, 20)
    assert faithful.max_target_groups_per_region == 3000
    elb, elbv2 = client("elb", world.endpoint_url, REGION), client("elbv2", world.endpoint_url, REGION)
    nlbs = [lb for lb in elbv2.describe_load_balancers()["LoadBalancers"] if lb["Type"] == "network"]
    faithful.max_nlbs_per_region = len(nlbs) + 1
    _nlb(world, "region-quota-1", [])
    with pytest.raises(ClientError) as err:
        _nlb(world, "region-quota-2", [])
    assert _code(err) == "TooManyLoadBalancers"
    faithful.max_nlbs_per_region = len(nlbs) + 2  # a raised quota
    _nlb(world, "region-quota-2", [])

    subnet = world.public_subnets[world.azs[0]]
    listener = [{"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080}]
    faithful.max_clbs_per_region = len(elb.describe_load_balancers()["LoadBalancerDescriptions"]) + 1
    elb.create_load_balancer(LoadBalancerName="clb-region-1", Listeners=listener, Subnets=[subnet])
    with pytest.raises(ClientError) as err:
        elb.create_load_balancer(LoadBalancerName="clb-region-2", Listeners=listener, Subnets=[subnet])
    assert _code(err) == "TooManyLoadBalancers"

    faithful.max_target_groups_per_region = len(elbv2.describe_target_groups()["TargetGroups"]) + 1
    elbv2.create_target_group(Name="tg-region-1", Protocol="TCP", Port=30080, VpcId=world.vpc_id)
    with pytest.raises(ClientError) as err:
        elbv2.create_target_group(Name="tg-region-2", Protocol="TCP", Port=30080, VpcId=world.vpc_id)
    assert _code(err) == "TooManyTargetGroups"
    faithful.quotas = False  # the switch covers them too
    elbv2.create_target_group(Name="tg-region-2", Protocol="TCP", Port=30080, VpcId=world.vpc_id)


def test_token_buckets_refill_at_the_documented_rates() -> None:
    aws_faithful.install(FaithfulSettings(rate_limits=True))
    try:
        now = 1000.0
        assert all(aws_faithful.take_token("r", "elbv2", "DescribeListeners", now) for _ in range(40))
        assert not aws_faithful.take_token("r", "elbv2", "DescribeTargetHealth", now)  # one Describe* bucket
        assert aws_faithful.take_token("r", "elbv2", "RegisterTargets", now)  # its own bucket
        assert aws_faithful.take_token("r", "elb", "DescribeLoadBalancers", now)  # API version 1: its own
        assert sum(aws_faithful.take_token("r", "elbv2", "DescribeListeners", now + 1) for _ in range(20)) == 10
        assert sum(aws_faithful.take_token("r", "elbv2", "DeregisterTargets", now) for _ in range(30)) == 19
        assert sum(aws_faithful.take_token("r", "ec2", "DescribeSecurityGroups", now) for _ in range(150)) == 100
        assert aws_faithful.take_token("r", "ec2", "DescribeInstances", now)  # EC2 buckets are per action
        assert sum(aws_faithful.take_token("r", "ec2", "DescribeSecurityGroups", now + 0.5) for _ in range(20)) == 10
        # Unfiltered and unpaginated DescribeInstances & co: their own smaller bucket, 50 / 10 per s.
        assert (
            sum(aws_faithful.take_token("r", "ec2", "DescribeInstances", now, unfiltered=True) for _ in range(60)) == 50
        )
        assert sum(aws_faithful.take_token("r", "ec2", "DescribeVpcs", now, unfiltered=True) for _ in range(120)) == 100
        # Mutating 50 / 5 per action; CreateTags is uncategorized: 100 / 10.
        assert sum(aws_faithful.take_token("r", "ec2", "CreateSecurityGroup", now) for _ in range(60)) == 50
        assert sum(aws_faithful.take_token("r", "ec2", "CreateSecurityGroup", now + 1) for _ in range(10)) == 5
        assert sum(aws_faithful.take_token("r", "ec2", "CreateTags", now) for _ in range(120)) == 100
    finally:
        aws_faithful.install(FaithfulSettings(sg_release_seconds=0))


def test_throttled_requests_answer_as_aws(world: World) -> None:
    aws_faithful.install(FaithfulSettings(rate_limits=True, refill_scale=0))  # drained buckets stay empty
    try:
        elbv2 = client("elbv2", world.endpoint_url, REGION, config=NO_RETRIES)
        ec2 = client("ec2", world.endpoint_url, REGION, config=NO_RETRIES)
        while aws_faithful.take_token(REGION, "elbv2", "DescribeLoadBalancers"):
            pass
        with pytest.raises(ClientError) as err:
            elbv2.describe_load_balancers()
        assert _code(err) == "Throttling"
        while aws_faithful.take_token(REGION, "ec2", "DescribeVpcs"):
            pass
        with pytest.raises(ClientError) as err:
            ec2.describe_vpcs()
        assert _code(err) == "RequestLimitExceeded"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        # An unfiltered DescribeSecurityGroups draws from the smaller bucket; a filtered one from the larger.
        while aws_faithful.take_token(REGION, "ec2", "DescribeSecurityGroups", unfiltered=True):
            pass
        with pytest.raises(ClientError) as err:
            ec2.describe_security_groups()
        assert _code(err) == "RequestLimitExceeded"
        ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])
        assert aws_faithful.throttled["ec2:DescribeVpcs"] >= 1
    finally:
        aws_faithful.install(FaithfulSettings(sg_release_seconds=0))


def test_a_new_group_and_rule_are_not_visible_at_once(world: World, faithful: Any) -> None:
    faithful.eventual_consistency, faithful.consistency_seconds = True, 1.0
    ec2 = client("ec2", world.endpoint_url, REGION)
    by_name = [{"Name": "group-name", "Values": ["eventual"]}, {"Name": "vpc-id", "Values": [world.vpc_id]}]
    group = _group(world, "eventual")
    assert ec2.describe_security_groups(Filters=by_name)["SecurityGroups"] == []
    with pytest.raises(ClientError) as err:
        ec2.describe_security_groups(GroupIds=[group])
    assert _code(err) == "InvalidGroup.NotFound"
    _until(lambda: ec2.describe_security_groups(Filters=by_name)["SecurityGroups"] != [])
    rule = {"IpProtocol": "tcp", "FromPort": 80, "ToPort": 80, "IpRanges": [{"CidrIp": "10.1.0.0/16"}]}
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[rule])
    assert ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["IpPermissions"] == []
    _until(lambda: ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["IpPermissions"] != [])


def test_the_tagging_api_lists_classic_and_network_load_balancers_under_one_type(world: World, faithful: Any) -> None:
    """AWS lists both under `elasticloadbalancing:loadbalancer`, a Classic ELB as ...:loadbalancer/<name>."""
    elb = client("elb", world.endpoint_url, REGION)
    tagging = client("resourcegroupstaggingapi", world.endpoint_url, REGION)
    tag = [{"Key": "kubernetes.io/cluster/tagging", "Value": "owned"}]
    listener = {"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080}
    elb.create_load_balancer(
        LoadBalancerName="tagged-classic", Listeners=[listener], Subnets=[world.public_subnets[world.azs[0]]], Tags=tag
    )
    nlb = client("elbv2", world.endpoint_url, REGION).create_load_balancer(
        Name="tagged-network", Type="network", Subnets=list(world.public_subnets.values()), Tags=tag
    )["LoadBalancers"][0]["LoadBalancerArn"]
    found = tagging.get_resources(
        TagFilters=[{"Key": "kubernetes.io/cluster/tagging", "Values": ["owned"]}],
        ResourceTypeFilters=["elasticloadbalancing:loadbalancer"],
    )["ResourceTagMappingList"]
    account = client("sts", world.endpoint_url, REGION).get_caller_identity()["Account"]
    classic = f"arn:aws:elasticloadbalancing:{REGION}:{account}:loadbalancer/tagged-classic"
    assert {item["ResourceARN"] for item in found} == {classic, nlb}


def test_elbv2_creates_are_idempotent_for_the_same_settings_and_refused_for_others(world: World, faithful: Any) -> None:
    """API reference (CreateLoadBalancer, CreateTargetGroup, CreateListener): "If you attempt to create multiple ...
    with the same settings, each call succeeds"; the name (a listener's port) taken with other settings is a
    Duplicate* error. Never a second resource of one name, or a second listener on one port."""
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    subnets = list(world.public_subnets.values())
    lb = {"Name": "idempotent", "Type": "network", "Subnets": subnets}
    first = elbv2.create_load_balancer(**lb)["LoadBalancers"][0]
    again = elbv2.create_load_balancer(**lb)["LoadBalancers"][0]
    assert again["LoadBalancerArn"] == first["LoadBalancerArn"]
    with pytest.raises(ClientError) as err:
        elbv2.create_load_balancer(**lb, Scheme="internal")
    assert _code(err) == "DuplicateLoadBalancerName"
    assert len(elbv2.describe_load_balancers(Names=["idempotent"])["LoadBalancers"]) == 1

    tg = {"Name": "idempotent-tg", "Protocol": "TCP", "Port": 30080, "VpcId": world.vpc_id, "TargetType": "instance"}
    group = elbv2.create_target_group(**tg)["TargetGroups"][0]["TargetGroupArn"]
    assert elbv2.create_target_group(**tg)["TargetGroups"][0]["TargetGroupArn"] == group
    with pytest.raises(ClientError) as err:
        elbv2.create_target_group(**{**tg, "Port": 30081})
    assert _code(err) == "DuplicateTargetGroupName"

    forward = [{"Type": "forward", "TargetGroupArn": group}]
    listener = {"LoadBalancerArn": first["LoadBalancerArn"], "Protocol": "TCP", "Port": 80, "DefaultActions": forward}
    made = elbv2.create_listener(**listener)["Listeners"][0]["ListenerArn"]
    assert elbv2.create_listener(**listener)["Listeners"][0]["ListenerArn"] == made
    with pytest.raises(ClientError) as err:
        elbv2.create_listener(**{**listener, "Protocol": "UDP"})
    assert _code(err) == "DuplicateListener"
    assert len(elbv2.describe_listeners(LoadBalancerArn=first["LoadBalancerArn"])["Listeners"]) == 1


def _ip_group(world: World, name: str, **kwargs: Any) -> str:
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    return str(
        elbv2.create_target_group(Name=name, Protocol="TCP", Port=8080, VpcId=world.vpc_id, TargetType="ip", **kwargs)[
            "TargetGroups"
        ][0]["TargetGroupArn"]
    )


def test_ip_targets_must_be_in_a_subnet_of_the_vpc_or_a_private_range_with_zone_all(
    world: World, faithful: Any
) -> None:
    elbv2 = client("elbv2", world.endpoint_url, REGION, config=NO_RETRIES)
    tg = _ip_group(world, "ip-ranges")
    in_subnet = "10.0.128.5"  # a private subnet of the world's VPC (10.0.128.0/24, first zone)

    def refused(targets: list[dict[str, Any]]) -> tuple[str, str]:
        with pytest.raises(ClientError) as err:
            elbv2.register_targets(TargetGroupArn=tg, Targets=targets)
        return _code(err), str(err.value.response["Error"]["Message"])

    code, message = refused([{"Id": in_subnet, "AvailabilityZone": "all"}])
    assert code == "ValidationError"
    assert message == (
        f"The IP address '{in_subnet}' is within the VPC, and cannot have its Availability Zone overridden to 'all' "
        f"from '{world.azs[0]}'"
    )
    # In the VPC's CIDR block but in none of its subnets: outside the VPC for AWS.
    assert refused([{"Id": "10.0.200.5"}]) == (
        "ValidationError",
        "The Availability Zone is required for IP address '10.0.200.5' because it is not in the VPC",
    )
    assert refused([{"Id": "192.168.1.10", "AvailabilityZone": world.azs[0]}])[0] == "ValidationError"
    assert refused([{"Id": "52.1.2.3", "AvailabilityZone": "all"}])[0] == "InvalidTarget"  # publicly routable
    assert refused([{"Id": "i-0123456789abcdef0"}])[0] == "ValidationError"
    # One bad target refuses the call: nothing of it is registered.
    assert refused([{"Id": in_subnet}, {"Id": "52.1.2.3", "AvailabilityZone": "all"}])[0] == "InvalidTarget"
    assert elbv2.describe_target_health(TargetGroupArn=tg)["TargetHealthDescriptions"] == []
    elbv2.register_targets(
        TargetGroupArn=tg,
        Targets=[
            {"Id": in_subnet},
            {"Id": "10.0.129.7", "AvailabilityZone": world.azs[1]},
            {"Id": "100.64.3.4", "AvailabilityZone": "all"},  # RFC 6598, e.g. a peered VPC's secondary range
            {"Id": "172.20.0.9", "AvailabilityZone": "all"},
        ],
    )
    described = elbv2.describe_target_health(TargetGroupArn=tg)["TargetHealthDescriptions"]
    assert sorted(d["Target"]["Id"] for d in described) == ["10.0.128.5", "10.0.129.7", "100.64.3.4", "172.20.0.9"]


def test_ip_target_health_follows_the_health_check_timing_and_the_deregistration_delay(
    world: World, faithful: Any
) -> None:
    aws_faithful.install(FaithfulSettings(sg_release_seconds=1.0, eventual_consistency=False, target_time_scale=0.02))
    elbv2 = client("elbv2", world.endpoint_url, REGION)
    # 10 s x 3 checks = 30 s to healthy, 20 s of draining: 0.6 s and 0.4 s at this scale.
    tg = _ip_group(world, "ip-timing", HealthCheckIntervalSeconds=10, HealthyThresholdCount=3)
    elbv2.modify_target_group_attributes(
        TargetGroupArn=tg, Attributes=[{"Key": "deregistration_delay.timeout_seconds", "Value": "20"}]
    )
    target = {"Id": "10.0.128.20", "Port": 8080}

    def health(targets: list[dict[str, Any]] | None = None) -> list[tuple[str, str, str | None]]:
        described = elbv2.describe_target_health(TargetGroupArn=tg, **({"Targets": targets} if targets else {}))
        return [
            (d["Target"]["Id"], d["TargetHealth"]["State"], d["TargetHealth"].get("Reason"))
            for d in described["TargetHealthDescriptions"]
        ]

    elbv2.register_targets(TargetGroupArn=tg, Targets=[target])
    assert health() == [("10.0.128.20", "unused", "Target.NotInUse")]  # no load balancer forwards to it yet
    lb = _nlb(world, "ip-timing", [])
    elbv2.create_listener(
        LoadBalancerArn=lb, Protocol="TCP", Port=80, DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}]
    )
    registered = time.monotonic()
    second = {"Id": "10.0.128.21", "Port": 8080}
    elbv2.register_targets(TargetGroupArn=tg, Targets=[second])
    assert dict((i, (s, r)) for i, s, r in health())["10.0.128.21"] == ("initial", "Elb.RegistrationInProgress")
    time.sleep(0.25)  # past one interval (0.2 s)
    assert dict((i, (s, r)) for i, s, r in health())["10.0.128.21"] == ("initial", "Elb.InitialHealthChecking")
    _until(lambda: health([second]) == [("10.0.128.21", "healthy", None)], timeout=5)
    assert time.monotonic() - registered >= 0.6
    elbv2.deregister_targets(TargetGroupArn=tg, Targets=[second])
    drained = time.monotonic()
    assert sorted(health()) == [
        ("10.0.128.20", "healthy", None),
        ("10.0.128.21", "draining", "Target.DeregistrationInProgress"),
    ]
    _until(lambda: [i for i, _, _ in health()] == ["10.0.128.20"], timeout=5)
    assert time.monotonic() - drained >= 0.4
    assert health([second]) == [("10.0.128.21", "unused", "Target.NotRegistered")]
    elbv2.register_targets(TargetGroupArn=tg, Targets=[second])  # back again: health checks start over
    assert dict((i, s) for i, s, _ in health())["10.0.128.21"] == "initial"


def test_targets_per_target_group_quota(world: World, faithful: Any) -> None:
    aws_faithful.install(
        FaithfulSettings(sg_release_seconds=1.0, eventual_consistency=False, max_targets_per_target_group=5)
    )
    elbv2 = client("elbv2", world.endpoint_url, REGION, config=NO_RETRIES)
    tg = _ip_group(world, "ip-quota")
    elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": f"10.0.128.{30 + i}"} for i in range(5)])
    elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": "10.0.128.30"}])  # already registered: no new target
    with pytest.raises(ClientError) as err:
        elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": "10.0.128.40"}])
    assert _code(err) == "TooManyTargets"
    assert len(elbv2.describe_target_health(TargetGroupArn=tg)["TargetHealthDescriptions"]) == 5
