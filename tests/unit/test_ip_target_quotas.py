"""Issue 24 leftovers: the NLB-wide target quotas (per zone, per NLB, across all its `ip` groups) and the family of
an `ip` target group (ipv6 for an IPv6-primary Service on a dualstack NLB). Pure: no AWS."""

from __future__ import annotations

import ipaddress

import pytest

from ccm.aws import names
from ccm.aws import nlb_model as m
from ccm.aws.ip_targets import (
    TARGET_QUOTA_EXCEEDED,
    SubnetRange,
    TargetQuotas,
    nlb_warnings,
    plan_lb_ip_targets,
)
from ccm.aws.lbconfig import parse_load_balancer_config
from ccm.contracts.cloud import InvalidServiceConfig
from ccm.contracts.endpoints import IpTarget, ServicePortKey
from ccm.contracts.readiness_gates import TargetHealth
from tests.factories import service

HEALTHY = TargetHealth("healthy")
NETWORKS = (
    SubnetRange(ipaddress.ip_network("10.0.0.0/24"), "us-east-1a"),
    SubnetRange(ipaddress.ip_network("10.0.1.0/24"), "us-east-1b"),
)


def a(last: int, port: int = 8080) -> IpTarget:
    return IpTarget(f"10.0.0.{last}", port)  # zone us-east-1a


def b(last: int, port: int = 8080) -> IpTarget:
    return IpTarget(f"10.0.1.{last}", port)  # zone us-east-1b


def test_the_default_quotas_are_awss() -> None:
    assert TargetQuotas() == TargetQuotas(per_group=1000, per_zone=500, per_lb=3000)
    # Footnote 3: with cross-zone load balancing, 500 per NLB whatever its zones.
    assert TargetQuotas().for_lb(cross_zone=True).per_lb == 500
    assert TargetQuotas().for_lb(cross_zone=False).per_lb == 3000


def test_a_zone_full_across_groups_keeps_its_registered_targets_and_takes_new_ones_in_address_order() -> None:
    serving = {a(50): HEALTHY, a(51): HEALTHY, a(52): HEALTHY}
    groups = {
        "tg-80": (set(serving), serving),
        "tg-443": ({a(1), a(2), a(3), b(1), b(2)}, {}),
    }
    plans = plan_lb_ip_targets(groups, networks=NETWORKS, quotas=TargetQuotas(per_zone=4))
    assert plans["tg-80"].deregister == () and plans["tg-80"].register == ()
    # One place left in us-east-1a (the lowest address takes it); us-east-1b has room.
    assert plans["tg-443"].register == (a(1), b(1), b(2))
    assert plans["tg-443"].over_quota == (a(2), a(3))
    ((reason, message),) = plans["tg-443"].warnings()
    assert reason == TARGET_QUOTA_EXCEEDED and "10.0.0.2:8080, 10.0.0.3:8080" in message
    assert "at most 4 targets per Availability Zone" in message
    assert plans["tg-80"].warnings() == []


def test_a_target_in_two_groups_counts_twice_towards_the_nlb() -> None:
    # The same pods behind two listeners: 2 x 2 targets for a quota of 3 per NLB.
    pods = {a(1, 8080), a(2, 8080)}
    https = {a(1, 8443), a(2, 8443)}
    plans = plan_lb_ip_targets(
        {"tg-80": (pods, {}), "tg-443": (https, {})}, networks=NETWORKS, quotas=TargetQuotas(per_lb=3)
    )
    registered = plans["tg-80"].register + plans["tg-443"].register
    assert len(registered) == 3
    # Address order, then port: 10.0.0.2:8443 is the one left out.
    assert plans["tg-443"].over_quota == (a(2, 8443),) and plans["tg-80"].over_quota == ()
    assert "at most 3 targets in all" in plans["tg-443"].warnings()[0][1]
    # One Warning for the NLB, each endpoint left out named once, whatever the groups it misses.
    both = plan_lb_ip_targets({"tg-80": ({a(1), a(2)}, {}), "tg-81": ({a(1), a(2)}, {})}, quotas=TargetQuotas(per_lb=1))
    ((reason, message),) = nlb_warnings(both.values())
    assert reason == TARGET_QUOTA_EXCEEDED and message.startswith("2 endpoints not registered (10.0.0.1:8080, 10.0.0.2")


def test_registered_targets_of_any_group_come_before_new_ones_of_another() -> None:
    serving = {b(200): HEALTHY}
    plans = plan_lb_ip_targets(
        {"tg-a": ({a(1)}, {}), "tg-b": ({b(200)}, serving)}, networks=NETWORKS, quotas=TargetQuotas(per_lb=1)
    )
    assert plans["tg-b"].register == () and plans["tg-b"].deregister == ()
    assert plans["tg-a"].register == () and plans["tg-a"].over_quota == (a(1),)


