"""Security groups against in-process moto: the shared backend and default frontend groups (one node rule for
every LB, 0 calls warm), the per-LB frontend group of a Service with source ranges (created once with its tags,
converged in few calls), bring-your-own and extra groups (a per-LB node rule, as before), deletion
(DependencyViolation from moto made faithful by devstack.aws_faithful), a group not yet visible after its creation,
the stale-rule sweep over the previous design's per-LB rules, a shared group handed over, node-group discovery, and
no Describe call without a filter or ids."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from moto import mock_aws

from ccm.aws import frontend_model as fm
from ccm.aws import lbconfig as a
from ccm.aws import names
from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients, CallCounter
from ccm.aws.lbconfig import LoadBalancerConfig
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cloud import CloudStateError, InvalidServiceConfig, RetryError
from ccm.contracts.cluster import Cluster
from devstack.aws_faithful import FaithfulSettings
from tests.factories import service

REGION = "us-east-1"
CLUSTER = "sg-cluster"
CLUSTER_TAG = names.cluster_tag_key(CLUSTER)
P = a.PREFIX


@dataclass
class World:
    ec2: Any
    vpc_id: str
    subnet_id: str
    node_sg: str
    clients: AwsClients
    sgs: SecurityGroups
    hooks: list[tuple[str, Any]] = field(default_factory=list)

    def group(self, group_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
        return found

    def node_rules(self) -> list[m.IngressRule]:
        return m.rules_from_permissions(self.group(self.node_sg)["IpPermissions"])

    def new_group(self, name: str, tags: dict[str, str] | None = None) -> str:
        spec = [{"ResourceType": "security-group", "Tags": names.as_tag_list(tags)}] if tags else []
        gid: str = self.ec2.create_security_group(
            GroupName=name, Description=name, VpcId=self.vpc_id, TagSpecifications=spec
        )["GroupId"]
        return gid

    def calls(self) -> Any:
        return self.clients.counter.thread_calls()

    def hook(self, event: str, handler: Any) -> None:
        self.ec2.meta.events.register(event, handler)
        self.hooks.append((event, handler))

    def run_node(self, *group_ids: str) -> None:
        self.ec2.run_instances(
            ImageId="ami-12c6146b",  # a moto built-in AMI
            MinCount=1,
            MaxCount=1,
            SubnetId=self.subnet_id,
            SecurityGroupIds=list(group_ids),
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": CLUSTER_TAG, "Value": "owned"}]}],
        )


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    """One moto and one set of clients for the module (building a boto3 EC2 client costs ~0.5 s); every test gets
    its own VPC, and everything the code reads is scoped to a VPC, so tests cannot see each other."""
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        for key, value in {
            "AWS_ACCESS_KEY_ID": "t",
            "AWS_SECRET_ACCESS_KEY": "t",
            "AWS_DEFAULT_REGION": REGION,
        }.items():
            patch.setenv(key, value)
        yield AwsClients(region=REGION)


@pytest.fixture
def world(aws: AwsClients) -> Iterator[World]:
    ec2 = aws.ec2  # arranging through the counted client is fine: tests reset the counter before measuring
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-east-1a")["Subnet"]
    w = World(ec2, vpc, subnet["SubnetId"], "", aws, SecurityGroups(aws, Cluster(CLUSTER, vpc)))
    # The one cluster-tagged node group; instances only where discovery needs them (per-instance choice).
    w.node_sg = w.new_group(f"{CLUSTER}-nodes", {CLUSTER_TAG: "owned"})
    aws.counter.reset_thread()
    yield w
    for event, handler in w.hooks:
        ec2.meta.events.unregister(event, handler)


def svc_and_config(lb: str = "nlb", ann: dict[str, str] | None = None, **spec: Any) -> tuple[dict, LoadBalancerConfig]:
    svc = service(annotations={P + "type": lb, **(ann or {})}, **spec)
    return svc, a.parse_load_balancer_config(svc)


def lb_name(svc: dict) -> str:
    return names.load_balancer_name(svc["metadata"]["uid"])


RANGES = ["10.0.0.0/8"]  # any non-default source range: the LB gets its own frontend group


def shared_ids(world: World) -> tuple[str, str]:
    """(a listener group, backend) as EC2 has them, by their role tag ("" when no listener group exists)."""
    groups = world.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])
    role = {
        {t["Key"]: t["Value"] for t in g.get("Tags", [])}.get(m.ROLE_TAG): g["GroupId"]
        for g in sorted(groups["SecurityGroups"], key=lambda g: str(g["GroupId"]), reverse=True)
    }
    return role.get(m.ROLE_LISTENERS, ""), role[m.ROLE_BACKEND]


def backend_rule(world: World) -> m.IngressRule:
    return m.backend_rule(shared_ids(world)[1], CLUSTER)


def previous_version(world: World, svc: dict, cfg: LoadBalancerConfig) -> str:
    """What the previous version made for a Service: its own group `k8s-elb-<lb>` with the listener rules, and
    one node rule from it, named after the LB and tagged. Returns the group id."""
    uid = svc["metadata"]["uid"]
    gid = world.new_group(m.managed_group_name(lb_name(svc)), names.resource_tags(CLUSTER, "default", "web", uid))
    rules = m.to_permissions(m.desired_lb_rules(cfg, cfg.lb_type))
    world.ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=rules)
    world.ec2.authorize_security_group_ingress(
        GroupId=world.node_sg,
        IpPermissions=m.to_permissions([m.node_rule(gid, lb_name(svc), uid)]),
        TagSpecifications=m.node_rule_tags(CLUSTER_TAG),
    )
    return gid


def ensure(world: World, svc: dict, cfg: LoadBalancerConfig) -> list[str]:
    ids = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, dict(cfg.additional_tags))
    world.sgs.ensure_node_access(ids, lb_name(svc), svc["metadata"]["uid"])
    return ids


def test_default_ranges_use_the_listener_group_of_their_ports_and_cost_nothing_warm(world: World) -> None:
    svc, cfg = svc_and_config(ports=[(80, 30080), (443, 30443)])
    world.clients.counter.reset_thread()
    ids = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})
    # Cold: one read of the cluster's groups finds no shared group: both created; the listener group gets its rules.
    assert world.calls() == {
        "ec2:DescribeSecurityGroups": 1,
        "ec2:CreateSecurityGroup": 2,
        "ec2:AuthorizeSecurityGroupIngress": 1,
    }
    listeners, backend = shared_ids(world)
    assert ids == [listeners, backend]
    # Exactly the listeners (TCP 80 and 443) from 0.0.0.0/0, plus path-MTU ICMP: no other port, no ::/0 (IPv4 LB).
    assert set(m.rules_from_permissions(world.group(listeners)["IpPermissions"])) == {
        m.IngressRule("tcp", 80, 80, cidr="0.0.0.0/0"),
        m.IngressRule("tcp", 443, 443, cidr="0.0.0.0/0"),
        m.IngressRule("icmp", 3, 4, cidr="0.0.0.0/0"),
    }
    assert m.rules_from_permissions(world.group(backend)["IpPermissions"]) == []
    group = world.group(listeners)
    assert {t["Key"]: t["Value"] for t in group["Tags"]} == {
        CLUSTER_TAG: "owned",
        m.ROLE_TAG: m.ROLE_LISTENERS,
        fm.LISTENERS_TAG: "ipv4 tcp:80,443",
    }
    assert group["GroupName"] == fm.listener_group_name(CLUSTER, "ipv4 tcp:80,443")
    assert {t["Key"]: t["Value"] for t in world.group(backend)["Tags"]} == {
        CLUSTER_TAG: "owned",
        m.ROLE_TAG: m.ROLE_BACKEND,
    }
    assert not [
        g for g in world.ec2.describe_security_groups()["SecurityGroups"] if g["GroupName"].startswith("k8s-elb-")
    ]

    same, same_cfg = svc_and_config("clb", ports=[(443, 30444), (80, 30081)])  # same ports: same group (CLB too)
    world.clients.counter.reset_thread()
    assert world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {}) == ids
    assert world.sgs.ensure_lb_group(lb_name(same), same, same_cfg, "clb", {}) == ids
    assert world.calls() == {}  # warm: cached per execution environment

    other, other_cfg = svc_and_config("clb", ports=[(8443, 30082)])
    world.clients.counter.reset_thread()
    other_ids = world.sgs.ensure_lb_group(lb_name(other), other, other_cfg, "clb", {})
    # A port set new to the cluster: its group, created without a read (the scan said it did not exist).
    assert world.calls() == {"ec2:CreateSecurityGroup": 1, "ec2:AuthorizeSecurityGroupIngress": 1}
    assert other_ids[1] == backend and other_ids[0] != listeners
    assert set(m.rules_from_permissions(world.group(other_ids[0])["IpPermissions"])) == {
        m.IngressRule("tcp", 8443, 8443, cidr="0.0.0.0/0"),
        m.IngressRule("icmp", 3, 4, cidr="0.0.0.0/0"),
    }


def test_a_dualstack_nlb_gets_ipv6_rules_and_its_own_listener_group(world: World) -> None:
    ipv4, ipv4_cfg = svc_and_config(ports=[(443, 30443)])
    dual, dual_cfg = svc_and_config(ann={P + "ip-address-type": "dualstack"}, ports=[(443, 30444)])
    plain = world.sgs.ensure_lb_group(lb_name(ipv4), ipv4, ipv4_cfg, "nlb", {})[0]
    both = world.sgs.ensure_lb_group(lb_name(dual), dual, dual_cfg, "nlb", {})[0]
    assert plain != both
    assert set(m.rules_from_permissions(world.group(both)["IpPermissions"])) == {
        m.IngressRule("tcp", 443, 443, cidr="0.0.0.0/0"),
        m.IngressRule("tcp", 443, 443, cidr="::/0"),
        m.IngressRule("icmp", 3, 4, cidr="0.0.0.0/0"),
        m.IngressRule("icmpv6", 2, 0, cidr="::/0"),
    }
    assert all(r.cidr != "::/0" for r in m.rules_from_permissions(world.group(plain)["IpPermissions"]))


def test_a_new_environment_learns_the_cluster_groups_in_one_read(world: World) -> None:
    """The shared groups, the node group and its backend rule exist: a new environment's first create needs them
    all, from one read of the VPC's cluster-tagged groups (one by one it took four)."""
    svc, cfg = svc_and_config()
    ids = ensure(world, svc, cfg)
    world.sgs.forget_node_groups()  # a new execution environment
    world.clients.counter.reset_thread()
    assert ensure(world, svc, cfg) == ids
    assert world.calls() == {"ec2:DescribeSecurityGroups": 1}
    world.clients.counter.reset_thread()
    assert ensure(world, svc, cfg) == ids
    assert world.calls() == {}  # all of it cached


