import pytest

from ccm.aws import nlb_model as m
from ccm.aws.subnets import choose_subnets
from ccm.contracts import InvalidServiceConfig
from ccm.service.annotations import parse_load_balancer_config
from tests.factories import node, service

NODES = [node("n1", "i-1"), node("n2", "i-2"), node("n3", "i-3"), node("n4")]


def desired(svc, nodes=NODES):
    return m.desired_nlb(svc, parse_load_balancer_config(svc, default_lb_type="nlb"), nodes, "c1", "vpc-1")


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
    want = desired(svc)
    assert want.name == ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]
    assert want.scheme == "internet-facing"
    assert [(ls.port, ls.protocol, ls.target_group.port) for ls in want.listeners] == [
        (80, "TCP", 30080),
        (443, "TCP", 30443),
    ]
    tg = want.listeners[0].target_group
    assert tg.targets == {"i-1", "i-2", "i-3"}  # the node without providerID cannot be a target
    assert tg.health == m.HealthCheck("TCP", "traffic-port", "", 3, 3, 30, 10)
    assert len(tg.name) <= 32 and tg.name.startswith("k8s-default-web-")
    assert want.tags["kubernetes.io/cluster/c1"] == "owned"
    assert want.tags["kubernetes.io/service-name"] == "default/web"


def test_local_policy_uses_http_healthz_on_health_check_node_port():
    svc = service(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    hc = desired(svc).listeners[0].target_group.health
    assert (hc.protocol, hc.port, hc.path) == ("HTTP", "31999", "/healthz")


def test_internal_annotation():
    ann = "service.beta.kubernetes.io/aws-load-balancer-internal"
    assert desired(service(annotations={ann: "true"})).scheme == "internal"
    assert desired(service(annotations={ann: "0.0.0.0/0"})).scheme == "internal"
    assert desired(service(annotations={ann: "false"})).scheme == "internet-facing"


def test_tls_listener_and_tcp_udp():
    cert = "arn:aws:acm:us-east-1:123456789012:certificate/0f0e0d0c-0b0a-0908-0706-050403020100"
    svc = service(
        annotations={
            "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": cert,
            "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": "443",
        }
    )
    listeners = {ls.port: ls for ls in desired(svc).listeners}
    assert (listeners[443].protocol, listeners[443].certificate) == ("TLS", cert)
    assert (listeners[80].protocol, listeners[80].certificate) == ("TCP", "")
    both = service(ports=[(53, 30053)])
    both["spec"]["ports"].append({"name": "dns-udp", "protocol": "UDP", "port": 53, "nodePort": 30053})
    [only] = desired(both).listeners
    assert (only.protocol, only.target_group.protocol) == ("TCP_UDP", "TCP_UDP")


def test_attributes_are_planned_only_when_they_differ():
    svc = service(
        ports=[(80, 30080)],
        annotations={
            "service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled": "true",
            "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol": "*",
        },
    )
    want = desired(svc)
    observed = observed_from(want)
    observed.attributes = {"load_balancing.cross_zone.enabled": "false"}
    tg = next(iter(observed.target_groups.values()))
    observed.target_groups[tg.arn] = m.ObservedTargetGroup(
        tg.arn, tg.name, tg.protocol, tg.port, tg.health, tg.targets, {"proxy_protocol_v2.enabled": "false"}
    )
    ops = m.plan(want, observed)
    assert [type(o).__name__ for o in ops] == ["SetTargetGroupAttributes", "SetLoadBalancerAttributes"]
    converged = observed_from(want)
    converged.attributes = dict(want.attributes)
    assert m.plan(want, converged) == []


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda s: s["spec"]["ports"][0].update(protocol="SCTP"), "SCTP"),
        (lambda s: s["spec"]["ports"][1].update(port=80), "80"),
        (lambda s: s["spec"]["ports"][0].pop("nodePort"), "nodePort"),
        (lambda s: s["spec"].update(ports=[]), "port"),
    ],
)
def test_invalid_services_are_refused(mutate, match):
    svc = service()
    mutate(svc)
    with pytest.raises(InvalidServiceConfig, match=match):
        desired(svc)


def test_fresh_lb_plan_creates_groups_registers_then_listeners():
    want = desired(service())
    ops = m.plan(want, m.ObservedNLB("lb", "dns", "internet-facing"))
    assert [type(o).__name__ for o in ops] == [
        "CreateTargetGroup",
        "RegisterTargets",
        "CreateTargetGroup",
        "RegisterTargets",
        "CreateListener",
        "CreateListener",
    ]


def test_converged_lb_plans_nothing():
    want = desired(service())
    assert m.plan(want, observed_from(want)) == []


def test_node_change_only_touches_targets():
    svc = service()
    want = desired(svc)
    observed = observed_from(want)
    grown = desired(svc, [*NODES, node("n5", "i-5")])
    ops = m.plan(grown, observed)
    assert ops == [
        m.RegisterTargets(grown.listeners[0].target_group.name, 30080, ("i-5",)),
        m.RegisterTargets(grown.listeners[1].target_group.name, 30443, ("i-5",)),
    ]
    shrunk = desired(svc, NODES[:2])
    assert [type(o).__name__ for o in m.plan(shrunk, observed)] == ["DeregisterTargets", "DeregisterTargets"]


def test_port_change_replaces_listener_and_group_in_safe_order():
    svc = service()
    observed = observed_from(desired(svc))
    svc["spec"]["ports"] = [
        {"protocol": "TCP", "port": 80, "nodePort": 30080},
        {"protocol": "TCP", "port": 8443, "nodePort": 31443},
    ]
    ops = m.plan(desired(svc), observed)
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
    observed = observed_from(desired(svc))
    svc["spec"].update(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    ops = m.plan(desired(svc), observed)
    assert [type(o).__name__ for o in ops] == [
        "CreateTargetGroup",
        "RegisterTargets",
        "ModifyListener",
        "DeleteTargetGroup",
    ]


def test_orphan_groups_are_reused_or_deleted():
    svc = service(ports=[(80, 30080)])
    want = desired(svc)
    tg = want.listeners[0].target_group
    observed = m.ObservedNLB("lb", "dns", "internet-facing")
    observed.target_groups["orphan-same"] = m.ObservedTargetGroup("orphan-same", tg.name, "TCP", 30080, tg.health)
    observed.target_groups["orphan-old"] = m.ObservedTargetGroup("orphan-old", "k8s-old", "TCP", 30001, tg.health)
    ops = m.plan(want, observed)
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
