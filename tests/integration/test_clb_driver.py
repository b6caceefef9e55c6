"""The Classic ELB driver against in-process moto: creation, idempotence, in-place updates, adoption, deletion.

Call-count scenario of the anchors (bench/anchors.py): 2 TCP ports, 3 nodes, externalTrafficPolicy Cluster.
Scenarios share a test where they can: every moto world costs about a second to build.

moto 5.2.5 `elb` gaps these tests step around (real AWS behaves; the driver has no moto-specific code):
- DeleteLoadBalancerListeners with several ports corrupts the listener list: one port changes per step here.
- Backend policies exist only for instance ports given at CreateLoadBalancer (SetLoadBalancerPoliciesForBackendServer
  on a later port is silently dropped): proxy protocol is tested on the ports the LB was created with.
- At most 10 tags per LB (AWS: 50); no default SSL policy on secure listeners; a CLB created without security
  groups gets a new `default_elb_*` group (AWS: the VPC's default group).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from ccm.aws import frontend_model as fm
from ccm.aws import security_groups_model as sgm
from ccm.aws.clb import ClassicLoadBalancers
from ccm.aws.clients import CallCounter
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cloud import CloudStateError, ImplementedElsewhere, InvalidServiceConfig
from ccm.contracts.cluster import Cluster
from tests.factories import service
from tests.integration.conftest import CLUSTER, REGION, World
from tests.lb_types import only

A = "service.beta.kubernetes.io/aws-load-balancer-"
CLUSTER_TAG = f"kubernetes.io/cluster/{CLUSTER}"


class Env:
    """The driver under test plus uncounted clients to look at what it did."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.elb = boto3.client("elb", region_name=REGION)
        self.ec2 = boto3.client("ec2", region_name=REGION)
        vpc_filter = [{"Name": "vpc-id", "Values": [world.vpc_id]}]
        self.subnets = sorted(s["SubnetId"] for s in self.ec2.describe_subnets(Filters=vpc_filter)["Subnets"])
        # The cluster's node group: the only cluster-tagged group of the VPC that is not an LB's.
        self.ec2.create_security_group(
            GroupName="nodes",
            Description="nodes",
            VpcId=world.vpc_id,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": [{"Key": CLUSTER_TAG, "Value": "owned"}]}],
        )
        groups = SecurityGroups(world.clients, Cluster(CLUSTER, world.vpc_id))
        cluster = Cluster(CLUSTER, world.vpc_id, "ccm.aws/serverless")
        self.clb = only("clb", ClassicLoadBalancers(world.clients, cluster, groups), cluster, groups)

    def calls(self, action: Callable[[], Any]) -> Counter[str]:
        self.world.clients.counter.reset_thread()
        action()
        return Counter(self.world.clients.counter.thread_calls())

    def ensure(self, svc: dict, nodes: list[dict] | None = None) -> Counter[str]:
        nodes = self.world.nodes() if nodes is None else nodes
        return self.calls(lambda: self.clb.ensure_load_balancer(svc, nodes))

    def describe(self, svc: dict) -> dict[str, Any]:
        name = name_of(svc)
        lb: dict[str, Any] = self.elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"][0]
        tags = self.elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"][0]["Tags"]
        lb["Tags"] = {t["Key"]: t["Value"] for t in tags}
        lb["Attributes"] = self.elb.describe_load_balancer_attributes(LoadBalancerName=name)["LoadBalancerAttributes"]
        lb["Listeners"] = {d["Listener"]["LoadBalancerPort"]: d for d in lb["ListenerDescriptions"]}
        return lb


@pytest.fixture
def env(world: World) -> Env:
    return Env(world)


def name_of(svc: dict) -> str:
    return ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]


def mutating(counted: Counter[str]) -> Counter[str]:
    return Counter({op: n for op, n in counted.items() if CallCounter.mutating({op: n})})