def test_a_node_group_without_the_backend_rule_gets_it_after_the_scan(world: World) -> None:
    """The scan learns the shared groups but sees the node group lacking the backend rule (revoked by hand): not
    remembered as present, so node access reads the node group and authorizes the rule again."""
    svc, cfg = svc_and_config()
    ids = ensure(world, svc, cfg)
    backend = ids[1]
    rule = m.backend_rule(backend, CLUSTER)
    world.ec2.revoke_security_group_ingress(GroupId=world.node_sg, IpPermissions=m.to_permissions([rule]))
    world.sgs.forget_node_groups()  # a new execution environment
    world.clients.counter.reset_thread()
    assert ensure(world, svc, cfg) == ids
    assert world.calls() == {"ec2:DescribeSecurityGroups": 2, "ec2:AuthorizeSecurityGroupIngress": 1}
    assert rule in set(m.rules_from_permissions(world.group(world.node_sg)["IpPermissions"]))


def test_a_listener_group_found_by_a_new_environment_is_converged_to_its_key(world: World) -> None:
    """A rule revoked by hand (or by an org policy) comes back, a rule added by hand (SSH from everywhere) goes:
    the scan of a new environment converges every listener group to the rules its key tag names."""
    svc, cfg = svc_and_config()
    listeners = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})[0]
    wanted = set(m.rules_from_permissions(world.group(listeners)["IpPermissions"]))
    world.ec2.revoke_security_group_ingress(
        GroupId=listeners, IpPermissions=m.to_permissions(sorted(wanted, key=m.sort_key)[:1], descriptions=False)
    )
    ssh = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
    world.ec2.authorize_security_group_ingress(GroupId=listeners, IpPermissions=[ssh])
    world.sgs.forget_node_groups()  # a new execution environment
    other, other_cfg = svc_and_config(ports=[(9000, 30900)])
    world.sgs.ensure_lb_group(lb_name(other), other, other_cfg, "nlb", {})  # any create: the scan converges all
    assert set(m.rules_from_permissions(world.group(listeners)["IpPermissions"])) == wanted


