"""Security-group decisions (pure): LB rules from listeners x source ranges, the authorize/revoke diff, the AWS
shape both ways, the one node rule per LB, retiring and stale rules, node-group choice."""

from __future__ import annotations

from typing import Any

import pytest

from ccm.aws import lbconfig as a
from ccm.aws import security_groups_model as m
from ccm.aws.lbconfig import LoadBalancerConfig
from ccm.aws.security_groups_model import IngressRule, desired_lb_rules, plan_rules
from tests.factories import service

P = a.PREFIX
LB = ("a" + "0123456789abcdef" * 2)[:32]  # our naming: "a" + UID hex, 32 characters
OTHER_LB = "a" + "f" * 31
SG = "sg-0123456789abcdef0"


def config(lb: str = "nlb", ann: dict[str, str] | None = None, **spec: Any) -> LoadBalancerConfig:
    return a.parse_load_balancer_config(service(annotations={P + "type": lb, **(ann or {})}, **spec))


def tcp(port: int, cidr: str) -> IngressRule:
    return IngressRule("tcp", port, port, cidr=cidr)


def mtu(*cidrs: str) -> set[IngressRule]:
    """The path-MTU rule of each range: ICMP 3/4 (IPv4), ICMPv6 2/0 (IPv6)."""
    return {IngressRule("icmpv6", 2, 0, cidr=c) if ":" in c else IngressRule("icmp", 3, 4, cidr=c) for c in cidrs}


def test_nlb_default_opens_listener_ports_to_everyone() -> None:
    assert desired_lb_rules(config(), "nlb") == {tcp(80, "0.0.0.0/0"), tcp(443, "0.0.0.0/0"), *mtu("0.0.0.0/0")}


def test_nlb_group_lets_path_mtu_discovery_through_per_range() -> None:
    """cloud-provider-aws gives its NLB clients ICMP 3/4 (fragmentation needed); IPv6 needs ICMPv6 2 (too big)."""
    ranges = ["10.0.0.0/8", "2001:db8::/32"]
    dual = config(ann={P + "ip-address-type": "dualstack"}, loadBalancerSourceRanges=ranges, ports=[(80, 30080)])
    rules = desired_lb_rules(dual, "nlb")
    assert IngressRule("icmp", 3, 4, cidr="10.0.0.0/8") in rules
    assert IngressRule("icmpv6", 2, 0, cidr="2001:db8::/32") in rules
    assert m.to_permissions(mtu("10.0.0.0/8", "2001:db8::/32")) == [
        {"IpProtocol": "icmp", "FromPort": 3, "ToPort": 4, "IpRanges": [{"CidrIp": "10.0.0.0/8"}]},
        {"IpProtocol": "icmpv6", "FromPort": 2, "ToPort": 0, "Ipv6Ranges": [{"CidrIpv6": "2001:db8::/32"}]},
    ]


def test_ports_times_ranges_and_udp() -> None:
    svc = service(annotations={P + "type": "nlb"}, loadBalancerSourceRanges=["10.0.0.0/8", "192.168.1.0/24"])
    svc["spec"]["ports"] = [
        {"name": "dns", "protocol": "UDP", "port": 53, "nodePort": 30053},
        {"name": "web", "protocol": "TCP", "port": 80, "nodePort": 30080},
    ]
    rules = desired_lb_rules(a.parse_load_balancer_config(svc), "nlb")
    assert rules == {
        IngressRule(proto, port, port, cidr=cidr)
        for proto, port in (("udp", 53), ("tcp", 80))
        for cidr in ("10.0.0.0/8", "192.168.1.0/24")
    } | mtu("10.0.0.0/8", "192.168.1.0/24")


def test_tcp_udp_listener_opens_both_protocols() -> None:
    svc = service(annotations={P + "type": "nlb"})
    svc["spec"]["ports"] = [
        {"name": "dns-t", "protocol": "TCP", "port": 53, "nodePort": 30053},
        {"name": "dns-u", "protocol": "UDP", "port": 53, "nodePort": 30053},
    ]
    cfg = a.parse_load_balancer_config(svc)
    assert [ls.protocol for ls in cfg.listeners] == ["TCP_UDP"]
    assert desired_lb_rules(cfg, "nlb") == {tcp(53, "0.0.0.0/0"), IngressRule("udp", 53, 53, cidr="0.0.0.0/0")} | mtu(
        "0.0.0.0/0"
    )


