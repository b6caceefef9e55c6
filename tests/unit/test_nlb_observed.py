"""The NLB as AWS reports it, parsed by a pure function from plain describe answers (nlb_model.observed_from),
as the Classic ELB's is (clb_observed.observed_from_api): the driver reads, these parse, the plan decides."""

from __future__ import annotations

from typing import Any

from ccm.aws import nlb_model as m
from ccm.aws import nlb_observed as o
from ccm.aws.lbconfig import HealthCheck, parse_load_balancer_config
from ccm.aws.nlb_placement import placement_warnings
from tests.factories import node, service

LB = {"LoadBalancerArn": "arn:lb", "DNSName": "a1.elb.amazonaws.com", "Scheme": "internal", "Type": "network"}
TCP_HEALTH = {
    "HealthCheckProtocol": "TCP",
    "HealthCheckPort": "traffic-port",
    "HealthyThresholdCount": 3,
    "UnhealthyThresholdCount": 3,
    "HealthCheckIntervalSeconds": 30,
    "HealthCheckTimeoutSeconds": 10,
}


def _group(arn: str, name: str, port: int) -> dict[str, Any]:
    return {"TargetGroupArn": arn, "TargetGroupName": name, "Protocol": "TCP", "Port": port, **TCP_HEALTH}


def _forward(arn: str, port: int, tg: str, **extra: Any) -> dict[str, Any]:
    return {
        "ListenerArn": arn,
        "Port": port,
        "Protocol": extra.pop("Protocol", "TCP"),
        "DefaultActions": [{"Type": "forward", "TargetGroupArn": tg}],
        **extra,
    }


def test_describe_answers_are_parsed_into_the_observed_nlb():
    listeners = [
        _forward("arn:l80", 80, "arn:tg1"),
        _forward(
            "arn:l443",
            443,
            "arn:tg2",
            Protocol="TLS",
            Certificates=[{"CertificateArn": "arn:cert"}],
            SslPolicy="ELBSecurityPolicy-TLS13-1-2-2021-06",
        ),
        {"ListenerArn": "arn:l8080", "Port": 8080, "Protocol": "TCP", "DefaultActions": [{"Type": "fixed"}]},
    ]
    health = {
        "arn:tg1": [
            {"Target": {"Id": "i-1", "Port": 30080}, "TargetHealth": {"State": "healthy"}},
            {"Target": {"Id": "i-2", "Port": 30080}, "TargetHealth": {"State": "initial"}},
            {"Target": {"Id": "i-3", "Port": 30080}, "TargetHealth": {"State": "draining"}},
        ],
        "arn:tg2": [],
    }
    observed = o.observed_from(
        LB,
        listeners,
        [_group("arn:tg1", "k8s-tg1", 30080), _group("arn:tg2", "k8s-tg2", 30443)],
        attributes=[{"Key": "load_balancing.cross_zone.enabled", "Value": "true"}],
        target_health=health,
        target_group_attributes={"arn:tg2": [{"Key": "preserve_client_ip.enabled", "Value": "false"}]},
    )
    tcp = HealthCheck("TCP", "traffic-port", "", 3, 3, 30, 10)
    assert (observed.arn, observed.dns_name, observed.scheme) == ("arn:lb", "a1.elb.amazonaws.com", "internal")
    assert observed.attributes == {"load_balancing.cross_zone.enabled": "true"}
    assert observed.listeners == [
        m.ObservedListener("arn:l80", 80, "TCP", "arn:tg1"),
        m.ObservedListener("arn:l443", 443, "TLS", "arn:tg2", "arn:cert", "ELBSecurityPolicy-TLS13-1-2-2021-06"),
        m.ObservedListener("arn:l8080", 8080, "TCP", ""),  # forwards nowhere we know
    ]
    assert observed.target_groups == {
        # A draining target is leaving: not a target; only healthy ones count as healthy.
        "arn:tg1": m.ObservedTargetGroup(
            "arn:tg1", "k8s-tg1", "TCP", 30080, tcp, frozenset({"i-1", "i-2"}), None, frozenset({"i-1"})
        ),
        "arn:tg2": m.ObservedTargetGroup(
            "arn:tg2", "k8s-tg2", "TCP", 30443, tcp, frozenset(), {"preserve_client_ip.enabled": "false"}
        ),
    }


def test_an_answer_not_read_is_none_and_a_new_nlb_reads_as_the_aws_defaults():
    observed = o.observed_from(LB, [], [_group("arn:tg1", "k8s-tg1", 30080)])
    assert observed.attributes is None  # the plan leaves LB attributes alone
    assert observed.target_groups["arn:tg1"].attributes is None  # and the group's
    assert observed.target_groups["arn:tg1"].targets == frozenset()
    created = o.observed_from(LB, [], [], attributes=o.CREATED_LB_ATTRIBUTES)
    assert created.attributes == m.AWS_DEFAULT_LB_ATTRIBUTES


def test_an_nlb_reported_exactly_as_desired_plans_nothing():
    """read -> parse -> plan: describe answers of a converged NLB, parsed, plan no operation."""
    svc = service(ports=[(80, 30080), (443, 30443)])
    config = parse_load_balancer_config(svc, default_lb_type="nlb")
    want = m.desired_nlb(svc, config, [node("n1", "i-1"), node("n2", "i-2")], "c1", "vpc-1")
    groups, listeners, health = [], [], {}
    for i, ls in enumerate(want.listeners):
        tg = ls.target_group
        arn = f"arn:tg{i}"
        groups.append({**_group(arn, tg.name, tg.port), **o.health_kwargs(tg.health)})
        listeners.append(_forward(f"arn:l{i}", ls.port, arn))
        health[arn] = [{"Target": {"Id": t}, "TargetHealth": {"State": "healthy"}} for t in sorted(tg.targets)]
    lb = {**LB, "Scheme": "internet-facing"}
    attributes = [{"Key": k, "Value": v} for k, v in want.attributes]
    observed = o.observed_from(lb, listeners, groups, attributes=attributes, target_health=health)
    assert m.plan(want, observed) == []
    assert placement_warnings(lb, config, None) == []
