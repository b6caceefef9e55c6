"""Classic ELB planning, pure: desired state from a Service, and the plan from what AWS reports."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ccm.aws import clb_model as m
from ccm.aws import lbconfig, nlb_model
from ccm.aws.clb_observed import observed_from_api
from ccm.aws.lbconfig import parse_load_balancer_config
from tests.factories import node, service

A = "service.beta.kubernetes.io/aws-load-balancer-"
CERT = "arn:aws:iam::123456789012:server-certificate/web"
CERT2 = "arn:aws:iam::123456789012:server-certificate/web2"
NODES = [node("n1", "i-1"), node("n2", "i-2"), node("n3", "i-3"), node("n4")]
UID = "0f0e0d0c-0b0a-4908-8706-050403020100"


def desired(svc=None, nodes=NODES, subnets=("subnet-a", "subnet-b"), groups=("sg-1",)) -> m.CLBSpec:
    svc = svc or service(uid=UID)
    config = parse_load_balancer_config(svc, default_lb_type="clb")
    return m.desired_clb(svc, config, nodes, "c1", subnets, groups)


def observed_from(want: m.CLBSpec) -> m.ObservedCLB:
    """What AWS reports once `want` is applied exactly."""
    obs = m.observed_after_create(want, "dns")
    obs.health = want.health
    obs.attributes = want.attributes
    obs.instances = want.instances
    policies: set[str] = set()
    if want.ssl_policy:
        name = m.ssl_policy_name(want.ssl_policy)
        policies.add(name)
        obs.listener_policies = {ls.port: (name,) for ls in want.listeners if ls.secure}
    if want.proxy_protocol:
        policies.add(m.PROXY_POLICY)
        obs.backend_policies = {ls.instance_port: (m.PROXY_POLICY,) for ls in want.listeners}
    obs.policies = frozenset(policies)
    return obs


def test_desired_for_a_plain_service():
    want = desired()
    assert want.name == ("a" + UID.replace("-", ""))[:32]
    assert want.scheme == "internet-facing"
    assert want.listeners == (m.ListenerSpec(80, "TCP", 30080, "TCP"), m.ListenerSpec(443, "TCP", 30443, "TCP"))
    assert want.health == m.HealthCheck("TCP", "30080", "", 2, 6, 10, 5)  # CLB defaults, first listener's nodePort
    assert want.health.target == "TCP:30080"
    assert want.attributes == m.Attributes()
    assert want.instances == {"i-1", "i-2", "i-3"}  # the node without providerID cannot be registered
    assert want.tags == {
        "kubernetes.io/cluster/c1": "owned",
        "kubernetes.io/service-name": "default/web",
        "serverless-ccm/service-uid": UID,
    }


@pytest.mark.parametrize(
    ("annotations", "spec", "target"),
    [
        ({}, {}, "TCP:30080"),
        ({}, {"externalTrafficPolicy": "Local", "healthCheckNodePort": 31999}, "HTTP:31999/healthz"),
        ({A + "healthcheck-protocol": "HTTP"}, {}, "HTTP:30080/"),
        ({A + "healthcheck-protocol": "HTTPS", A + "healthcheck-path": "/ping"}, {}, "HTTPS:30080/ping"),
        ({A + "backend-protocol": "ssl"}, {}, "SSL:30080"),
        ({A + "healthcheck-port": "8080"}, {}, "TCP:8080"),
    ],
)
def test_health_check_target(annotations, spec, target):
    assert desired(service(annotations=annotations, **spec)).health.target == target


@pytest.mark.parametrize("target", ["TCP:30080", "SSL:1", "HTTP:31999/healthz", "HTTP:30080/", "HTTPS:8443/a:b/c"])
def test_health_check_target_round_trips_through_the_one_health_check_type(target):
    health = m.HealthCheck.from_target(target, healthy=2, unhealthy=6, interval=10, timeout=5)
    assert health.target == target
    assert m.HealthCheck is nlb_model.HealthCheck is lbconfig.HealthCheck  # one type for both drivers


def test_target_node_labels_filter_instances():
    nodes = [node("n1", "i-1", role="web"), node("n2", "i-2", role="db")]
    want = desired(service(annotations={A + "target-node-labels": "role=web"}), nodes=nodes)
    assert want.instances == {"i-1"}


def test_converged_lb_plans_nothing():
    annotations = {
        A + "ssl-cert": CERT,
        A + "ssl-ports": "443",
        A + "ssl-negotiation-policy": "ELBSecurityPolicy-TLS-1-2-2017-01",
        A + "proxy-protocol": "*",
        A + "connection-draining-enabled": "true",
        A + "access-log-enabled": "true",
        A + "access-log-s3-bucket-name": "logs",
    }
    want = desired(service(annotations=annotations))
    assert m.plan(want, observed_from(want), "c1") == []


def test_listener_added_removed_and_changed():
    want = desired()
    have = observed_from(want)
    svc = service(uid=UID, ports=[(80, 30081), (8080, 30880)])  # 80 changes nodePort, 443 goes, 8080 comes
    ops = m.plan(desired(svc), have, "c1")
    assert ops[:2] == [
        m.DeleteListeners((80, 443)),
        m.CreateListeners((m.ListenerSpec(80, "TCP", 30081, "TCP"), m.ListenerSpec(8080, "TCP", 30880, "TCP"))),
    ]
    assert m.ConfigureHealthCheck(m.HealthCheck("TCP", "30081", "", 2, 6, 10, 5)) in ops  # follows the first port
    assert len(ops) == 3


def test_certificate_change_is_in_place():
    svc = service(uid=UID, annotations={A + "ssl-cert": CERT, A + "ssl-ports": "443"})
    want = desired(svc)
    assert want.listeners[1] == m.ListenerSpec(443, "SSL", 30443, "TCP", CERT)
    svc["metadata"]["annotations"][A + "ssl-cert"] = CERT2
    assert m.plan(desired(svc), observed_from(want), "c1") == [m.SetCertificate(443, CERT2)]


def test_backend_protocol_change_recreates_the_listener():
    want = desired(service(uid=UID, annotations={A + "backend-protocol": "http"}))
    assert want.listeners[0] == m.ListenerSpec(80, "HTTP", 30080, "HTTP")
    ops = m.plan(desired(service(uid=UID)), observed_from(want), "c1")
    assert ops[:2] == [m.DeleteListeners((80, 443)), m.CreateListeners(desired().listeners)]


def test_attribute_diff():
    base = m.Attributes()
    assert m.attribute_changes(base, base) is None
    # A timeout or a bucket only matters while its feature is on (AWS keeps stale values around).
    assert m.attribute_changes(base, replace(base, draining_timeout=60, log_bucket="old")) is None
    change = m.attribute_changes(replace(base, draining=True, draining_timeout=60, idle_timeout=120), base)
    assert change is not None and change.to_api() == {
        "ConnectionDraining": {"Enabled": True, "Timeout": 60},
        "ConnectionSettings": {"IdleTimeout": 120},
    }
    logs = replace(base, access_log=True, log_interval=5, log_bucket="b", log_prefix="p")
    assert m.attribute_changes(logs, replace(logs, log_prefix="q")).to_api() == {
        "AccessLog": {"Enabled": True, "EmitInterval": 5, "S3BucketName": "b", "S3BucketPrefix": "p"}
    }
    assert m.attribute_changes(base, logs).to_api() == {"AccessLog": {"Enabled": False}}
    assert m.attribute_changes(replace(base, cross_zone=True), base).to_api() == {
        "CrossZoneLoadBalancing": {"Enabled": True}
    }


def test_attributes_not_read_are_left_alone():
    want = desired(service(uid=UID, annotations={A + "connection-idle-timeout": "300"}))
    have = observed_from(desired())
    assert any(isinstance(op, m.ModifyAttributes) for op in m.plan(want, have, "c1"))
    have.attributes = None
    assert m.plan(want, have, "c1") == []


def test_instance_diff_registers_before_deregistering():
    want = desired()
    have = observed_from(want)
    have.instances = frozenset({"i-1", "i-9"})
    assert m.plan(want, have, "c1") == [m.RegisterInstances(("i-2", "i-3")), m.DeregisterInstances(("i-9",))]


def test_ssl_negotiation_policy_created_and_set():
    svc = service(uid=UID, annotations={A + "ssl-cert": CERT, A + "ssl-negotiation-policy": "P1"})
    want = desired(svc)
    have = observed_from(desired(service(uid=UID, annotations={A + "ssl-cert": CERT})))
    assert m.plan(want, have, "c1") == [
        m.CreatePolicy(
            "k8s-SSLNegotiationPolicy-P1", "SSLNegotiationPolicyType", (("Reference-Security-Policy", "P1"),)
        ),
        m.SetListenerPolicies(80, ("k8s-SSLNegotiationPolicy-P1",)),
        m.SetListenerPolicies(443, ("k8s-SSLNegotiationPolicy-P1",)),
    ]
    # Another policy: the new one is set, the old one deleted once unused.
    svc["metadata"]["annotations"][A + "ssl-negotiation-policy"] = "P2"
    ops = m.plan(desired(svc), observed_from(want), "c1")
    assert ops[-1] == m.DeletePolicy("k8s-SSLNegotiationPolicy-P1")
    assert m.SetListenerPolicies(443, ("k8s-SSLNegotiationPolicy-P2",)) in ops


def test_removed_ssl_policy_reverts_to_the_aws_default():
    svc = service(uid=UID, annotations={A + "ssl-cert": CERT, A + "ssl-negotiation-policy": "P1"})
    have = observed_from(desired(svc))
    del svc["metadata"]["annotations"][A + "ssl-negotiation-policy"]
    ops = m.plan(desired(svc), have, "c1")
    default = m.ssl_policy_name(m.AWS_DEFAULT_SSL_POLICY)
    assert ops[0] == m.CreatePolicy(
        default, "SSLNegotiationPolicyType", (("Reference-Security-Policy", m.AWS_DEFAULT_SSL_POLICY),)
    )
    assert ops[-1] == m.DeletePolicy("k8s-SSLNegotiationPolicy-P1")
    # ... and then stays there.
    have.listener_policies = {80: (default,), 443: (default,)}
    have.policies = frozenset({default})
    assert m.plan(desired(svc), have, "c1") == []


def test_recreated_secure_listener_gets_its_policy_again():
    svc = service(uid=UID, annotations={A + "ssl-cert": CERT, A + "ssl-negotiation-policy": "P1"})
    have = observed_from(desired(svc))
    svc["spec"]["ports"][1]["nodePort"] = 30444
    ops = m.plan(desired(svc), have, "c1")
    assert m.SetListenerPolicies(443, ("k8s-SSLNegotiationPolicy-P1",)) in ops
    assert m.SetListenerPolicies(80, ("k8s-SSLNegotiationPolicy-P1",)) not in ops


def test_proxy_protocol_on_and_off():
    plain = desired()
    proxied = desired(service(uid=UID, annotations={A + "proxy-protocol": "*"}))
    assert m.plan(proxied, observed_from(plain), "c1") == [
        m.CreatePolicy(m.PROXY_POLICY, "ProxyProtocolPolicyType", (("ProxyProtocol", "true"),)),
        m.SetBackendPolicies(30080, (m.PROXY_POLICY,)),
        m.SetBackendPolicies(30443, (m.PROXY_POLICY,)),
    ]
    assert m.plan(plain, observed_from(proxied), "c1") == [
        m.SetBackendPolicies(30080, ()),
        m.SetBackendPolicies(30443, ()),
        m.DeletePolicy(m.PROXY_POLICY),
    ]


def test_subnets_detach_first_unless_that_empties_the_lb():
    have = observed_from(desired())
    assert m.plan(desired(subnets=("subnet-a", "subnet-c")), have, "c1") == [
        m.DetachSubnets(("subnet-b",)),
        m.AttachSubnets(("subnet-c",)),
    ]
    assert m.plan(desired(subnets=("subnet-x",)), have, "c1") == [
        m.AttachSubnets(("subnet-x",)),
        m.DetachSubnets(("subnet-a", "subnet-b")),
    ]


def test_security_groups_applied_only_when_managed_and_different():
    have = observed_from(desired())
    assert m.plan(desired(groups=("sg-1", "sg-2")), have, "c1") == [m.ApplySecurityGroups(("sg-1", "sg-2"))]
    assert m.plan(desired(groups=None), have, "c1") == []


def test_adopted_lb_gets_the_uid_tag_and_keeps_its_cluster_tag_value():
    want = desired(service(uid=UID, annotations={A + "additional-resource-tags": "team=a"}))
    have = observed_from(want)
    have.tags = {"kubernetes.io/cluster/c1": "shared", "kubernetes.io/service-name": "default/web"}
    # Ownership first and alone: the role may add only those keys to a cluster LB that does not carry our UID yet.
    assert m.plan(want, have, "c1") == [
        m.AddTags((("serverless-ccm/service-uid", UID),)),
        m.AddTags((("team", "a"),)),
    ]


def test_observed_from_api_parses_a_description():
    described = {
        "LoadBalancerName": "a1",
        "DNSName": "a1.elb",
        "Scheme": "internal",
        "ListenerDescriptions": [
            {
                "Listener": {
                    "Protocol": "HTTPS",
                    "LoadBalancerPort": 443,
                    "InstanceProtocol": "HTTP",
                    "InstancePort": 30443,
                    "SSLCertificateId": CERT,
                },
                "PolicyNames": ["p"],
            }
        ],
        "Policies": {"OtherPolicies": ["p", m.PROXY_POLICY]},
        "BackendServerDescriptions": [{"InstancePort": 30443, "PolicyNames": [m.PROXY_POLICY]}],
        "HealthCheck": {
            "Target": "TCP:1",
            "Interval": 10,
            "Timeout": 5,
            "HealthyThreshold": 2,
            "UnhealthyThreshold": 6,
        },
        "Instances": [{"InstanceId": "i-1"}],
        "Subnets": ["subnet-a"],
        "SecurityGroups": ["sg-1"],
    }
    attributes = {"ConnectionDraining": {"Enabled": True, "Timeout": 30}, "ConnectionSettings": {"IdleTimeout": 90}}
    obs = observed_from_api(described, {"k": "v"}, attributes)
    assert obs.listeners == {443: m.ListenerSpec(443, "HTTPS", 30443, "HTTP", CERT)}
    assert obs.listener_policies == {443: ("p",)}
    assert obs.backend_policies == {30443: (m.PROXY_POLICY,)}
    assert obs.health == m.HealthCheck("TCP", "1", "", 2, 6, 10, 5)
    assert obs.attributes == m.Attributes(draining=True, draining_timeout=30, idle_timeout=90)
    assert (obs.instances, obs.subnets, obs.security_groups) == ({"i-1"}, {"subnet-a"}, {"sg-1"})
    assert observed_from_api(described, {}, None).attributes is None
