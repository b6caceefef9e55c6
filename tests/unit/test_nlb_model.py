import pytest

from ccm.aws import nlb_model as m
from ccm.aws import nlb_placement as placed
from ccm.aws.lbconfig import parse_load_balancer_config
from ccm.aws.subnets import choose_subnets
from ccm.contracts.cloud import InvalidServiceConfig
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


def _serving(observed: m.ObservedNLB, healthy: frozenset[str]) -> m.ObservedNLB:
    """The same LB with every attached group reporting `healthy` targets."""
    for arn, tg in observed.target_groups.items():
        observed.target_groups[arn] = m.ObservedTargetGroup(
            tg.arn, tg.name, tg.protocol, tg.port, tg.health, tg.targets, tg.attributes, healthy
        )
    return observed


def test_replacement_holds_the_listener_while_only_the_old_group_is_healthy():
    svc = service(ports=[(80, 30080)])
    observed = _serving(observed_from(desired(svc)), frozenset({"i-1", "i-2", "i-3"}))
    svc["spec"].update(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    want = desired(svc)
    ops = m.plan(want, observed)
    new_group = want.listeners[0].target_group
    assert ops == [
        m.CreateTargetGroup(new_group),
        m.RegisterTargets(new_group.name, new_group.port, ("i-1", "i-2", "i-3")),
        m.AwaitHealthy(new_group.name, 80, m.readiness_delay(new_group.health)),
    ]  # no listener switch and, above all, no DeleteTargetGroup of the group that still serves

    # Next pass: the new group is filled but still not healthy -> still held, nothing re-created.
    observed.target_groups["tg-new"] = m.ObservedTargetGroup(
        "tg-new", new_group.name, new_group.protocol, new_group.port, new_group.health, new_group.targets
    )
    assert [type(o).__name__ for o in m.plan(want, observed)] == ["AwaitHealthy"]

    # Healthy: switch, then delete the old group.
    observed.target_groups["tg-new"] = m.ObservedTargetGroup(
        "tg-new",
        new_group.name,
        new_group.protocol,
        new_group.port,
        new_group.health,
        new_group.targets,
        None,
        frozenset({"i-2"}),
    )
    assert m.plan(want, observed) == [
        m.ModifyListener("l0", "TCP", new_group.name),
        m.DeleteTargetGroup("tg0"),
    ]


def test_readiness_delay_is_the_healthy_threshold_time_within_bounds():
    base = desired(service()).listeners[0].target_group.health
    assert m.readiness_delay(base) == base.interval * base.healthy
    assert m.readiness_delay(m.HealthCheck("TCP", "traffic-port", "", 2, 2, 1, 1)) == 5
    assert m.readiness_delay(m.HealthCheck("TCP", "traffic-port", "", 10, 10, 300, 60)) == 300


def _live_lb(scheme="internet-facing", subnets=("subnet-0000000a", "subnet-0000000b"), addresses=None):
    zones = []
    for i, sid in enumerate(subnets):
        zone = {"ZoneName": f"az{i}", "SubnetId": sid}
        if addresses is not None:
            zone["LoadBalancerAddresses"] = addresses[i]
        zones.append(zone)
    return {"Scheme": scheme, "AvailabilityZones": zones}


def _config(**annotations):
    svc = service(annotations={f"service.beta.kubernetes.io/aws-load-balancer-{k}": v for k, v in annotations.items()})
    return parse_load_balancer_config(svc, default_lb_type="nlb")


def test_placement_warnings_name_what_aws_fixes_at_creation():
    assert placed.placement_warnings(_live_lb(), _config(), None) == []
    assert (
        placed.placement_warnings(
            _live_lb(), _config(subnets="subnet-0000000b,subnet-0000000a"), ["subnet-0000000b", "subnet-0000000a"]
        )
        == []
    )
    (scheme,) = placed.placement_warnings(_live_lb(), _config(scheme="internal"), None)
    assert "internet-facing and cannot change to internal" in scheme
    assert "aws-load-balancer-scheme" in scheme  # the annotation is named, as on a Classic ELB
    (moved,) = placed.placement_warnings(_live_lb(), _config(subnets="subnet-0000000c"), ["subnet-0000000c"])
    assert "aws-load-balancer-subnets asks for subnet-0000000c" in moved and "subnet-0000000a, subnet-0000000b" in moved


def test_placement_warnings_compare_addresses_only_when_aws_reports_them():
    live = _live_lb(addresses=[[{"AllocationId": "eipalloc-00000001"}], [{"AllocationId": "eipalloc-00000002"}]])
    same = _config(
        subnets="subnet-0000000a,subnet-0000000b", **{"eip-allocations": "eipalloc-00000002,eipalloc-00000001"}
    )
    assert placed.placement_warnings(live, same, ["subnet-0000000a", "subnet-0000000b"]) == []
    other = _config(
        subnets="subnet-0000000a,subnet-0000000b", **{"eip-allocations": "eipalloc-00000001,eipalloc-00000009"}
    )
    (eips,) = placed.placement_warnings(live, other, ["subnet-0000000a", "subnet-0000000b"])
    wanted, live_eips = "eipalloc-00000001, eipalloc-00000009", "eipalloc-00000001, eipalloc-00000002"
    assert f"eip-allocations asks for {wanted} but the NLB has {live_eips}" in eips
    not_reported = _live_lb()
    assert placed.placement_warnings(not_reported, other, ["subnet-0000000a", "subnet-0000000b"]) == []


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


def test_missing_zone_message_says_which_tags_to_add():
    from ccm.aws.subnets import missing_zones_message, node_zones

    subnets = [subnet("subnet-a", "az1"), subnet("subnet-b", "az2")]
    zone = "topology.kubernetes.io/zone"
    zones = node_zones([node("n1", "i-1", **{zone: "az1"}), node("n2", "i-2", **{zone: "az3"}), node("n3")])
    assert zones == {"az1", "az3"}
    message = missing_zones_message(subnets, ["subnet-a"], zones, "c1", internal=False)
    assert message is not None
    assert "no usable public subnet in az3 where nodes run" in message
    assert "kubernetes.io/role/elb=1 and kubernetes.io/cluster/c1=shared" in message
    assert missing_zones_message(subnets, ["subnet-a"], {"az1"}, "c1", internal=True) is None
    internal = missing_zones_message(subnets, ["subnet-b"], {"az1"}, "c1", internal=True)
    assert internal is not None and "kubernetes.io/role/internal-elb=1" in internal


def test_private_ips_are_placed_in_the_subnet_that_contains_them():
    addresses = {"private-ipv4-addresses": "10.0.2.10,10.0.1.10"}
    config = _config(subnets="subnet-0000000a,subnet-0000000b", internal="true", **addresses)
    cidrs = {"subnet-0000000a": "10.0.1.0/24", "subnet-0000000b": "10.0.2.0/24"}
    assert placed.placement(config, ["subnet-0000000a", "subnet-0000000b"], cidrs) == {
        "SubnetMappings": [
            {"SubnetId": "subnet-0000000a", "PrivateIPv4Address": "10.0.1.10"},
            {"SubnetId": "subnet-0000000b", "PrivateIPv4Address": "10.0.2.10"},
        ]
    }
    assert placed.placement(_config(), ["subnet-0000000a"], {}) == {"Subnets": ["subnet-0000000a"]}
