"""The node rules of an NLB without security groups (ccm.aws.nlb_node_rules_model), pure: client rules on the target
ports (NodePorts, or the pods' ports for `ip` targets) from the client ranges, or from the NLB's subnets when the
target does not see the client; health checks from the NLB's subnets; path-MTU ICMP from the client ranges."""

from __future__ import annotations

from typing import Any

from ccm.aws import nlb_model as m
from ccm.aws import nlb_node_rules_model as nm
from ccm.aws import security_groups_model as sgm
from ccm.aws.lbconfig import parse_load_balancer_config
from ccm.aws.security_groups_model import IngressRule as R
from ccm.contracts.endpoints import IpTarget, ServicePortKey
from tests.factories import node, service

P = "service.beta.kubernetes.io/aws-load-balancer-"
NLB = {P + "type": "nlb"}
IP = {**NLB, P + "nlb-target-type": "ip"}
SUBNETS = ["10.0.1.0/24", "10.0.2.0/24"]
VPC = ["10.0.0.0/16", "2600:1f18::/56"]


def spec_and_clients(svc: dict[str, Any], vpc: list[str] = VPC) -> tuple[m.NLBSpec, tuple[str, ...]]:
    config = parse_load_balancer_config(svc, default_lb_type="nlb")
    spec = m.desired_nlb(svc, config, [node("n1", "i-1")], "c1", "vpc-1")
    clients = nm.client_ranges(config.source_range_cidrs, config.internal, config.ip_address_type == "dualstack", vpc)
    return spec, clients


def rules(svc: dict[str, Any], pods: dict[ServicePortKey, frozenset[IpTarget]] | None = None) -> set[tuple]:
    spec, clients = spec_and_clients(svc)
    if pods is not None:
        spec = m.with_ip_targets(spec, pods)
    found = nm.desired_node_rules(spec, clients, SUBNETS)
    assert all(sgm.lb_named_by(r.description) == spec.name for r in found)  # the delete and the sweeper find them
    return {(r.protocol, r.from_port, r.cidr, r.description.rsplit("(", 1)[1].rstrip(")")) for r in found}


def test_instance_targets_open_the_node_ports_to_everyone_with_mtu():
    # Health checks on the traffic port are admitted by the 0.0.0.0/0 client rule (upstream adds none then).
    assert rules(service(ports=[(80, 30080)], annotations=NLB)) == {
        ("tcp", 30080, "0.0.0.0/0", "nlb client"),
        ("icmp", 3, "0.0.0.0/0", "nlb mtu"),
    }


def test_source_ranges_add_the_health_rule_from_the_nlb_subnets():
    svc = service(ports=[(80, 30080)], annotations=NLB, loadBalancerSourceRanges=["203.0.113.0/24"])
    assert rules(svc) == {
        ("tcp", 30080, "203.0.113.0/24", "nlb client"),
        ("icmp", 3, "203.0.113.0/24", "nlb mtu"),
        ("tcp", 30080, "10.0.1.0/24", "nlb health"),
        ("tcp", 30080, "10.0.2.0/24", "nlb health"),
    }


def test_local_health_checks_the_health_check_node_port_from_the_subnets():
    svc = service(ports=[(80, 30080)], annotations=NLB, externalTrafficPolicy="Local", healthCheckNodePort=32000)
    assert {r for r in rules(svc) if r[3] == "nlb health"} == {
        ("tcp", 32000, "10.0.1.0/24", "nlb health"),
        ("tcp", 32000, "10.0.2.0/24", "nlb health"),
    }


def test_internal_nlb_open_to_all_takes_the_vpc_blocks_as_clients():
    svc = service(ports=[(80, 30080)], annotations={**NLB, P + "internal": "true"})
    assert rules(svc) == {
        ("tcp", 30080, "10.0.0.0/16", "nlb client"),
        ("icmp", 3, "10.0.0.0/16", "nlb mtu"),
        ("tcp", 30080, "10.0.1.0/24", "nlb health"),
        ("tcp", 30080, "10.0.2.0/24", "nlb health"),
    }


