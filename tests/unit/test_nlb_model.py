import pytest

from ccm.aws import nlb_model as m
from ccm.aws.subnets import choose_subnets
from ccm.contracts import InvalidServiceConfig
from tests.factories import node, service

NODES = [node("n1", "i-1"), node("n2", "i-2"), node("n3", "i-3"), node("n4")]


def observed_from(desired: m.NLBSpec) -> m.ObservedNLB:
    """What AWS would report after applying `desired` exactly."""
    obs = m.ObservedNLB("lb-arn", "dns", desired.scheme)
    for i, ls in enumerate(desired.listeners):
        tg = ls.target_group
        obs.target_groups[f"tg{i}"] = m.ObservedTargetGroup(
            f"tg{i}", tg.name, tg.protocol, tg.port, tg.health, tg.targets
        )
        obs.listeners.append(m.ObservedListener(f"l{i}", ls.port, ls.protocol, f"tg{i}"))
    return obs


def test_desired_nlb_for_a_plain_service():
    svc = service()
    desired = m.desired_nlb(svc, NODES, "c1", "vpc-1")
    assert desired.name == ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]
    assert desired.scheme == "internet-facing"
    assert [(ls.port, ls.protocol, ls.target_group.port) for ls in desired.listeners] == [
        (80, "TCP", 30080),
        (443, "TCP", 30443),
    ]
    tg = desired.listeners[0].target_group
    assert tg.targets == {"i-1", "i-2", "i-3"}  # the node without providerID cannot be a target
    assert tg.health == m.HealthCheck("TCP", "traffic-port", "", 3, 3, 30, 10)
    assert len(tg.name) <= 32 and tg.name.startswith("k8s-default-web-")
    assert desired.tags["kubernetes.io/cluster/c1"] == "owned"
    assert desired.tags["kubernetes.io/service-name"] == "default/web"


def test_local_policy_uses_http_healthz_on_health_check_node_port():
    svc = service(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    hc = m.desired_nlb(svc, NODES, "c1", "vpc-1").listeners[0].target_group.health
    assert (hc.protocol, hc.port, hc.path) == ("HTTP", "31999", "/healthz")


def test_internal_annotation():
    ann = "service.beta.kubernetes.io/aws-load-balancer-internal"
    assert m.scheme_of(service(annotations={ann: "true"})) == "internal"
    assert m.scheme_of(service(annotations={ann: "0.0.0.0/0"})) == "internal"
    assert m.scheme_of(service(annotations={ann: "false"})) == "internet-facing"


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda s: s["spec"]["ports"][0].update(protocol="SCTP"), "not supported"),
        (lambda s: s["spec"]["ports"][1].update(port=80), "twice"),
        (lambda s: s["spec"]["ports"][0].pop("nodePort"), "nodePort"),
        (lambda s: s["spec"].update(ports=[]), "at least one port"),
    ],
)
def test_invalid_services_are_refused(mutate, match):
    svc = service()
    mutate(svc)
    with pytest.raises(InvalidServiceConfig, match=match):
        m.desired_nlb(svc, NODES, "c1", "vpc-1")


def test_fresh_lb_plan_creates_groups_registers_then_listeners():
    desired = m.desired_nlb(service(), NODES, "c1", "vpc-1")
    ops = m.plan(desired, m.ObservedNLB("lb", "dns", "internet-facing"))
    assert [type(o).__name__ for o in ops] == [
        "CreateTargetGroup",
        "RegisterTargets",
        "CreateTargetGroup",
        "RegisterTargets",
        "CreateListener",
        "CreateListener",
    ]


def test_converged_lb_plans_nothing():
    desired = m.desired_nlb(service(), NODES, "c1", "vpc-1")
    assert m.plan(desired, observed_from(desired)) == []