def test_the_group_quota_still_holds_and_names_its_quota() -> None:
    plans = plan_lb_ip_targets({"tg": ({a(i) for i in range(1, 6)}, {})}, networks=NETWORKS, quotas=TargetQuotas(2))
    assert plans["tg"].register == (a(1), a(2)) and plans["tg"].over_quota == (a(3), a(4), a(5))
    assert "a target group holds at most 2 targets" in plans["tg"].warnings()[0][1]


def test_a_target_of_unknown_zone_counts_towards_the_nlb_only() -> None:
    plans = plan_lb_ip_targets({"tg": ({a(1), a(2), a(3)}, {})}, quotas=TargetQuotas(per_zone=1))
    assert plans["tg"].register == (a(1), a(2), a(3))


# -- the family of an `ip` target group ------------------------------------------------------------------------------
A = "service.beta.kubernetes.io/aws-load-balancer-"
IP_MODE = {A + "type": "nlb", A + "nlb-target-type": "ip"}
DUALSTACK = {**IP_MODE, A + "ip-address-type": "dualstack"}


def _desired(svc: dict) -> m.NLBSpec:
    return m.desired_nlb(svc, parse_load_balancer_config(svc, default_lb_type="nlb"), [], "c1", "vpc-1")


def test_an_ipv6_primary_service_on_a_dualstack_nlb_gets_an_ipv6_group_named_for_its_family() -> None:
    svc = service(annotations=DUALSTACK, ports=[(80, 30080)], ipFamilies=["IPv6", "IPv4"])
    (listener,) = _desired(svc).listeners
    assert listener.target_group.ip_address_type == "ipv6"
    ipv4 = _desired({**svc, "spec": {**svc["spec"], "ipFamilies": ["IPv4", "IPv6"]}})
    assert ipv4.listeners[0].target_group.ip_address_type == "ipv4"
    # An IPv4 group keeps the name it had before the family was modelled; the IPv6 one is another group.
    meta = svc["metadata"]
    before = names.target_group_name(meta["namespace"], meta["name"], meta["uid"], ("TCP", 80, "TCP", "vpc-1", "ip"))
    assert ipv4.listeners[0].target_group.name == before != listener.target_group.name


def test_a_family_change_replaces_the_group_as_a_target_type_switch_does() -> None:
    svc = service(annotations=DUALSTACK, ports=[(80, 30080)], ipFamilies=["IPv4"])
    old = m.with_ip_targets(_desired(svc), {ServicePortKey(80, "TCP"): frozenset({a(1)})})
    tg = old.listeners[0].target_group
    health_states = ((a(1).ip, 8080, "healthy", "", ""),)
    observed = m.ObservedNLB("lb", "dns", "internet-facing")
    observed.target_groups["tg-old"] = m.ObservedTargetGroup(
        "tg-old",
        tg.name,
        "TCP",
        80,
        tg.health,
        healthy=frozenset({a(1).ip}),
        target_type="ip",
        health_states=health_states,
    )
    observed.listeners.append(m.ObservedListener("l-80", 80, "TCP", "tg-old"))
    v6 = service(annotations=DUALSTACK, ports=[(80, 30080)], ipFamilies=["IPv6", "IPv4"], uid=svc["metadata"]["uid"])
    new = m.with_ip_targets(_desired(v6), {ServicePortKey(80, "TCP"): frozenset({IpTarget("2600:1f18::1", 8080)})})
    ops = m.plan(new, observed)
    created = [op for op in ops if isinstance(op, m.CreateTargetGroup)]
    assert [op.spec.ip_address_type for op in created] == ["ipv6"]
    assert any(isinstance(op, m.SyncIpTargets) for op in ops)
    # The old group serves healthy targets: the listener waits for the new one, and the old group stays.
    assert any(isinstance(op, m.AwaitHealthy) for op in ops)
    assert not any(isinstance(op, m.DeleteTargetGroup) for op in ops)


@pytest.mark.parametrize("families", [["IPv6"], ["IPv6", "IPv4"]])
def test_an_ipv6_primary_service_in_ip_mode_needs_a_dualstack_nlb(families: list[str]) -> None:
    with pytest.raises(InvalidServiceConfig, match="ip-address-type: dualstack"):
        parse_load_balancer_config(service(annotations=IP_MODE, ipFamilies=families), default_lb_type="nlb")
    # Instance targets are the nodes: the Service's family does not matter to them.
    parse_load_balancer_config(service(annotations={A + "type": "nlb"}, ipFamilies=families))
    parse_load_balancer_config(service(annotations=IP_MODE, ipFamilies=["IPv4", "IPv6"]))