def test_create_two_ports_three_nodes_then_noop(env: Env):
    svc = service(annotations={A + "additional-resource-tags": "team=web"})
    made = env.ensure(svc)
    lb = env.describe(svc)
    assert lb["Scheme"] == "internet-facing"
    assert sorted(lb["Subnets"]) == env.subnets
    assert {p: (d["Listener"]["Protocol"], d["Listener"]["InstancePort"]) for p, d in lb["Listeners"].items()} == {
        80: ("TCP", 30080),
        443: ("TCP", 30443),
    }
    assert lb["HealthCheck"] == {
        "Target": "TCP:30080",
        "Interval": 10,
        "Timeout": 5,
        "UnhealthyThreshold": 6,
        "HealthyThreshold": 2,
    }
    assert sorted(i["InstanceId"] for i in lb["Instances"]) == sorted(env.world.instances)
    assert lb["Tags"] == {
        CLUSTER_TAG: "owned",
        "kubernetes.io/service-name": "default/web",
        "serverless-ccm/service-uid": svc["metadata"]["uid"],
        "team": "web",
    }
    groups = env.ec2.describe_security_groups(GroupIds=lb["SecurityGroups"])["SecurityGroups"]
    # Default source ranges: the cluster's listener group of its ports and the backend group, none of its own.
    assert sorted(g["GroupName"] for g in groups) == sorted(
        [sgm.shared_group_name(CLUSTER, sgm.ROLE_BACKEND), fm.listener_group_name(CLUSTER, "ipv4 tcp:80,443")]
    )
    status, exists = env.clb.get_load_balancer(svc)
    assert exists and status is not None and status.ingress[0].hostname == lb["DNSName"]
    # ELB: describe, create, health check, register; EC2: subnets, route tables; security groups, once per
    # execution environment: one read of the cluster's groups (none shared yet; the node group learnt), the shared
    # backend and frontend groups created (the frontend's rules), the node group read, the backend rule.
    assert sum(n for op, n in made.items() if op.startswith("elb:")) == 4
    assert (sum(made.values()), sum(mutating(made).values())) == (12, 7)

    again = env.ensure(svc)
    assert CallCounter.mutating(again) == 0
    # LB, tags, attributes; subnets, route tables (discovery); no security-group call (cached).
    assert sum(again.values()) == 5
    assert not [op for op in again if op.startswith("ec2:") and "SecurityGroup" in op]

    other = service(name="other")
    warm = env.ensure(other)  # Anchor 18 before the shared groups: now no security-group call on a warm create
    assert not [op for op in warm if "SecurityGroup" in op]


def test_nodes_added_removed_and_not_running(env: Env):
    svc = service()
    nodes = env.world.nodes()
    # A node whose instance is gone: AWS refuses the whole batch with InvalidInstance (moto made faithful by the
    # devstack, server side).
    gone = env.world.instances[0]
    env.ec2.terminate_instances(InstanceIds=[gone])
    env.world.clients.counter.reset_thread()
    status = env.clb.ensure_load_balancer(svc, nodes[:2])
    made = Counter(env.world.clients.counter.thread_calls())
    assert made["elb:RegisterInstancesWithLoadBalancer"] == 2 and made["ec2:DescribeInstances"] == 1
    assert [i["InstanceId"] for i in env.describe(svc)["Instances"]] == [env.world.instances[1]]
    assert [(w.reason, gone in w.message) for w in status.warnings] == [("TargetsRefused", True)]

    update = env.calls(lambda: env.clb.update_load_balancer(svc, nodes[1:]))
    assert update == {"elb:DescribeLoadBalancers": 1, "elb:RegisterInstancesWithLoadBalancer": 1}  # anchor 5
    assert sorted(i["InstanceId"] for i in env.describe(svc)["Instances"]) == sorted(env.world.instances[1:])
    assert mutating(env.ensure(svc, nodes[2:])) == {"elb:DeregisterInstancesFromLoadBalancer": 1}


def test_port_changes_in_place(env: Env):
    svc = service()
    env.ensure(svc)
    before = env.describe(svc)
    svc["spec"]["ports"][1].update(port=8443, name="p8443")
    # The listener group of the new port set (new to the cluster: created with its rules), carried beside the old
    # one while the listeners change, then alone: no moment without a rule for a live listener.
    applied: list[list[str]] = []
    env.world.clients.client("elb").meta.events.register(
        "provide-client-params.elastic-load-balancing.ApplySecurityGroupsToLoadBalancer",
        lambda params, **_: applied.append(sorted(params["SecurityGroups"])),
    )
    old_groups = sorted(before["SecurityGroups"])
    assert mutating(env.ensure(svc)) == {
        "ec2:CreateSecurityGroup": 1,
        "ec2:AuthorizeSecurityGroupIngress": 1,
        "elb:ApplySecurityGroupsToLoadBalancer": 2,
        "elb:DeleteLoadBalancerListeners": 1,
        "elb:CreateLoadBalancerListeners": 1,
    }
    new_groups = sorted(env.describe(svc)["SecurityGroups"])
    assert applied == [sorted({*old_groups, *new_groups}), new_groups]
    rules = env.ec2.describe_security_groups(GroupIds=new_groups)["SecurityGroups"]
    ports = {(p["FromPort"], r["CidrIp"]) for g in rules for p in g["IpPermissions"] for r in p.get("IpRanges", [])}
    assert ports == {(80, "0.0.0.0/0"), (8443, "0.0.0.0/0"), (3, "0.0.0.0/0")}  # ICMP 3/4: path MTU
    svc["spec"]["ports"][0]["nodePort"] = 30081  # the first port: the health check follows it
    assert mutating(env.ensure(svc)) == {
        "elb:DeleteLoadBalancerListeners": 1,
        "elb:CreateLoadBalancerListeners": 1,
        "elb:ConfigureHealthCheck": 1,
    }
    lb = env.describe(svc)
    assert {p: d["Listener"]["InstancePort"] for p, d in lb["Listeners"].items()} == {80: 30081, 8443: 30443}
    assert lb["HealthCheck"]["Target"] == "TCP:30081"
    assert lb["CreatedTime"] == before["CreatedTime"]  # the same LB, never re-created