def test_a_listener_group_left_without_rules_is_completed_on_use(world: World) -> None:
    """A creator that crashed between CreateSecurityGroup and the Authorize leaves a group without rules: not
    learnt from the scan, it is found by name on use and completed."""
    svc, cfg = svc_and_config()
    listeners = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})[0]
    wanted = m.rules_from_permissions(world.group(listeners)["IpPermissions"])
    world.ec2.revoke_security_group_ingress(GroupId=listeners, IpPermissions=m.to_permissions(wanted))
    world.sgs.forget_node_groups()  # a new execution environment
    assert world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})[0] == listeners
    assert set(m.rules_from_permissions(world.group(listeners)["IpPermissions"])) == set(wanted)


def test_ensure_creates_the_tagged_group_once_then_makes_no_mutating_call(world: World) -> None:
    svc, cfg = svc_and_config(ann={P + "additional-resource-tags": "team=web"}, loadBalancerSourceRanges=RANGES)
    world.sgs.ensure_lb_group(lb_name(svc_and_config()[0]), *svc_and_config(), "nlb", {})  # the backend exists
    world.clients.counter.reset_thread()
    ids = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {"team": "web"})
    assert world.calls() == {
        "ec2:DescribeSecurityGroups": 1,
        "ec2:CreateSecurityGroup": 1,
        "ec2:AuthorizeSecurityGroupIngress": 1,
    }
    group = world.group(ids[0])
    assert ids == [group["GroupId"], shared_ids(world)[1]]
    assert group["GroupName"] == f"k8s-elb-{lb_name(svc)}" and group["VpcId"] == world.vpc_id
    assert {t["Key"]: t["Value"] for t in group["Tags"]} == {
        CLUSTER_TAG: "owned",
        names.SERVICE_NAME_TAG: "default/web",
        names.SERVICE_UID_TAG: svc["metadata"]["uid"],
        "team": "web",
    }
    assert set(m.rules_from_permissions(group["IpPermissions"])) == m.desired_lb_rules(cfg, "nlb")

    world.clients.counter.reset_thread()
    assert world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {"team": "web"}) == ids
    assert world.calls() == {"ec2:DescribeSecurityGroups": 1}  # its own group; the backend is cached
    assert CallCounter.mutating(world.calls()) == 0


