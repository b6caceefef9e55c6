"""Client-facing rules only where a listener is (issue 22), through both drivers against moto answering as AWS
does: the Security Hub controls EC2.18 and EC2.19, evaluated as data (tests/compliance.py) over every group of the
VPC, find nothing in a cluster of 80/443 Services; and load balancers on the all-ports group of 0.2 move to their
listener groups without a moment where a live listener has no rule, after which the all-ports group goes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws import security_groups_model as sgm
from ccm.contracts.cloud import PassFlags
from tests.compliance import EVERYWHERE, findings
from tests.factories import service
from tests.integration.conftest import CLUSTER, World
from tests.integration.test_balancers_delete import TYPE, Env, _groups_of, svc_name

IP_TYPE = "service.beta.kubernetes.io/aws-load-balancer-ip-address-type"


@pytest.fixture
def env(world: World) -> Env:
    return Env(world)


def vpc_groups(env: Env) -> list[dict[str, Any]]:
    vpc = [{"Name": "vpc-id", "Values": [env.world.vpc_id]}]
    groups: list[dict[str, Any]] = env.ec2.describe_security_groups(Filters=vpc)["SecurityGroups"]
    return groups


def web(lb_type: str, name: str, ports: list[tuple[int, int]] | None = None, **ann: str) -> dict[str, Any]:
    return service(name, annotations={TYPE: lb_type, **ann}, ports=ports)


def test_a_cluster_of_80_443_services_passes_ec2_18_and_ec2_19(env: Env) -> None:
    services = [
        web("nlb", "a"),
        web("nlb", "b"),
        web("nlb", "dual", **{IP_TYPE: "dualstack"}),
        web("clb", "c"),
        web("clb", "d", ports=[(443, 30444)]),
        # Not open to the world: its own group, SSH from one range only.
        service("ssh", annotations={TYPE: "nlb"}, ports=[(22, 30022)], loadBalancerSourceRanges=["10.0.0.0/8"]),
    ]
    for svc in services:
        env.lbs.ensure_load_balancer(svc, env.world.nodes())
    groups = vpc_groups(env)
    assert findings(groups) == []
    # The LBs of the same ports and family share one group: ipv4 80/443 (NLB and CLB), dualstack 80/443, ipv4 443.
    roles = [{t["Key"]: t["Value"] for t in g.get("Tags", [])}.get(sgm.ROLE_TAG) for g in groups]
    assert sorted(r for r in roles if r) == sorted([sgm.ROLE_BACKEND, *[sgm.ROLE_LISTENERS] * 3])
    # ::/0 only on the dualstack LB's group.
    for svc in services:
        lb_type = svc["metadata"]["annotations"][TYPE]
        carried = [g for g in groups if g["GroupId"] in _groups_of(env, svc, lb_type)]
        v6 = {r["CidrIpv6"] for g in carried for p in g["IpPermissions"] for r in p.get("Ipv6Ranges", [])}
        assert v6 == ({"::/0"} if svc["metadata"]["name"] == "dual" else set())

    # The checker bites: the all-ports group of 0.2, and a Service opening SSH to everyone.
    legacy = env.ec2.create_security_group(GroupName="legacy", Description="legacy", VpcId=env.world.vpc_id)
    env.ec2.authorize_security_group_ingress(
        GroupId=legacy["GroupId"], IpPermissions=sgm.to_permissions(sgm.frontend_default_rules())
    )
    flagged = {(control, gid) for control, gid, *_ in findings(vpc_groups(env))}
    assert flagged == {("EC2.18", legacy["GroupId"]), ("EC2.19", legacy["GroupId"])}
    ssh = web("nlb", "open-ssh", ports=[(22, 30023)])
    env.lbs.ensure_load_balancer(ssh, env.world.nodes())
    ssh_group = [g for g in _groups_of(env, ssh, "nlb") if g != env.backend()[0]]
    assert {(c, p) for c, gid, _, p, _ in findings(vpc_groups(env)) if [gid] == ssh_group} == {
        ("EC2.18", 22),
        ("EC2.19", 22),
    }


def legacy_frontend(env: Env) -> str:
    """The all-ports group 0.2 made for every LB open to the world, with its tags and rules."""
    tags = {f"kubernetes.io/cluster/{CLUSTER}": "owned", sgm.ROLE_TAG: sgm.ROLE_FRONTEND}
    gid: str = env.ec2.create_security_group(
        GroupName=sgm.shared_group_name(CLUSTER, sgm.ROLE_FRONTEND),
        Description="0.2",
        VpcId=env.world.vpc_id,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": names.as_tag_list(tags)}],
    )["GroupId"]
    env.ec2.authorize_security_group_ingress(
        GroupId=gid, IpPermissions=sgm.to_permissions(sgm.frontend_default_rules())
    )
    return gid


def move_to(env: Env, svc: dict[str, Any], lb_type: str, groups: list[str]) -> None:
    if lb_type == "nlb":
        arn = env.elbv2.describe_load_balancers(Names=[svc_name(svc)])["LoadBalancers"][0]["LoadBalancerArn"]
        env.elbv2.set_security_groups(LoadBalancerArn=arn, SecurityGroups=groups)
    else:
        env.elb.apply_security_groups_to_load_balancer(LoadBalancerName=svc_name(svc), SecurityGroups=groups)


def uncovered_listeners(env: Env) -> list[str]:
    """Listeners of every LB in the VPC that no rule of the LB's groups opens to the world (all are open to it)."""
    rules_of = {
        g["GroupId"]: [r for r in sgm.rules_from_permissions(g["IpPermissions"]) if r.cidr in EVERYWHERE]
        for g in vpc_groups(env)
    }

    def covered(groups: list[str], port: int) -> bool:
        return any(
            r.protocol in ("tcp", "-1") and (r.protocol == "-1" or r.from_port <= port <= r.to_port)
            for g in groups
            for r in rules_of.get(g, [])
        )

    missing = []
    for lb in env.elbv2.describe_load_balancers()["LoadBalancers"]:
        for ls in env.elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]:
            if not covered(lb.get("SecurityGroups", []), ls["Port"]):
                missing.append(f"{lb['LoadBalancerName']}:{ls['Port']}")
    for desc in env.elb.describe_load_balancers()["LoadBalancerDescriptions"]:
        for ls in desc["ListenerDescriptions"]:
            if not covered(desc.get("SecurityGroups", []), ls["Listener"]["LoadBalancerPort"]):
                missing.append(f"{desc['LoadBalancerName']}:{ls['Listener']['LoadBalancerPort']}")
    return missing