def test_ipv6_ranges_only_on_dualstack_nlb() -> None:
    ranges = ["10.0.0.0/8", "2001:db8::/32"]
    v4 = desired_lb_rules(config(loadBalancerSourceRanges=ranges, ports=[(80, 30080)]), "nlb")
    assert v4 == {tcp(80, "10.0.0.0/8"), *mtu("10.0.0.0/8")}
    dual = config(ann={P + "ip-address-type": "dualstack"}, loadBalancerSourceRanges=ranges, ports=[(80, 30080)])
    assert desired_lb_rules(dual, "nlb") == {tcp(80, "10.0.0.0/8"), tcp(80, "2001:db8::/32"), *mtu(*ranges)}
    default_dual = config(ann={P + "ip-address-type": "dualstack"}, ports=[(80, 30080)])
    assert desired_lb_rules(default_dual, "nlb") == {tcp(80, "0.0.0.0/0"), tcp(80, "::/0"), *mtu("0.0.0.0/0", "::/0")}


def test_clb_adds_path_mtu_icmp_per_ipv4_range() -> None:
    cfg = config("clb", loadBalancerSourceRanges=["10.0.0.0/8", "2001:db8::/32"], ports=[(80, 30080)])
    assert desired_lb_rules(cfg, "clb") == {tcp(80, "10.0.0.0/8"), IngressRule("icmp", 3, 4, cidr="10.0.0.0/8")}


def test_bring_your_own_groups_get_no_managed_rules() -> None:
    assert desired_lb_rules(config(ann={P + "security-groups": SG}), "nlb") == frozenset()
    assert desired_lb_rules(config("clb", ann={P + "security-groups": SG}), "clb") == frozenset()


def test_plan_rules_diff_is_sorted_and_empty_when_converged() -> None:
    current = [tcp(80, "10.0.0.0/8"), tcp(443, "10.0.0.0/8"), tcp(80, "10.0.0.0/8")]
    desired = [tcp(80, "10.0.0.0/8"), tcp(80, "172.16.0.0/12"), tcp(443, "172.16.0.0/12")]
    authorize, revoke = plan_rules(current, desired)
    assert authorize == [tcp(80, "172.16.0.0/12"), tcp(443, "172.16.0.0/12")]
    assert revoke == [tcp(443, "10.0.0.0/8")]
    assert plan_rules(desired, reversed(desired)) == ([], [])


def test_descriptions_never_take_part_in_comparisons() -> None:
    assert IngressRule("-1", -1, -1, source_group=SG, description="x") == IngressRule("-1", -1, -1, source_group=SG)
    assert plan_rules([tcp(80, "0.0.0.0/0")], [IngressRule("tcp", 80, 80, "0.0.0.0/0", description="y")]) == ([], [])


def test_permissions_round_trip_groups_by_protocol_and_ports() -> None:
    rules = [
        tcp(80, "10.0.0.0/8"),
        tcp(80, "2001:db8::/32"),
        IngressRule("icmp", 3, 4, cidr="10.0.0.0/8"),
        m.node_rule(SG, LB, "uid-1"),
    ]
    perms = m.to_permissions(rules)
    assert {
        "IpProtocol": "-1",
        "UserIdGroupPairs": [{"GroupId": SG, "Description": m.node_rule_description(LB, "uid-1")}],
    } in perms
    web = {"IpProtocol": "tcp", "FromPort": 80, "ToPort": 80, "IpRanges": [{"CidrIp": "10.0.0.0/8"}]}
    assert {**web, "Ipv6Ranges": [{"CidrIpv6": "2001:db8::/32"}]} in perms
    assert len(perms) == 3
    back = m.rules_from_permissions(perms)
    assert set(back) == set(rules)
    assert [r.description for r in back if r.source_group] == [m.node_rule_description(LB, "uid-1")]
    assert "Description" not in str(m.to_permissions(rules, descriptions=False))