def test_source_range_change_revokes_stale_and_authorizes_new_in_two_calls(world: World) -> None:
    svc, cfg = svc_and_config(loadBalancerSourceRanges=["10.0.0.0/8", "192.168.0.0/16"])
    gid, backend = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})
    svc, cfg = svc_and_config(uid=svc["metadata"]["uid"], loadBalancerSourceRanges=["10.0.0.0/8", "172.16.0.0/12"])
    world.clients.counter.reset_thread()
    assert world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {}) == [gid, backend]
    calls = world.calls()
    assert CallCounter.mutating(calls) == 2
    assert calls["ec2:AuthorizeSecurityGroupIngress"] == 1 and calls["ec2:RevokeSecurityGroupIngress"] == 1
    cidrs = {r.cidr for r in m.rules_from_permissions(world.group(gid)["IpPermissions"])}
    assert cidrs == {"10.0.0.0/8", "172.16.0.0/12"}


def test_a_hand_added_rule_on_the_managed_group_is_revoked(world: World) -> None:
    svc, cfg = svc_and_config(loadBalancerSourceRanges=RANGES)
    gid, _ = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})
    ssh = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "1.2.3.4/32"}]}
    world.ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[ssh])
    world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})
    assert set(m.rules_from_permissions(world.group(gid)["IpPermissions"])) == m.desired_lb_rules(cfg, "nlb")


def test_clb_group_has_path_mtu_icmp_and_extra_groups_follow(world: World) -> None:
    extra = world.new_group("extra", {CLUSTER_TAG: "shared"})  # annotations name cluster-tagged groups
    svc, cfg = svc_and_config(
        "clb", {P + "extra-security-groups": extra}, ports=[(80, 30080)], loadBalancerSourceRanges=RANGES
    )
    ids = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "clb", {})
    assert len(ids) == 3 and ids[1:] == [shared_ids(world)[1], extra]
    assert set(m.rules_from_permissions(world.group(ids[0])["IpPermissions"])) == {
        m.IngressRule("tcp", 80, 80, cidr="10.0.0.0/8"),
        m.IngressRule("icmp", 3, 4, cidr="10.0.0.0/8"),
    }
    assert m.rules_from_permissions(world.group(extra)["IpPermissions"]) == []  # never modified


def test_bring_your_own_groups_are_used_as_is(world: World) -> None:
    byo = world.new_group("byo", {CLUSTER_TAG: "shared"})  # annotations name cluster-tagged groups
    svc, cfg = svc_and_config(ann={P + "security-groups": byo})
    world.clients.counter.reset_thread()
    assert world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {}) == [byo]
    assert world.calls() == {"ec2:DescribeSecurityGroups": 1}  # only the check that the group may be named
    assert m.rules_from_permissions(world.group(byo)["IpPermissions"]) == []
    groups = world.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])
    assert not [g for g in groups["SecurityGroups"] if g["GroupName"].startswith("k8s-elb-")]


def test_node_access_is_one_rule_for_every_lb(world: World) -> None:
    """Rewritten for the backend group (it asserted one rule per LB): whatever the number of load balancers, the
    node group holds one rule of ours, from the backend group, and a warm reconcile spends no call on it."""
    svc1, cfg1 = svc_and_config()
    svc2, cfg2 = svc_and_config("clb", ports=[(80, 30080), (8080, 30081)], loadBalancerSourceRanges=RANGES)
    world.clients.counter.reset_thread()
    ensure(world, svc1, cfg1)
    # Cold start in a new cluster: 1 read of the cluster's groups (the node group learnt from it, no shared group
    # yet), 2 creates, 1 Authorize of the frontend's rules; 1 read of the node group, 1 Authorize of the backend rule.
    assert world.calls()["ec2:DescribeSecurityGroups"] == 2
    assert world.calls()["ec2:AuthorizeSecurityGroupIngress"] == 2
    ids2 = ensure(world, svc2, cfg2)
    assert world.node_rules() == [backend_rule(world)]
    assert world.node_rules()[0].description == m.backend_rule_description(CLUSTER)
    assert ids2[1] == shared_ids(world)[1]

    world.clients.counter.reset_thread()
    ensure(world, svc1, cfg1)
    ensure(world, svc2, cfg2)
    assert world.calls() == {"ec2:DescribeSecurityGroups": 1}  # svc2's own frontend group; nothing for svc1
    assert len(world.node_rules()) == 1