def test_attribute_changes_in_place(env: Env):
    svc = service()
    env.ensure(svc)
    svc["metadata"]["annotations"] = {
        A + "connection-draining-enabled": "true",
        A + "connection-draining-timeout": "30",
        A + "connection-idle-timeout": "120",
        A + "cross-zone-load-balancing-enabled": "true",
        A + "access-log-enabled": "true",
        A + "access-log-s3-bucket-name": "logs",
        A + "access-log-s3-bucket-prefix": "web",
        A + "access-log-emit-interval": "5",
        A + "healthcheck-interval": "30",
    }
    assert mutating(env.ensure(svc)) == {"elb:ModifyLoadBalancerAttributes": 1, "elb:ConfigureHealthCheck": 1}
    lb = env.describe(svc)
    attrs = lb["Attributes"]
    assert attrs["ConnectionDraining"] == {"Enabled": True, "Timeout": 30}
    assert attrs["ConnectionSettings"] == {"IdleTimeout": 120}
    assert attrs["CrossZoneLoadBalancing"] == {"Enabled": True}
    assert attrs["AccessLog"] == {"Enabled": True, "S3BucketName": "logs", "S3BucketPrefix": "web", "EmitInterval": 5}
    assert lb["HealthCheck"]["Interval"] == 30
    assert CallCounter.mutating(env.ensure(svc)) == 0
    svc["metadata"]["annotations"] = {}
    assert mutating(env.ensure(svc)) == {"elb:ModifyLoadBalancerAttributes": 1, "elb:ConfigureHealthCheck": 1}
    assert env.describe(svc)["Attributes"]["ConnectionDraining"]["Enabled"] is False


def test_ssl_listener_negotiation_and_proxy_protocol_policies(env: Env):
    iam = boto3.client("iam", region_name=REGION)
    certs = [
        iam.upload_server_certificate(ServerCertificateName=n, CertificateBody="cert", PrivateKey="key")[
            "ServerCertificateMetadata"
        ]["Arn"]
        for n in ("web", "web2")
    ]
    # backend-protocol ssl: SSL to the instances too (moto reports InstanceProtocol = Protocol).
    svc = service(
        annotations={
            A + "ssl-cert": certs[0],
            A + "ssl-ports": "443",
            A + "backend-protocol": "ssl",
            A + "ssl-negotiation-policy": "ELBSecurityPolicy-TLS-1-2-2017-01",
            A + "proxy-protocol": "*",
        }
    )
    env.ensure(svc)
    lb = env.describe(svc)
    secure = lb["Listeners"][443]
    assert (secure["Listener"]["Protocol"], secure["Listener"]["SSLCertificateId"]) == ("SSL", certs[0])
    assert secure["PolicyNames"] == ["k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01"]
    assert lb["Listeners"][80]["Listener"]["Protocol"] == "TCP"
    assert lb["HealthCheck"]["Target"] == "SSL:30080"  # backend-protocol ssl checks with SSL, as upstream
    assert {b["InstancePort"]: b["PolicyNames"] for b in lb["BackendServerDescriptions"]} == {
        30080: ["k8s-proxyprotocol-enabled"],
        30443: ["k8s-proxyprotocol-enabled"],
    }
    assert CallCounter.mutating(env.ensure(svc)) == 0

    svc["metadata"]["annotations"][A + "ssl-cert"] = certs[1]
    del svc["metadata"]["annotations"][A + "proxy-protocol"]
    assert mutating(env.ensure(svc)) == {
        "elb:SetLoadBalancerListenerSSLCertificate": 1,  # in place, no listener re-created
        "elb:SetLoadBalancerPoliciesForBackendServer": 2,
        "elb:DeleteLoadBalancerPolicy": 1,
    }
    lb = env.describe(svc)
    assert lb["Listeners"][443]["Listener"]["SSLCertificateId"] == certs[1]
    assert lb["Policies"]["OtherPolicies"] == ["k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01"]


