"""The pure registration plan of an `ip` target group (ccm.aws.ip_targets.plan_ip_targets)."""

from __future__ import annotations

import ipaddress

from ccm.aws.ip_targets import (
    REFUSED_IP_TARGETS,
    TARGET_QUOTA_EXCEEDED,
    IpTargetPlan,
    SubnetRange,
    plan_ip_targets,
    refusal_reason,
    subnet_networks,
)
from ccm.contracts.endpoints import IpTarget
from ccm.contracts.readiness_gates import TargetHealth

HEALTHY = TargetHealth("healthy")
SUBNETS = [
    {"CidrBlock": "10.0.0.0/24", "AvailabilityZone": "us-east-1a", "Ipv6CidrBlockAssociationSet": []},
    {
        "CidrBlock": "10.0.1.0/24",
        "AvailabilityZone": "us-east-1b",
        "Ipv6CidrBlockAssociationSet": [
            {"Ipv6CidrBlock": "2600:1f18:1::/64", "Ipv6CidrBlockState": {"State": "associated"}},
            {"Ipv6CidrBlock": "2600:1f18:2::/64", "Ipv6CidrBlockState": {"State": "disassociated"}},
        ],
    },
]
NETWORKS = subnet_networks(SUBNETS)


def t(last: int, port: int = 8080, net: str = "10.0.0") -> IpTarget:
    return IpTarget(f"{net}.{last}", port)


def test_subnet_ranges_are_the_ipv4_cidrs_and_the_associated_ipv6_blocks_with_their_zone() -> None:
    assert (
        SubnetRange(ipaddress.ip_network("10.0.0.0/24"), "us-east-1a"),
        SubnetRange(ipaddress.ip_network("10.0.1.0/24"), "us-east-1b"),
        SubnetRange(ipaddress.ip_network("2600:1f18:1::/64"), "us-east-1b"),
    ) == NETWORKS


def test_unchanged_sets_plan_no_call() -> None:
    observed = {t(i): HEALTHY for i in range(10, 20)}
    plan = plan_ip_targets(set(observed), observed, networks=NETWORKS)
    assert plan.empty and plan.calls() == [] and plan.warnings() == []


def test_deregistrations_come_first_then_registrations_200_a_call() -> None:
    observed = {IpTarget(f"10.0.1.{i}", 8080): HEALTHY for i in range(1, 251)}
    desired = {IpTarget(f"10.0.0.{i}", 8080) for i in range(1, 251)}
    plan = plan_ip_targets(desired, observed, networks=NETWORKS)
    assert [(verb, len(chunk)) for verb, chunk in plan.calls()] == [
        ("deregister", 200),
        ("deregister", 50),
        ("register", 200),
        ("register", 50),
    ]
    assert plan.register[:3] == (t(1), t(2), t(3))  # numeric order, deterministic


def test_a_draining_target_wanted_again_is_registered_again_and_never_deregistered_twice() -> None:
    observed = {
        t(10): TargetHealth("draining", "Target.DeregistrationInProgress", "Target deregistration is in progress"),
        t(11): TargetHealth("draining", "Target.DeregistrationInProgress"),
        t(12): TargetHealth("initial", "Elb.InitialHealthChecking"),
    }
    plan = plan_ip_targets({t(10), t(12)}, observed, networks=NETWORKS)
    assert plan == IpTargetPlan(deregister=(), register=(t(10),))


def test_the_same_ip_on_another_port_is_another_target() -> None:
    plan = plan_ip_targets({t(10, 9000)}, {t(10, 8080): HEALTHY}, networks=NETWORKS)
    assert plan.deregister == (t(10, 8080),) and plan.register == (t(10, 9000),)


def test_addresses_outside_the_vpcs_subnets_are_refused_and_the_rest_registered() -> None:
    desired = {
        t(10),
        t(5, net="10.0.2"),
        t(7, net="192.168.0"),
        IpTarget("2600:1f18:1::7", 80),
        IpTarget("2600:1f18:2::7", 80),
    }
    plan = plan_ip_targets(desired, {}, networks=NETWORKS)
    assert plan.register == (t(10), IpTarget("2600:1f18:1::7", 80))
    assert [(r.target.ip, r.reason) for r in plan.refused] == [
        ("10.0.2.5", "not in a subnet of the load balancer's VPC"),  # in the VPC's CIDR maybe, but no subnet: #3714
        ("192.168.0.7", "not in a subnet of the load balancer's VPC"),
        ("2600:1f18:2::7", "not in a subnet of the load balancer's VPC"),  # a disassociated block
    ]
    ((reason, message),) = plan.warnings()
    assert reason == REFUSED_IP_TARGETS and "10.0.2.5:8080 (not in a subnet" in message
    malformed = plan_ip_targets({IpTarget("pod-a", 80), t(10)}, {}, networks=NETWORKS)
    assert malformed.register == (t(10),) and malformed.refused[0].reason == "not an IP address"
    assert refusal_reason(IpTarget("10.0.0.1", 0), NETWORKS) == "port out of range"


def test_without_networks_nothing_is_refused() -> None:
    assert plan_ip_targets({t(7, net="192.168.0")}, {}).register == (t(7, net="192.168.0"),)


def test_over_the_quota_registered_targets_stay_and_the_first_new_ones_in_order_join() -> None:
    observed = {t(200): HEALTHY, t(201): HEALTHY}
    desired = {t(i) for i in range(1, 6)} | set(observed)
    plan = plan_ip_targets(desired, observed, networks=NETWORKS, quota=4)
    assert plan.deregister == () and plan.register == (t(1), t(2))
    assert plan.over_quota == (t(3), t(4), t(5))
    ((reason, message),) = plan.warnings()
    assert reason == TARGET_QUOTA_EXCEEDED and message.startswith("3 endpoints not registered (10.0.0.3:8080, ")
    assert "at most 4 targets ('Targets per Target Group per Region')" in message


def test_quota_holds_for_a_first_registration_of_more_than_1000() -> None:
    desired = {IpTarget(f"10.0.{i // 250}.{i % 250 + 1}", 8080) for i in range(1005)}
    plan = plan_ip_targets(desired, {}, networks=[ipaddress.ip_network("10.0.0.0/16")])
    assert len(plan.register) == 1000 and len(plan.over_quota) == 5
    assert plan.over_quota[-1] == IpTarget("10.0.4.5", 8080)
    assert [len(chunk) for _, chunk in plan.calls()] == [200] * 5