def test_a_hundred_load_balancers_leave_exactly_one_rule_on_the_node_group(world: World) -> None:
    """The ceiling this design removes: the node group's quota is 60 inbound rules (moto enforces it)."""
    for i in range(100):
        svc, cfg = svc_and_config(
            *(("clb",) if i % 3 == 0 else ()), **({"loadBalancerSourceRanges": RANGES} if i % 4 == 0 else {})
        )
        ensure(world, svc, cfg)
    assert world.node_rules() == [backend_rule(world)]


def test_the_backend_rule_is_restored_after_the_cache_expires(world: World) -> None:
    svc, cfg = svc_and_config()
    ensure(world, svc, cfg)
    world.ec2.revoke_security_group_ingress(GroupId=world.node_sg, IpPermissions=m.to_permissions(world.node_rules()))
    world.sgs.forget_node_groups()  # TTL over, or a new execution environment
    ensure(world, svc, cfg)
    assert world.node_rules() == [backend_rule(world)]


def test_switching_to_a_bring_your_own_group_moves_the_node_rule(world: World) -> None:
    svc, cfg = svc_and_config()
    ensure(world, svc, cfg)
    byo = world.new_group("byo", {CLUSTER_TAG: "shared"})  # annotations name cluster-tagged groups
    svc, cfg = svc_and_config(ann={P + "security-groups": byo}, uid=svc["metadata"]["uid"])
    assert ensure(world, svc, cfg) == [byo]  # no backend group on a bring-your-own LB
    assert sorted((r.source_group or "", m.lb_named_by(r.description) or "") for r in world.node_rules()) == sorted(
        [(byo, lb_name(svc)), (shared_ids(world)[1], "")]
    )
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    assert world.node_rules() == [backend_rule(world)]  # the shared rule stays for the other LBs


def test_delete_revokes_the_node_rule_then_deletes_the_group(world: World) -> None:
    """An LB of the previous design (its own group and node rule) is deleted."""
    svc, cfg = svc_and_config()
    other_svc, other_cfg = svc_and_config()
    gid = previous_version(world, svc, cfg)
    previous_version(world, other_svc, other_cfg)
    world.sgs.node_group_ids()  # discovered by an earlier reconcile in this environment
    world.clients.counter.reset_thread()
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    assert world.calls() == {
        "ec2:DescribeSecurityGroups": 2,
        "ec2:RevokeSecurityGroupIngress": 1,
        "ec2:DeleteSecurityGroup": 1,
    }
    assert [m.lb_named_by(r.description) for r in world.node_rules()] == [lb_name(other_svc)]
    assert not world.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [gid]}])["SecurityGroups"]

    world.clients.counter.reset_thread()
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])  # already gone: done, nothing written
    assert CallCounter.mutating(world.calls()) == 0


def test_delete_of_an_lb_with_source_ranges_deletes_only_its_frontend_group(world: World) -> None:
    svc, cfg = svc_and_config(loadBalancerSourceRanges=RANGES)
    gid, backend = ensure(world, svc, cfg)
    world.clients.counter.reset_thread()
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    assert world.calls() == {"ec2:DescribeSecurityGroups": 2, "ec2:DeleteSecurityGroup": 1}  # no rule of its own
    assert world.node_rules() == [backend_rule(world)]
    assert [g["GroupId"] for g in world.ec2.describe_security_groups(GroupIds=[backend])["SecurityGroups"]] == [backend]
    assert not world.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [gid]}])["SecurityGroups"]


def test_delete_of_an_lb_on_the_shared_groups_only_makes_no_call(world: World) -> None:
    svc, cfg = svc_and_config()
    ids = ensure(world, svc, cfg)
    world.clients.counter.reset_thread()
    world.sgs.before_lb_delete(
        {"LoadBalancerName": lb_name(svc), "SecurityGroups": ids, "CreatedTime": datetime.now(UTC)}
    )
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    assert world.calls() == {}
    assert world.node_rules() == [backend_rule(world)]
    # Not seen right before (a retry after the LB went): looked up, nothing of its own to delete.
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    assert CallCounter.mutating(world.calls()) == 0 and world.node_rules() == [backend_rule(world)]


def test_dependency_violation_asks_the_queue_to_retry(world: World, faithful_aws: FaithfulSettings) -> None:
    # AWS answers DependencyViolation while the deleted NLB's network interfaces still hold the group (moto made
    # faithful server side by devstack.aws_faithful: held for sg_release_seconds after DeleteLoadBalancer).
    faithful_aws.sg_release_seconds = 1.0
    svc, cfg = svc_and_config(loadBalancerSourceRanges=RANGES)
    group_ids = ensure(world, svc, cfg)
    elbv2 = world.clients.elbv2
    arn = elbv2.create_load_balancer(
        Name=lb_name(svc), Type="network", Subnets=[world.subnet_id], SecurityGroups=group_ids
    )["LoadBalancers"][0]["LoadBalancerArn"]
    elbv2.delete_load_balancer(LoadBalancerArn=arn)
    with pytest.raises(RetryError) as info:
        world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    assert info.value.delay_seconds == 15
    assert world.node_rules() == [backend_rule(world)]  # the shared rule stays
    deadline = time.monotonic() + 20
    while True:  # what the queue does: come back until AWS lets go
        try:
            world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
            break
        except RetryError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert not world.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": group_ids[:1]}])[
        "SecurityGroups"
    ]


