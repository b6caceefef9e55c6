"""Classic ELB annotation families end to end, on a stack whose default LB type is clb (cloud-provider-aws's
default): Services carry no type annotation, as on a cluster migrated from cloud-provider-aws.

moto 5.2.5 `elb` gaps that shape these tests (real AWS behaves; the driver has no moto-specific code):
- InstanceProtocol is reported equal to Protocol: an SSL/HTTPS listener with another backend protocol would look
  changed on every pass, so the secure listeners here use backend-protocol ssl / https.
- DeleteLoadBalancerListeners with several ports corrupts the listener list: the in-place change below replaces
  one port at a time.
- Backend (proxy-protocol) policies exist only for instance ports given at CreateLoadBalancer: proxy protocol is
  asserted on the ports the LB was created with.
- No default SSL negotiation policy on a secure listener made without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devstack.stack import Stack
from tests.e2e.helpers import (
    A,
    annotate,
    clb,
    create_lb_service,
    gone,
    hostname,
    managed_group,
    node_ports,
    node_rules_from,
    patch_service,
    read_service,
    running_stack,
    security_group,
    shared_groups,
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory, default_lb_type="clb") as running:
        yield running


def served(stack: Stack, name: str, timeout: float = 60) -> dict[str, Any]:
    stack.wait_for(lambda: hostname(stack, name), timeout=timeout, what=f"{name} hostname")
    svc = read_service(stack, name)
    assert svc is not None
    lb = clb(stack, svc)
    assert lb is not None and lb["DNSName"] == hostname(stack, name)
    return svc


def converged(stack: Stack, svc: dict[str, Any], check: Any, what: str, timeout: float = 30) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        lb = clb(stack, svc)
        return lb if lb is not None and check(lb) else None

    result: dict[str, Any] = stack.wait_for(probe, timeout=timeout, what=what)
    return result


def listeners(lb: dict[str, Any]) -> dict[int, tuple[str, str, int, str]]:
    return {
        port: (
            d["Listener"]["Protocol"],
            d["Listener"]["InstanceProtocol"],
            d["Listener"]["InstancePort"],
            d["Listener"].get("SSLCertificateId", ""),
        )
        for port, d in lb["Listeners"].items()
    }


def test_listeners_tcp_http_ssl_https_and_the_ssl_policy(stack: Stack):
    cert = stack.aws("acm").request_certificate(DomainName="clb.example.com")["CertificateArn"]
    policy = "ELBSecurityPolicy-TLS-1-2-2017-01"
    create_lb_service(stack, "plain", [80, 443])
    create_lb_service(stack, "web", [80], {A + "backend-protocol": "http"})
    ssl = {A + "ssl-cert": cert, A + "ssl-ports": "443", A + "backend-protocol": "ssl"}
    create_lb_service(stack, "ssl", [80, 443], {**ssl, A + "ssl-negotiation-policy": policy})
    create_lb_service(stack, "https", [443], {A + "ssl-cert": cert, A + "backend-protocol": "https"})
    svcs = {name: served(stack, name) for name in ("plain", "web", "ssl", "https")}
    found = {name: listeners(clb(stack, svc)) for name, svc in svcs.items()}  # type: ignore[arg-type]
    ports = {name: node_ports(svc) for name, svc in svcs.items()}
    assert found == {
        "plain": {80: ("TCP", "TCP", ports["plain"][80], ""), 443: ("TCP", "TCP", ports["plain"][443], "")},
        "web": {80: ("HTTP", "HTTP", ports["web"][80], "")},
        # ssl-ports: only 443 gets the certificate; without one, backend-protocol ssl leaves a TCP listener
        "ssl": {80: ("TCP", "TCP", ports["ssl"][80], ""), 443: ("SSL", "SSL", ports["ssl"][443], cert)},
        "https": {443: ("HTTPS", "HTTPS", ports["https"][443], cert)},
    }
    ssl_lb = converged(stack, svcs["ssl"], lambda lb: lb["Listeners"][443]["PolicyNames"], "SSL policy set")
    assert ssl_lb["Listeners"][443]["PolicyNames"] == [f"k8s-SSLNegotiationPolicy-{policy}"]
    assert ssl_lb["Listeners"][80]["PolicyNames"] == []
    described = stack.aws("elb").describe_load_balancer_policies(
        LoadBalancerName=ssl_lb["LoadBalancerName"], PolicyNames=[f"k8s-SSLNegotiationPolicy-{policy}"]
    )["PolicyDescriptions"][0]
    assert described["PolicyTypeName"] == "SSLNegotiationPolicyType"
    assert {"AttributeName": "Reference-Security-Policy", "AttributeValue": policy} in described[
        "PolicyAttributeDescriptions"
    ]
    assert clb(stack, svcs["plain"])["HealthCheck"]["Target"] == f"TCP:{ports['plain'][80]}"  # type: ignore[index]
    assert clb(stack, svcs["ssl"])["HealthCheck"]["Target"] == f"SSL:{ports['ssl'][80]}"  # type: ignore[index]
    gone(stack, *svcs.values())


def test_health_check_annotations(stack: Stack):
    annotations = {
        A + "healthcheck-protocol": "HTTP",
        A + "healthcheck-port": "10254",
        A + "healthcheck-path": "/readyz",
        A + "healthcheck-healthy-threshold": "3",
        A + "healthcheck-unhealthy-threshold": "4",
        A + "healthcheck-interval": "20",
        A + "healthcheck-timeout": "8",
    }
    create_lb_service(stack, "checked", [80], annotations)
    svc = served(stack, "checked")
    lb = converged(stack, svc, lambda lb: lb["HealthCheck"]["Target"].startswith("HTTP"), "health check set")
    assert lb["HealthCheck"] == {
        "Target": "HTTP:10254/readyz",
        "Interval": 20,
        "Timeout": 8,
        "HealthyThreshold": 3,
        "UnhealthyThreshold": 4,
    }
    assert sorted(i["InstanceId"] for i in lb["Instances"]) == sorted(stack.state()["instances"])
    gone(stack, svc)


def test_proxy_protocol_policy_on_every_backend(stack: Stack):
    create_lb_service(stack, "proxied", [80, 443], {A + "proxy-protocol": "*"})
    svc = served(stack, "proxied")
    lb = converged(stack, svc, lambda lb: len(lb["BackendServerDescriptions"]) == 2, "backend policies")
    assert "k8s-proxyprotocol-enabled" in lb["Policies"]["OtherPolicies"]
    assert {b["InstancePort"]: b["PolicyNames"] for b in lb["BackendServerDescriptions"]} == {
        port: ["k8s-proxyprotocol-enabled"] for port in node_ports(svc).values()
    }
    gone(stack, svc)


def test_draining_idle_timeout_access_logs_and_cross_zone_in_place(stack: Stack):
    annotations = {
        A + "connection-draining-enabled": "true",
        A + "connection-draining-timeout": "120",
        A + "connection-idle-timeout": "300",
        A + "access-log-enabled": "true",
        A + "access-log-emit-interval": "5",
        A + "access-log-s3-bucket-name": "team-lb-logs",
        A + "access-log-s3-bucket-prefix": "prod/clb",
        A + "cross-zone-load-balancing-enabled": "true",
    }
    create_lb_service(stack, "tuned", [80], annotations)
    svc = served(stack, "tuned")
    wanted = {
        "CrossZoneLoadBalancing": {"Enabled": True},
        "ConnectionDraining": {"Enabled": True, "Timeout": 120},
        "ConnectionSettings": {"IdleTimeout": 300},
        "AccessLog": {"Enabled": True, "S3BucketName": "team-lb-logs", "EmitInterval": 5, "S3BucketPrefix": "prod/clb"},
    }
    lb = converged(stack, svc, lambda lb: {k: lb["Attributes"].get(k) for k in wanted} == wanted, "attributes")
    # An edit of a live CLB is applied in place: same LB, new values.
    annotate(stack, "tuned", {A + "connection-idle-timeout": "75", A + "access-log-enabled": None})
    after = converged(
        stack,
        svc,
        lambda lb: (
            lb["Attributes"]["ConnectionSettings"]["IdleTimeout"] == 75 and not lb["Attributes"]["AccessLog"]["Enabled"]
        ),
        "attributes changed in place",
    )
    assert (after["CreatedTime"], after["DNSName"]) == (lb["CreatedTime"], lb["DNSName"])
    gone(stack, svc)


def test_source_ranges_extra_security_groups_and_one_node_rule(stack: Stack):
    world, ec2 = stack.world, stack.aws("ec2")
    assert world is not None
    # Annotations may name cluster-tagged groups only (AnnotationSecurityGroups=cluster-tagged, the default).
    tags = [{"ResourceType": "security-group", "Tags": [{"Key": world.cluster_tag_key, "Value": "shared"}]}]
    extra = ec2.create_security_group(
        GroupName="extra-clb", Description="mine", VpcId=world.vpc_id, TagSpecifications=tags
    )["GroupId"]
    ranges = ["203.0.113.0/24", "198.51.100.0/24"]
    create_lb_service(stack, "ranged", [80, 443], {A + "extra-security-groups": extra}, loadBalancerSourceRanges=ranges)
    svc = served(stack, "ranged")
    group = managed_group(stack, svc)
    assert group is not None
    backend = shared_groups(stack)["backend"]
    # Its own frontend group (the ranges), the cluster's backend group (the nodes admit it), then the extra group.
    assert clb(stack, svc)["SecurityGroups"] == [group["GroupId"], backend, extra]  # type: ignore[index]
    perms = security_group(stack, group["GroupId"])["IpPermissions"]
    rules = {(p["IpProtocol"], p["FromPort"], p["ToPort"], r["CidrIp"]) for p in perms for r in p.get("IpRanges", [])}
    # Listener ports from the ranges, plus ICMP "fragmentation needed" (path MTU discovery) as upstream.
    assert rules == {("tcp", port, port, cidr) for port in (80, 443) for cidr in ranges} | {
        ("icmp", 3, 4, cidr) for cidr in ranges
    }
    # No node rule of its own: the ONE rule from the shared backend group serves every load balancer.
    assert not node_rules_from(stack, group["GroupId"])
    assert [r[0] for r in node_rules_from(stack, backend)] == ["-1"]
    assert not node_rules_from(stack, extra)  # the extra group is only attached
    assert security_group(stack, extra)["IpPermissions"] == []
    gone(stack, svc)
    assert security_group(stack, extra)["GroupId"] == extra  # not ours: kept


def test_subnets_annotation_kept_in_sync(stack: Stack):
    world = stack.world
    assert world is not None
    az0, az1 = world.azs
    create_lb_service(stack, "placed", [80], {A + "subnets": f"{stack.config.cluster_name}-public-{az0}"})
    svc = served(stack, "placed")
    assert clb(stack, svc)["Subnets"] == [world.public_subnets[az0]]  # type: ignore[index]
    annotate(stack, "placed", {A + "subnets": f"{world.public_subnets[az0]},{world.public_subnets[az1]}"})
    lb = converged(stack, svc, lambda lb: len(lb["Subnets"]) == 2, "second subnet attached")
    assert sorted(lb["Subnets"]) == sorted(world.public_subnets.values())
    annotate(stack, "placed", {A + "subnets": None})  # back to discovery: the same two public subnets
    patch_service(stack, "placed", {"spec": {"ports": [{"name": "p8080", "port": 8080, "targetPort": 8080}]}})
    svc = read_service(stack, "placed")  # type: ignore[assignment]
    lb = converged(stack, svc, lambda lb: set(lb["Listeners"]) == {8080}, "listener replaced in place")
    assert lb["Listeners"][8080]["Listener"]["InstancePort"] == node_ports(svc)[8080]
    assert sorted(lb["Subnets"]) == sorted(world.public_subnets.values())
    gone(stack, svc)