def test_permissions_from_aws_normalise_numbers_ports_and_keep_prefix_lists() -> None:
    perms = [
        {"IpProtocol": "6", "FromPort": 80, "ToPort": 80, "IpRanges": [{"CidrIp": "10.1.2.3/8"}]},
        {"IpProtocol": "-1", "FromPort": 0, "ToPort": 65535, "UserIdGroupPairs": [{"GroupId": SG, "UserId": "1"}]},
        {"IpProtocol": "tcp", "FromPort": 1, "ToPort": 2, "PrefixListIds": [{"PrefixListId": "pl-1"}]},
    ]
    assert m.rules_from_permissions(perms) == [
        tcp(80, "10.0.0.0/8"),
        IngressRule("-1", -1, -1, source_group=SG),
        IngressRule("tcp", 1, 2, prefix_list="pl-1"),
    ]
    assert m.to_permissions([IngressRule("tcp", 1, 2, prefix_list="pl-1")]) == [perms[2]]  # and back


def test_node_rule_description_names_the_lb() -> None:
    assert m.lb_named_by(m.node_rule_description(LB, "1234-abcd")) == LB
    assert m.lb_named_by(m.node_rule_description(LB)) == LB
    assert m.lb_named_by("") is None
    assert m.lb_named_by("kubernetes node access") is None


def test_node_access_one_rule_present_whatever_its_description() -> None:
    nodes = {"sg-node"}
    assert m.plan_node_access([], SG, LB, "u", nodes) == ([m.node_rule(SG, LB, "u")], [])
    upstream = IngressRule("-1", -1, -1, source_group=SG)  # cloud-provider-aws's rule, no description
    assert m.plan_node_access([upstream], SG, LB, "u", nodes) == ([], [])
    shared = m.node_rule(SG, OTHER_LB, "other")
    assert m.plan_node_access([shared], SG, LB, "u", nodes) == ([], [])


def test_node_access_retires_this_lbs_rule_from_an_old_source_only() -> None:
    old = m.node_rule("sg-old", LB, "u")
    foreign = m.node_rule("sg-x", OTHER_LB, "v")
    self_ref = IngressRule("-1", -1, -1, source_group="sg-node", description=m.node_rule_description(LB))
    authorize, retire = m.plan_node_access([old, foreign, self_ref], SG, LB, "u", {"sg-node"})
    assert authorize == [m.node_rule(SG, LB, "u")]
    assert retire == [old]


def test_node_access_never_references_a_node_group_itself() -> None:
    assert m.plan_node_access([], "sg-node", LB, "u", {"sg-node"}) == ([], [])


def test_rules_for_lb_by_name_or_managed_group() -> None:
    named = m.node_rule("sg-byo", LB, "u")
    from_managed = IngressRule("-1", -1, -1, source_group="sg-managed")  # adopted upstream rule, no description
    other = m.node_rule("sg-other", OTHER_LB, "v")
    rules = [named, from_managed, other]
    assert m.rules_for_lb(rules, LB, "sg-managed", {"sg-node"}) == [named, from_managed]
    assert m.rules_for_lb(rules, LB, None, {"sg-node"}) == [named]


def test_stale_rules_are_ours_for_lbs_that_are_gone() -> None:
    mine = m.node_rule("sg-1", LB, "u")
    gone = m.node_rule("sg-2", OTHER_LB, "v")
    unlabelled = IngressRule("tcp", 22, 22, cidr="10.0.0.0/8", description="ssh")
    assert m.stale_node_rules([mine, gone, unlabelled], {LB}) == [gone]
    assert m.stale_node_rules([mine, gone, unlabelled], {LB, OTHER_LB}) == []