def test_a_group_not_yet_visible_after_its_creation_is_retried_not_refused(
    world: World, faithful_aws: FaithfulSettings
) -> None:
    # EC2 is eventually consistent: a group just created may not be returned by DescribeSecurityGroups for a
    # moment. A second reconcile in that moment (a redelivered message) finds no group, creates it again, gets
    # InvalidGroup.Duplicate and still cannot read it: that is a wait, not a hand-made untagged group.
    faithful_aws.eventual_consistency, faithful_aws.consistency_seconds = True, 2.0
    svc, cfg = svc_and_config(loadBalancerSourceRanges=RANGES)
    first = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, {})
    with pytest.raises(RetryError, match="not visible yet"):
        world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, {})
    faithful_aws.consistency_seconds = 0  # later: visible
    assert world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, {}) == first


def test_stale_node_rules_are_revoked_for_lbs_that_no_longer_exist(world: World) -> None:
    """The previous design's per-LB rules are swept when their LB is gone; the shared backend rule never is."""
    live_svc, live_cfg = svc_and_config()
    gone_svc, gone_cfg = svc_and_config()
    previous_version(world, live_svc, live_cfg)
    previous_version(world, gone_svc, gone_cfg)
    ensure(world, *svc_and_config())  # the backend rule
    ssh = {
        "IpProtocol": "tcp",
        "FromPort": 22,
        "ToPort": 22,
        "IpRanges": [{"CidrIp": "10.0.0.0/8", "Description": "ssh"}],
    }
    world.ec2.authorize_security_group_ingress(GroupId=world.node_sg, IpPermissions=[ssh])  # not ours: never touched
    asked: list[set[str]] = []

    def live(names_: set[str]) -> set[str]:
        asked.append(names_)
        return {lb_name(live_svc)}

    stale = world.sgs.revoke_stale_node_rules(live)
    assert asked == [{lb_name(live_svc), lb_name(gone_svc)}]
    assert [m.lb_named_by(r.description) for r in stale] == [lb_name(gone_svc)]
    assert sorted(m.lb_named_by(r.description) or r.description for r in world.node_rules()) == sorted(
        [lb_name(live_svc), "ssh", m.backend_rule_description(CLUSTER)]
    )
    world.sgs.revoke_stale_node_rules(lambda names_: set())  # no LB left at all
    assert sorted(r.description for r in world.node_rules()) == sorted(["ssh", m.backend_rule_description(CLUSTER)])


def tagged_node_rules(world: World) -> dict[str, list[dict[str, str]]]:
    """Source group -> tags of each node-group ingress rule (DescribeSecurityGroupRules)."""
    rules = world.ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [world.node_sg]}])
    return {
        r["ReferencedGroupInfo"]["GroupId"]: r.get("Tags", []) for r in rules["SecurityGroupRules"] if not r["IsEgress"]
    }


def test_the_node_rule_we_add_carries_the_cluster_tag(world: World) -> None:
    svc, cfg = svc_and_config()
    [_, backend] = ensure(world, svc, cfg)
    assert tagged_node_rules(world) == {backend: [{"Key": CLUSTER_TAG, "Value": "owned"}]}


def test_only_node_rules_we_tagged_are_revoked_by_name(world: World) -> None:
    """A rule that only carries our description (hand-made, another tool's, or a copy of ours) is not ours:
    neither the sweeper's stale pass nor an LB's delete revokes it; the tagged one of the same LB is revoked."""
    svc, cfg = svc_and_config()
    previous_version(world, svc, cfg)
    gone = lb_name(svc_and_config()[0])  # an LB that does not exist, named in an untagged rule
    lookalike_source = world.new_group("lookalike")
    world.ec2.authorize_security_group_ingress(
        GroupId=world.node_sg,
        IpPermissions=m.to_permissions([m.node_rule(lookalike_source, gone, "x")]),
    )
    stale = world.sgs.revoke_stale_node_rules(lambda names_: {lb_name(svc)})
    assert [m.lb_named_by(r.description) for r in stale] == [gone]  # found, but not ours to revoke
    assert {m.lb_named_by(r.description) for r in world.node_rules()} == {lb_name(svc), gone}

    # The LB's own rule copied by hand from another source (untagged) stays; the one we added goes.
    world.ec2.authorize_security_group_ingress(
        GroupId=world.node_sg,
        IpPermissions=m.to_permissions([m.node_rule(world.new_group("copy"), lb_name(svc), svc["metadata"]["uid"])]),
    )
    world.sgs.revoke_node_access(lb_name(svc), None)
    left = world.node_rules()
    assert sorted(m.lb_named_by(r.description) or "" for r in left) == sorted([gone, lb_name(svc)])
    assert all(not tags for tags in tagged_node_rules(world).values())  # only the untagged ones are left