def test_ipv6_ranges_only_on_a_dualstack_nlb():
    ranges = ["203.0.113.0/24", "2001:db8::/32"]
    v4 = service(ports=[(80, 30080)], annotations=NLB, loadBalancerSourceRanges=ranges)
    assert not any(r[2] == "2001:db8::/32" for r in rules(v4))
    dual = service(ports=[(80, 30080)], annotations={**NLB, P + "ip-address-type": "dualstack"})
    dual["spec"]["loadBalancerSourceRanges"] = ranges
    assert {r for r in rules(dual) if r[2] == "2001:db8::/32"} == {
        ("tcp", 30080, "2001:db8::/32", "nlb client"),
        ("icmpv6", 2, "2001:db8::/32", "nlb mtu"),
    }


def test_ip_targets_open_the_pod_ports_from_the_nlb_subnets():
    """TCP ip targets do not see the client by default (preserve_client_ip off): the NLB's private addresses are the
    source of traffic and health checks alike, and no MTU rule (clients do not reach the pod)."""
    pods = {ServicePortKey(80, "TCP"): frozenset({IpTarget("10.0.1.5", 8080), IpTarget("10.0.2.7", 9090)})}
    assert rules(service(ports=[(80, 30080)], annotations=IP), pods) == {
        (p, port, c, "nlb client") for p in ("tcp",) for port in (8080, 9090) for c in SUBNETS
    }


def test_ip_targets_preserving_the_client_ip_open_to_the_clients():
    annotations = {**IP, P + "target-group-attributes": "preserve_client_ip.enabled=true"}
    svc = service(ports=[(80, 30080)], annotations=annotations, loadBalancerSourceRanges=["203.0.113.0/24"])
    pods = {ServicePortKey(80, "TCP"): frozenset({IpTarget("10.0.1.5", 8080)})}
    assert rules(svc, pods) == {
        ("tcp", 8080, "203.0.113.0/24", "nlb client"),
        ("icmp", 3, "203.0.113.0/24", "nlb mtu"),
        ("tcp", 8080, "10.0.1.0/24", "nlb health"),
        ("tcp", 8080, "10.0.2.0/24", "nlb health"),
    }


def test_ip_targets_without_endpoints_open_nothing_but_an_explicit_health_port():
    assert rules(service(ports=[(80, 30080)], annotations=IP), {}) == set()
    svc = service(ports=[(80, 30080)], annotations={**IP, P + "healthcheck-port": "10254"})
    assert rules(svc, {}) == {("tcp", 10254, c, "nlb health") for c in SUBNETS}


def test_udp_targets_always_see_the_client():
    svc = service(ports=[], annotations=IP)
    svc["spec"]["ports"] = [{"name": "dns", "protocol": "UDP", "port": 53, "nodePort": 30053}]
    pods = {ServicePortKey(53, "UDP"): frozenset({IpTarget("10.0.1.5", 5353)})}
    assert rules(svc, pods) == {
        ("udp", 5353, "0.0.0.0/0", "nlb client"),
        ("icmp", 3, "0.0.0.0/0", "nlb mtu"),
        ("tcp", 5353, "10.0.1.0/24", "nlb health"),
        ("tcp", 5353, "10.0.2.0/24", "nlb health"),
    }


def test_plan_keeps_present_rules_whatever_their_description_and_revokes_only_its_own():
    lb = "a" + "0" * 31
    other = "a" + "1" * 31
    want = {R("tcp", 30080, 30080, cidr="0.0.0.0/0", description=nm.rule_description(lb, "client"))}
    current = [
        R("tcp", 30080, 30080, cidr="0.0.0.0/0", description="kubernetes.io/rule/nlb/client=" + lb),  # upstream's
        R("tcp", 30081, 30081, cidr="0.0.0.0/0", description=nm.rule_description(lb, "client")),  # a port gone
        R("tcp", 30082, 30082, cidr="0.0.0.0/0", description=nm.rule_description(other, "client")),  # another LB's
        R("-1", -1, -1, source_group="sg-1", description=sgm.node_rule_description(lb)),  # not a CIDR rule
    ]
    authorize, revoke = nm.plan_node_rules(current, want, lb)
    assert authorize == []
    assert revoke == [R("tcp", 30081, 30081, cidr="0.0.0.0/0")]
    assert nm.plan_node_rules([], want, lb) == (sorted(want, key=sgm.sort_key), [])