def after_every_call(env: Env, check: Callable[[], None]) -> None:
    """Run `check` after every AWS call the drivers make (their own clients, not the test's)."""
    clients = env.world.clients
    for client in (clients.ec2, clients.elbv2, clients.client("elb")):
        client.meta.events.register("after-call", lambda **_: check())


def test_lbs_on_the_all_ports_group_move_to_their_listener_groups_then_it_goes(env: Env) -> None:
    """Upgrade from 0.2: each LB's next pass carries its listener group beside the all-ports group, then only its
    listener group (make before break); after every single AWS call of the migration, every live listener still has
    a rule. The all-ports group is deleted by the pass that moves the last LB off it, not before."""
    nlb, clb = web("nlb", "n"), web("clb", "c", ports=[(443, 30443)])
    for svc in (nlb, clb):
        env.lbs.ensure_load_balancer(svc, env.world.nodes())
    made = [g for t, s in (("nlb", nlb), ("clb", clb)) for g in _groups_of(env, s, t) if g != env.backend()[0]]
    legacy = legacy_frontend(env)
    for lb_type, svc in (("nlb", nlb), ("clb", clb)):
        move_to(env, svc, lb_type, [legacy, *env.backend()])
    for group in set(made):  # 0.2 never made them
        env.ec2.delete_security_group(GroupId=group)
    env.groups.forget_node_groups()  # the upgraded function: a new execution environment
    assert uncovered_listeners(env) == []

    gaps: list[list[str]] = []
    after_every_call(env, lambda: gaps.append(missing) if (missing := uncovered_listeners(env)) else None)
    carried: list[list[str]] = []
    env.world.clients.elbv2.meta.events.register(
        "provide-client-params.elastic-load-balancing-v2.SetSecurityGroups",
        lambda params, **_: carried.append(sorted(params["SecurityGroups"])),
    )

    env.lbs.ensure_load_balancer(nlb, env.world.nodes())
    new_nlb = _groups_of(env, nlb, "nlb")
    assert legacy not in new_nlb and env.backend()[0] in new_nlb
    assert carried == [sorted([legacy, *new_nlb]), sorted(new_nlb)]  # old and new together, then the new
    assert legacy in {g["GroupId"] for g in vpc_groups(env)}  # the Classic ELB still carries it

    env.lbs.ensure_load_balancer(clb, env.world.nodes(), PassFlags(thorough=True))
    assert legacy not in _groups_of(env, clb, "clb")
    assert legacy not in {g["GroupId"] for g in vpc_groups(env)}  # no LB carries it: deleted
    assert gaps == []
    assert findings(vpc_groups(env)) == []
    open_ports = {
        (r.protocol, r.from_port)
        for g in vpc_groups(env)
        for r in sgm.rules_from_permissions(g["IpPermissions"])
        if r.cidr in EVERYWHERE
    }
    assert open_ports == {("tcp", 80), ("tcp", 443), ("icmp", 3)}  # the listeners, and path-MTU ICMP


def test_a_listener_group_deleted_behind_a_warm_cache_is_made_again(env: Env) -> None:
    """The sweeper collects a listener group no LB carries; a warm environment still has its id cached. AWS answers
    CreateLoadBalancer naming it with InvalidSecurityGroup (the devstack too): the cache is forgotten, the pass is
    retried, and the retry finds or makes the group again, never an LB carrying a group that does not exist."""
    first = web("nlb", "first")
    env.lbs.ensure_load_balancer(first, env.world.nodes())
    (listeners,) = [g for g in _groups_of(env, first, "nlb") if g != env.backend()[0]]
    env.delete_until_done(first["metadata"]["uid"])
    env.ec2.delete_security_group(GroupId=listeners)  # as the sweeper does once no LB carries it
    second = web("nlb", "second")
    with pytest.raises(ClientError, match="InvalidSecurityGroup"):
        env.lbs.ensure_load_balancer(second, env.world.nodes())
    env.lbs.ensure_load_balancer(second, env.world.nodes())  # the queue's retry
    carried = _groups_of(env, second, "nlb")
    assert listeners not in carried
    assert {g["GroupId"] for g in vpc_groups(env)} >= set(carried)
    assert findings(vpc_groups(env)) == []