def test_a_rule_from_the_managed_group_is_revoked_on_delete_even_untagged(world: World) -> None:
    """Adoption: cloud-provider-aws added the rule from the LB's managed group, untagged and with its own
    description; the group is deleted with the LB and cannot be while a rule references it."""
    svc, cfg = svc_and_config(loadBalancerSourceRanges=RANGES)
    gid = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, {})[0]
    upstream = {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": gid, "Description": "kubernetes.io/rule/nlb"}]}
    world.ec2.authorize_security_group_ingress(GroupId=world.node_sg, IpPermissions=[upstream])
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    assert world.node_rules() == []
    assert not world.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [gid]}])["SecurityGroups"]


def test_a_shared_bring_your_own_group_rule_is_handed_over_not_revoked(world: World) -> None:
    byo = world.new_group("shared", {CLUSTER_TAG: "shared"})  # annotations name cluster-tagged groups
    world.run_node(world.node_sg)  # two cluster-tagged groups now: the node group is the instances' one
    first, first_cfg = svc_and_config(ann={P + "security-groups": byo})
    second, second_cfg = svc_and_config(ann={P + "security-groups": byo})
    ensure(world, first, first_cfg)
    ensure(world, second, second_cfg)
    assert [m.lb_named_by(r.description) for r in world.node_rules()] == [lb_name(first)]  # AWS: one per source
    for svc in (first, second):  # the NLBs' network interfaces carry the group (moto makes none for an NLB)
        world.ec2.create_network_interface(
            SubnetId=world.subnet_id, Groups=[byo], Description=f"ELB net/{lb_name(svc)}/0123456789abcdef"
        )
    sent: list[dict[str, Any]] = []
    world.hook(
        "provide-client-params.ec2.UpdateSecurityGroupRuleDescriptionsIngress", lambda params, **_: sent.append(params)
    )
    world.clients.counter.reset_thread()
    world.sgs.delete_lb_group(lb_name(first), first["metadata"]["uid"])
    assert "ec2:RevokeSecurityGroupIngress" not in world.calls()
    assert [r.source_group for r in world.node_rules()] == [byo]  # still there for the second Service
    # Relabelled to name the second LB. (moto matches a group pair with its old description and so never applies
    # a new one, unlike AWS: check what is sent.)
    relabelled = m.rules_from_permissions(sent[0]["IpPermissions"])
    assert sent[0]["GroupId"] == world.node_sg
    assert [(r.source_group, m.lb_named_by(r.description)) for r in relabelled] == [(byo, lb_name(second))]
    world.clients.counter.reset_thread()
    ensure(world, second, second_cfg)
    assert CallCounter.mutating(world.calls()) == 0


def test_several_tagged_groups_are_chosen_per_instance_like_upstream(world: World) -> None:
    extra_node_sg = world.new_group("more-nodes", {CLUSTER_TAG: "shared"})
    world.new_group("unused", {CLUSTER_TAG: "owned"})  # tagged but on no instance: not a node group
    world.run_node(world.node_sg)
    world.run_node(extra_node_sg)
    svc, cfg = svc_and_config()
    world.clients.counter.reset_thread()
    gid = ensure(world, svc, cfg)[0]
    assert world.calls()["ec2:DescribeInstances"] == 1
    assert world.sgs.node_group_ids() == tuple(sorted([world.node_sg, extra_node_sg]))  # not the shared groups
    for group_id in (world.node_sg, extra_node_sg):
        assert m.rules_from_permissions(world.group(group_id)["IpPermissions"]) == [backend_rule(world)]

    world.sgs.forget_node_groups()
    world.run_node(world.node_sg, extra_node_sg)  # upstream refuses to guess between two tagged groups
    with pytest.raises(m.NodeSecurityGroupError):
        world.sgs.ensure_node_access([gid], lb_name(svc), svc["metadata"]["uid"])