def test_node_change_only_touches_targets():
    svc = service()
    desired = m.desired_nlb(svc, NODES, "c1", "vpc-1")
    observed = observed_from(desired)
    grown = m.desired_nlb(svc, [*NODES, node("n5", "i-5")], "c1", "vpc-1")
    ops = m.plan(grown, observed)
    assert ops == [
        m.RegisterTargets(grown.listeners[0].target_group.name, 30080, ("i-5",)),
        m.RegisterTargets(grown.listeners[1].target_group.name, 30443, ("i-5",)),
    ]
    shrunk = m.desired_nlb(svc, NODES[:2], "c1", "vpc-1")
    assert [type(o).__name__ for o in m.plan(shrunk, observed)] == ["DeregisterTargets", "DeregisterTargets"]


def test_port_change_replaces_listener_and_group_in_safe_order():
    svc = service()
    observed = observed_from(m.desired_nlb(svc, NODES, "c1", "vpc-1"))
    svc["spec"]["ports"] = [
        {"protocol": "TCP", "port": 80, "nodePort": 30080},
        {"protocol": "TCP", "port": 8443, "nodePort": 31443},
    ]
    ops = m.plan(m.desired_nlb(svc, NODES, "c1", "vpc-1"), observed)
    assert [type(o).__name__ for o in ops] == [
        "CreateTargetGroup",
        "RegisterTargets",
        "CreateListener",
        "DeleteListener",
        "DeleteTargetGroup",
    ]
    assert ops[3] == m.DeleteListener("l1") and ops[4] == m.DeleteTargetGroup("tg1")


def test_policy_flip_switches_listener_to_a_new_group_before_deleting_the_old():
    svc = service(ports=[(80, 30080)])
    observed = observed_from(m.desired_nlb(svc, NODES, "c1", "vpc-1"))
    svc["spec"].update(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    ops = m.plan(m.desired_nlb(svc, NODES, "c1", "vpc-1"), observed)
    assert [type(o).__name__ for o in ops] == [
        "CreateTargetGroup",
        "RegisterTargets",
        "ModifyListener",
        "DeleteTargetGroup",
    ]


def test_orphan_groups_are_reused_or_deleted():
    svc = service(ports=[(80, 30080)])
    desired = m.desired_nlb(svc, NODES, "c1", "vpc-1")
    tg = desired.listeners[0].target_group
    observed = m.ObservedNLB("lb", "dns", "internet-facing")
    observed.target_groups["orphan-same"] = m.ObservedTargetGroup("orphan-same", tg.name, "TCP", 30080, tg.health)
    observed.target_groups["orphan-old"] = m.ObservedTargetGroup("orphan-old", "k8s-old", "TCP", 30001, tg.health)
    ops = m.plan(desired, observed)
    assert [type(o).__name__ for o in ops] == ["RegisterTargets", "CreateListener", "DeleteTargetGroup"]
    assert ops[-1] == m.DeleteTargetGroup("orphan-old")


def subnet(sid, az, **tags):
    return {"SubnetId": sid, "AvailabilityZone": az, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def test_subnet_discovery_one_per_az_prefers_role_then_cluster_tag_then_lowest_id():
    subnets = [
        subnet("subnet-b", "az1"),
        subnet("subnet-a", "az1"),
        subnet("subnet-c", "az2", **{"kubernetes.io/cluster/c1": "shared"}),
        subnet("subnet-d", "az2", **{"kubernetes.io/role/elb": "1"}),
        subnet("subnet-e", "az3", **{"kubernetes.io/cluster/other": "owned"}),
        subnet("subnet-f", "az4"),  # private
    ]
    tables = [
        {"Associations": [{"Main": True}], "Routes": [{"GatewayId": "igw-1"}]},
        {"Associations": [{"SubnetId": "subnet-f"}], "Routes": [{"GatewayId": "local"}]},
    ]
    assert choose_subnets(subnets, tables, "c1", internal=False) == ["subnet-a", "subnet-d"]
    assert choose_subnets(subnets, tables, "c1", internal=True) == ["subnet-a", "subnet-c", "subnet-f"]