def test_adopts_a_clb_made_by_cloud_provider_aws_but_not_an_untagged_one(env: Env):
    svc, untagged = service(), service(name="other")
    listeners = [
        {"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080},
        {"Protocol": "TCP", "LoadBalancerPort": 443, "InstanceProtocol": "TCP", "InstancePort": 30443},
    ]
    upstream_tags = [
        {"Key": CLUSTER_TAG, "Value": "owned"},
        {"Key": "kubernetes.io/service-name", "Value": "default/web"},
    ]
    env.elb.create_load_balancer(
        LoadBalancerName=name_of(svc), Listeners=listeners, Subnets=env.subnets, Tags=upstream_tags
    )
    env.elb.configure_health_check(
        LoadBalancerName=name_of(svc),
        HealthCheck={
            "Target": "TCP:30080",
            "Interval": 10,
            "Timeout": 5,
            "UnhealthyThreshold": 6,
            "HealthyThreshold": 2,
        },
    )
    env.elb.register_instances_with_load_balancer(
        LoadBalancerName=name_of(svc), Instances=[{"InstanceId": i} for i in env.world.instances]
    )
    before = env.describe(svc)
    adopted = env.ensure(svc)
    assert mutating(adopted)["elb:AddTags"] == 1
    assert not {"elb:CreateLoadBalancer", "elb:DeleteLoadBalancer", "elb:CreateLoadBalancerListeners"} & set(adopted)
    assert "elb:RegisterInstancesWithLoadBalancer" not in adopted
    after = env.describe(svc)
    assert after["Tags"]["serverless-ccm/service-uid"] == svc["metadata"]["uid"]
    assert after["CreatedTime"] == before["CreatedTime"]
    assert after["SecurityGroups"] != before["SecurityGroups"]  # our managed group replaces moto's default one
    assert CallCounter.mutating(env.ensure(svc)) == 0

    env.elb.create_load_balancer(LoadBalancerName=name_of(untagged), Listeners=listeners, Subnets=env.subnets)
    with pytest.raises(CloudStateError, match="not tagged"):  # cured in AWS (tag it): retried, not "invalid"
        env.ensure(untagged)
    env.clb.ensure_load_balancer_deleted(untagged)  # not ours: left in place
    assert env.clb.get_load_balancer(untagged)[1]


def test_refusals_change_nothing(env: Env):
    invalid = service(annotations={A + "connection-idle-timeout": "forever"})
    with pytest.raises(InvalidServiceConfig):
        env.ensure(invalid)
    assert env.world.clients.counter.thread_calls() == {}  # not a single AWS call
    with pytest.raises(ImplementedElsewhere):
        env.ensure(service(annotations={A + "type": "external"}))
    assert env.world.clients.counter.thread_calls() == {}


def test_a_scheme_change_keeps_the_clb_warns_and_converges_the_rest(env: Env):
    # The NLB's rule (ccm.aws.fixed_settings): never a refusal that leaves the rest unconverged, never a re-create.
    svc = service()
    env.ensure(svc)
    before = env.describe(svc)
    # A private subnet an internal CLB would be moved to, were the rest converged for the scheme asked for.
    private = env.ec2.create_subnet(VpcId=env.world.vpc_id, CidrBlock="10.0.7.0/24", AvailabilityZone="us-east-1a")
    env.ec2.create_tags(
        Resources=[private["Subnet"]["SubnetId"]], Tags=[{"Key": "kubernetes.io/role/internal-elb", "Value": "1"}]
    )
    svc["metadata"]["annotations"] = {A + "internal": "true", A + "connection-idle-timeout": "120"}
    env.world.clients.counter.reset_thread()
    status = env.clb.ensure_load_balancer(svc, env.world.nodes())
    assert mutating(env.world.clients.counter.thread_calls()) == {"elb:ModifyLoadBalancerAttributes": 1}
    (warning,) = status.warnings
    assert warning.reason == "LoadBalancerSettingFixed"
    assert "internet-facing and cannot change to internal" in warning.message
    assert "aws-load-balancer-internal" in warning.message and "Classic ELB is kept" in warning.message
    after = env.describe(svc)
    assert after["Scheme"] == "internet-facing"
    assert (after["DNSName"], after["CreatedTime"], after["Subnets"]) == (
        before["DNSName"],
        before["CreatedTime"],
        before["Subnets"],
    )
    assert after["Attributes"]["ConnectionSettings"]["IdleTimeout"] == 120
    assert CallCounter.mutating(env.ensure(svc)) == 0  # the Warning again, nothing to write


def test_subnets_annotation_by_name_kept_in_sync(env: Env):
    env.ec2.create_tags(Resources=[env.subnets[1]], Tags=[{"Key": "Name", "Value": "public-b"}])
    svc = service(annotations={A + "subnets": f"{env.subnets[0]},public-b"})
    env.ensure(svc)
    assert sorted(env.describe(svc)["Subnets"]) == env.subnets
    svc["metadata"]["annotations"][A + "subnets"] = "public-b"
    assert mutating(env.ensure(svc)) == {"elb:DetachLoadBalancerFromSubnets": 1}
    assert env.describe(svc)["Subnets"] == [env.subnets[1]]
    svc["metadata"]["annotations"][A + "subnets"] = "nowhere"
    with pytest.raises(CloudStateError, match="no subnet named nowhere"):  # may be created later: retried
        env.ensure(svc)


def test_delete_leaves_nothing(env: Env):
    svc = service()
    env.ensure(svc)
    deleted = env.calls(lambda: env.clb.ensure_load_balancer_deleted(svc))
    # DescribeTags (ownership), DescribeLoadBalancers (its groups), DeleteLoadBalancer. It carried only the shared
    # groups: no security-group call at all (no read-after-create check either: those groups are old).
    assert deleted == {"elb:DescribeTags": 1, "elb:DescribeLoadBalancers": 1, "elb:DeleteLoadBalancer": 1}
    assert env.clb.get_load_balancer(svc) == (None, False)
    assert not env.clb.load_balancer_exists_for_uid(svc["metadata"]["uid"])
    vpc_filter = [{"Name": "vpc-id", "Values": [env.world.vpc_id]}]
    groups = env.ec2.describe_security_groups(Filters=vpc_filter)["SecurityGroups"]
    shared = [sgm.shared_group_name(CLUSTER, sgm.ROLE_BACKEND), fm.listener_group_name(CLUSTER, "ipv4 tcp:80,443")]
    assert sorted(g["GroupName"] for g in groups) == sorted(["default", "nodes", *shared])  # cluster infrastructure
    [node_rules] = [sgm.rules_from_permissions(g["IpPermissions"]) for g in groups if g["GroupName"] == "nodes"]
    assert [r.description for r in node_rules] == [sgm.backend_rule_description(CLUSTER)]  # the one shared rule
    env.clb.delete_for_uid(svc["metadata"]["uid"])  # idempotent, also without the Service


def test_without_a_security_group_manager_groups_are_left_alone(env: Env):
    cluster = Cluster(CLUSTER, env.world.vpc_id, "ccm.aws/serverless")
    plain = only("clb", ClassicLoadBalancers(env.world.clients, cluster), cluster)
    svc = service()
    made = env.calls(lambda: plain.ensure_load_balancer(svc, env.world.nodes()))
    assert not [op for op in made if "SecurityGroup" in op]
    assert sum(made.values()) == 6
    assert CallCounter.mutating(env.calls(lambda: plain.ensure_load_balancer(svc, env.world.nodes()))) == 0
    assert env.calls(lambda: plain.ensure_load_balancer_deleted(svc)) == {
        "elb:DescribeTags": 1,
        "elb:DeleteLoadBalancer": 1,
    }


def test_https_listener_to_http_backends_is_converged_in_one_pass(env: Env):
    # AWS describes a listener back with the InstanceProtocol it was created with (moto 5.2 reported Protocol, so
    # such a listener looked changed on every pass; made faithful server side by devstack.aws_faithful).
    cert = boto3.client("iam", region_name=REGION).upload_server_certificate(
        ServerCertificateName="https-web", CertificateBody="cert", PrivateKey="key"
    )["ServerCertificateMetadata"]["Arn"]
    svc = service(annotations={A + "ssl-cert": cert, A + "ssl-ports": "443", A + "backend-protocol": "http"})
    env.ensure(svc)
    listeners = {p: d["Listener"] for p, d in env.describe(svc)["Listeners"].items()}
    assert {p: (ls["Protocol"], ls["InstanceProtocol"]) for p, ls in listeners.items()} == {
        80: ("HTTP", "HTTP"),
        443: ("HTTPS", "HTTP"),
    }
    assert CallCounter.mutating(env.ensure(svc)) == 0