def test_no_describe_call_without_a_filter_or_ids(world: World) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name.startswith("Describe"):
            seen.append((model.name, dict(params.get("body") or {})))

    world.hook("before-call.ec2", record)
    byo = world.new_group("byo-shared", {CLUSTER_TAG: "shared"})  # annotations name cluster-tagged groups
    world.new_group("more-tagged", {CLUSTER_TAG: "owned"})  # forces the per-instance discovery too
    world.run_node(world.node_sg)
    svc, cfg = svc_and_config()
    byo_svc, byo_cfg = svc_and_config(ann={P + "security-groups": byo})
    ensure(world, svc, cfg)
    ensure(world, byo_svc, byo_cfg)
    world.sgs.revoke_stale_node_rules(lambda names_: set())
    ensure(world, svc, cfg)
    ensure(world, byo_svc, byo_cfg)
    world.sgs.delete_lb_group(lb_name(byo_svc), byo_svc["metadata"]["uid"])
    world.sgs.delete_lb_group(lb_name(svc), svc["metadata"]["uid"])
    ops = {op for op, _ in seen}
    # DescribeSecurityGroupRules: the ids of our tagged node rules before revoking them (group-id filter).
    assert ops == {
        "DescribeSecurityGroups",
        "DescribeInstances",
        "DescribeNetworkInterfaces",
        "DescribeSecurityGroupRules",
    }
    for op, body in seen:
        scoped = [k for k in body if k.startswith(("Filter.", "GroupId.", "InstanceId."))]
        assert scoped, f"{op} without a filter or ids: {body}"
        if any(k.startswith("Filter.") for k in body):
            filter_names = {v for k, v in body.items() if k.startswith("Filter.") and k.endswith(".Name")}
            assert filter_names & {"vpc-id", "group-id"}, f"{op} not scoped to the VPC: {body}"


def test_more_rules_than_the_group_quota_is_a_warning_and_a_retry(world: World) -> None:
    # Amazon VPC quotas: 60 inbound rules per security group, one per CIDR and port (moto enforces it as AWS). Each
    # range gets 2 listener rules and the path-MTU ICMP rule: 21 ranges x 3 = 63 do not fit. Fewer ranges or a raised
    # quota cure it, so CloudStateError (Warning + retry).
    ranges = [f"10.{i}.0.0/16" for i in range(21)]
    svc, cfg = svc_and_config(loadBalancerSourceRanges=ranges)
    with pytest.raises(CloudStateError, match="rules-per-security-group quota"):
        world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, {})
    uid = svc["metadata"]["uid"]
    svc, cfg = svc_and_config(uid=uid, loadBalancerSourceRanges=ranges[:20])  # 60: fits (the refusal added none)
    group_id, _ = world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, {})
    assert len(m.rules_from_permissions(world.group(group_id)["IpPermissions"])) == 60
    # One range replaced at the quota: the 3 new rules do not fit beside the 3 old ones, so they are revoked first.
    changed = [*ranges[:19], "192.168.0.0/16"]
    svc, cfg = svc_and_config(uid=uid, loadBalancerSourceRanges=changed)
    world.sgs.ensure_lb_group(lb_name(svc), svc, cfg, cfg.lb_type, {})
    rules = m.rules_from_permissions(world.group(group_id)["IpPermissions"])
    assert len(rules) == 60 and {r.cidr for r in rules} == set(changed)


def test_annotations_may_name_only_cluster_tagged_groups_of_the_vpc(world: World) -> None:
    """A Service author must not give an arbitrary group of the VPC (a bastion's, a database's) access to the nodes:
    an untagged, unknown or foreign-VPC group is InvalidServiceConfig before any change."""
    other_vpc = world.ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    foreign = world.ec2.create_security_group(GroupName="f", Description="f", VpcId=other_vpc)["GroupId"]
    untagged = world.new_group("bastion")
    for lb, ann in (
        ("nlb", {P + "security-groups": untagged}),
        ("clb", {P + "extra-security-groups": untagged}),  # a Classic ELB annotation (NLBs ignore it)
        ("clb", {P + "security-groups": foreign}),
    ):
        svc, cfg = svc_and_config(lb, ann=ann)
        world.clients.counter.reset_thread()
        with pytest.raises(InvalidServiceConfig, match="security-groups / extra-security-groups"):
            ensure(world, svc, cfg)
        assert CallCounter.mutating(world.calls()) == 0, ann
    # An unknown id may be a group the author's IaC creates later: a Warning and a retry (ccm.aws.refusals), no change.
    svc, cfg = svc_and_config("clb", ann={P + "extra-security-groups": "sg-0123456789abcdef0"})
    world.clients.counter.reset_thread()
    with pytest.raises(CloudStateError, match="security-groups / extra-security-groups"):
        ensure(world, svc, cfg)
    assert CallCounter.mutating(world.calls()) == 0
    assert all(r.source_group != untagged for r in world.node_rules())
    # The template parameter AnnotationSecurityGroups=any lifts the tag requirement (never the VPC one).
    relaxed = SecurityGroups(world.clients, Cluster(CLUSTER, world.vpc_id), any_named_group=True)
    svc, cfg = svc_and_config(ann={P + "security-groups": untagged})
    assert relaxed.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {}) == [untagged]
    svc, cfg = svc_and_config(ann={P + "security-groups": foreign})
    with pytest.raises(InvalidServiceConfig, match="not in"):
        relaxed.ensure_lb_group(lb_name(svc), svc, cfg, "nlb", {})