def test_retire_hands_a_shared_group_rule_to_another_of_our_lbs() -> None:
    shared = m.node_rule("sg-byo", LB, "u")
    alone = m.node_rule("sg-managed", LB, "u")
    enis = [
        {"Description": f"ELB net/{LB}/0123456789abcdef", "Groups": [{"GroupId": "sg-byo"}, {"GroupId": "sg-managed"}]},
        {"Description": f"ELB {OTHER_LB}", "Groups": [{"GroupId": "sg-byo"}]},  # a CLB
        {"Description": "ELB net/someone-elses/0123", "Groups": [{"GroupId": "sg-managed"}]},
        {"Description": "Primary network interface", "Groups": [{"GroupId": "sg-managed"}]},
    ]
    users = m.lb_names_of_enis(enis)
    assert users == {"sg-byo": {LB, OTHER_LB}, "sg-managed": {LB, "someone-elses"}}
    revoke, relabel = m.plan_retire([shared, alone], {LB}, users)
    assert revoke == [alone]  # only foreign LBs besides the retiring one: revoked
    assert relabel == [shared]
    assert m.lb_named_by(relabel[0].description) == OTHER_LB


def test_lb_groups_are_not_node_groups() -> None:
    assert m.is_lb_group({"GroupName": f"k8s-elb-{LB}", "Tags": []})
    assert m.is_lb_group({"GroupName": "x", "Tags": [{"Key": "kubernetes.io/service-name", "Value": "a/b"}]})
    assert not m.is_lb_group({"GroupName": "nodes", "Tags": [{"Key": "kubernetes.io/cluster/c", "Value": "owned"}]})


def test_choose_node_groups_like_upstream() -> None:
    tagged = {"sg-a", "sg-b"}
    instances = [["sg-a", "sg-untagged"], ["sg-b"], ["sg-lonely"], ["sg-x", "sg-y"], []]
    assert m.choose_node_groups(tagged, instances) == ("sg-a", "sg-b", "sg-lonely")
    with pytest.raises(m.NodeSecurityGroupError, match="sg-a, sg-b"):
        m.choose_node_groups(tagged, [["sg-a", "sg-b"]])


def test_tagged_rule_ids_picks_only_ingress_rules_carrying_the_cluster_tag() -> None:
    tag = "kubernetes.io/cluster/c"
    ours, theirs = {"Key": tag, "Value": "owned"}, {"Key": "kubernetes.io/cluster/other", "Value": "owned"}
    described = [
        {"SecurityGroupRuleId": "sgr-a", "IsEgress": False, "IpProtocol": "-1", "FromPort": -1, "ToPort": -1,
         "ReferencedGroupInfo": {"GroupId": "sg-lb1"}, "Tags": [ours]},
        {"SecurityGroupRuleId": "sgr-b", "IsEgress": False, "IpProtocol": "-1", "FromPort": -1, "ToPort": -1,
         "ReferencedGroupInfo": {"GroupId": "sg-lb2"}, "Tags": [theirs]},
        {"SecurityGroupRuleId": "sgr-c", "IsEgress": True, "IpProtocol": "-1", "FromPort": -1, "ToPort": -1,
         "ReferencedGroupInfo": {"GroupId": "sg-lb3"}, "Tags": [ours]},
        {"SecurityGroupRuleId": "sgr-d", "IsEgress": False, "IpProtocol": "6", "FromPort": 80, "ToPort": 80,
         "CidrIpv4": "10.0.0.0/8", "Tags": [ours]},
    ]  # fmt: skip
    wanted = [
        m.node_rule("sg-lb1", "lb1", "u1"),
        m.node_rule("sg-lb2", "lb2", "u2"),  # tagged for another cluster: not ours
        m.node_rule("sg-lb3", "lb3", "u3"),  # only an egress rule is tagged
        m.IngressRule("tcp", 80, 80, cidr="10.0.0.0/8"),
    ]
    ids, untagged = m.tagged_rule_ids(wanted, described, tag)
    assert ids == ["sgr-a", "sgr-d"]
    assert [r.source_group for r in untagged] == ["sg-lb2", "sg-lb3"]
    assert m.node_rule_tags(tag) == [{"ResourceType": "security-group-rule", "Tags": [ours]}]
