"""NLB annotation families end to end: Service in the emulator -> watcher -> SQS -> service Lambda -> ELBv2/EC2 on
the moto server, asserted with boto3 the way a user would check the AWS console.

moto 5.2.5 gaps worked around here (the driver has no moto-specific code):
- SubnetMappings are accepted but their AllocationId / PrivateIPv4Address are not kept (DescribeLoadBalancers has
  no LoadBalancerAddresses): for eip-allocations and private-ipv4-addresses the CreateLoadBalancer request is
  recorded with a botocore hook on the reconciler's own client, and the LB's subnets are asserted from AWS.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.stack import Stack
from tests.e2e.helpers import (
    A,
    annotate,
    create_lb_service,
    ensured,
    gone,
    hostname,
    managed_group,
    mutating,
    nlb,
    node_ports,
    node_rules_from,
    patch_service,
    read_service,
    record_calls,
    running_stack,
    security_group,
    service_calls,
    shared_groups,
    wait_event,
)

NLB = {A + "type": "nlb"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Short host-update buckets (default 15 s): node label changes reach the target groups within seconds.
    with running_stack(tmp_path_factory, extra_env={"HOST_UPDATE_BUCKET_SECONDS": "2"}) as running:
        yield running


def served(stack: Stack, name: str, timeout: float = 60) -> dict[str, Any]:
    """The Service once it has its hostname and its NLB is complete (ensured: not only the hostname)."""
    stack.wait_for(lambda: hostname(stack, name), timeout=timeout, what=f"{name} hostname")
    ensured(stack, name)
    svc = read_service(stack, name)
    assert svc is not None
    lb = nlb(stack, svc)
    assert lb is not None and lb["DNSName"] == hostname(stack, name)
    return svc


def converged(stack: Stack, svc: dict[str, Any], check: Any, what: str, timeout: float = 30) -> dict[str, Any]:
    """Wait until the NLB satisfies `check` (reads may catch the reconciler mid-way: retry)."""

    def probe() -> dict[str, Any] | None:
        try:
            lb = nlb(stack, svc)
        except Exception:
            return None
        return lb if lb is not None and check(lb) else None

    result: dict[str, Any] = stack.wait_for(probe, timeout=timeout, what=what)
    return result


def instances(stack: Stack) -> list[str]:
    return sorted(stack.state()["instances"])


def test_listener_protocols_tls_certificate_policy_and_backend_protocol(stack: Stack):
    cert = stack.aws("acm").request_certificate(DomainName="tls.example.com")["CertificateArn"]
    ports = [
        {"name": "web", "port": 80, "protocol": "TCP", "targetPort": 8080},
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
        {"name": "both-tcp", "port": 5000, "protocol": "TCP", "targetPort": 5000, "nodePort": 30500},
        {"name": "both-udp", "port": 5000, "protocol": "UDP", "targetPort": 5000, "nodePort": 30500},
        {"name": "tls", "port": 443, "protocol": "TCP", "targetPort": 8443},
    ]
    policy = "ELBSecurityPolicy-TLS13-1-2-2021-06"
    annotations = {
        **NLB,
        A + "ssl-cert": cert,
        A + "ssl-ports": "tls",  # by port name, as upstream allows
        A + "ssl-negotiation-policy": policy,
        A + "backend-protocol": "ssl",
    }
    create_lb_service(stack, "protos", ports, annotations)
    svc = served(stack, "protos")
    nodes = {(p["port"], p["protocol"]): p["nodePort"] for p in svc["spec"]["ports"]}
    lb = converged(stack, svc, lambda lb: len(lb["Listeners"]) == 4, "four listeners")
    protocols = {
        port: (ls["Protocol"], lb["TargetGroups"][port]["Protocol"], lb["TargetGroups"][port]["Port"])
        for port, ls in lb["Listeners"].items()
    }
    assert protocols == {
        80: ("TCP", "TCP", nodes[80, "TCP"]),
        53: ("UDP", "UDP", nodes[53, "UDP"]),
        5000: ("TCP_UDP", "TCP_UDP", 30500),
        443: ("TLS", "TLS", nodes[443, "TCP"]),  # backend-protocol ssl: TLS to the targets too
    }
    tls = lb["Listeners"][443]
    assert [c["CertificateArn"] for c in tls["Certificates"]] == [cert]
    assert tls["SslPolicy"] == policy
    assert all(not lb["Listeners"][p].get("Certificates") for p in (80, 53, 5000))
    assert all(tg["Targets"] == instances(stack) for tg in lb["TargetGroups"].values())
    gone(stack, svc)


def test_scheme_internal_and_subnets_by_id_and_name(stack: Stack):
    world = stack.world
    assert world is not None
    az0, az1 = world.azs
    create_lb_service(stack, "inner", [80], {**NLB, A + "internal": "true"})
    create_lb_service(stack, "schemed", [80], {**NLB, A + "scheme": "internal"})
    picked = f"{world.public_subnets[az0]}, {stack.config.cluster_name}-public-{az1}"  # an ID and a Name tag
    create_lb_service(stack, "picked", [80], {**NLB, A + "subnets": picked, A + "scheme": "internet-facing"})
    found = {name: nlb(stack, served(stack, name)) for name in ("inner", "schemed", "picked")}
    subnets = {name: sorted(az["SubnetId"] for az in lb["AvailabilityZones"]) for name, lb in found.items()}
    assert {name: lb["Scheme"] for name, lb in found.items()} == {
        "inner": "internal",
        "schemed": "internal",
        "picked": "internet-facing",
    }
    assert subnets["inner"] == subnets["schemed"] == sorted(world.private_subnets.values())  # internal-elb role
    assert subnets["picked"] == sorted(world.public_subnets.values())
    gone(stack, *(read_service(stack, n) for n in ("inner", "schemed", "picked")))  # type: ignore[misc]


def test_eip_allocations_go_into_the_subnet_mappings(stack: Stack):
    world, ec2 = stack.world, stack.aws("ec2")
    assert world is not None
    eips = [ec2.allocate_address(Domain="vpc")["AllocationId"] for _ in world.azs]
    sent = record_calls(stack, "elbv2", ["CreateLoadBalancer"])
    create_lb_service(stack, "eips", [80], {**NLB, A + "eip-allocations": ",".join(eips)})
    lb = nlb(stack, served(stack, "eips"))
    assert lb is not None
    requests = {r["Name"]: r for _, r in sent}
    public = sorted(world.public_subnets.values())
    assert requests[lb["LoadBalancerName"]]["SubnetMappings"] == [
        {"SubnetId": subnet, "AllocationId": eip} for subnet, eip in zip(public, eips, strict=True)
    ]
    assert sorted(az["SubnetId"] for az in lb["AvailabilityZones"]) == public
    gone(stack, read_service(stack, "eips"))  # type: ignore[arg-type]


def test_private_ipv4_addresses_are_mapped_to_the_subnet_that_contains_them(stack: Stack):
    world, ec2 = stack.world, stack.aws("ec2")
    assert world is not None
    private = list(world.private_subnets.values())
    cidrs = {s["SubnetId"]: s["CidrBlock"] for s in ec2.describe_subnets(SubnetIds=private)["Subnets"]}
    # One address in each private subnet, listed against the order of the subnet IDs.
    addresses = [str(ipaddress.ip_network(cidrs[s])[10]) for s in sorted(cidrs, reverse=True)]
    sent = record_calls(stack, "elbv2", ["CreateLoadBalancer"])
    annotations = {**NLB, A + "internal": "true", A + "private-ipv4-addresses": ",".join(addresses)}
    create_lb_service(stack, "pinned", [80], annotations)
    try:
        lb = nlb(stack, served(stack, "pinned"))
        assert lb is not None
        mappings = {r["Name"]: r for _, r in sent}[lb["LoadBalancerName"]]["SubnetMappings"]
        assert sorted(m["PrivateIPv4Address"] for m in mappings) == sorted(addresses)
        assert all(
            ipaddress.ip_address(m["PrivateIPv4Address"]) in ipaddress.ip_network(cidrs[m["SubnetId"]])
            for m in mappings
        )
    finally:
        gone(stack, read_service(stack, "pinned"))  # type: ignore[arg-type]


def test_dualstack_opens_ipv6_too(stack: Stack):
    create_lb_service(stack, "dual", [80], {**NLB, A + "ip-address-type": "dualstack"})
    svc = served(stack, "dual")
    lb = nlb(stack, svc)
    assert lb is not None and lb["IpAddressType"] == "dualstack"
    # Default source ranges: the cluster's listener group of its port set (dualstack: both families) and the backend.
    shared = shared_groups(stack)
    listeners = shared["dualstack tcp:80"]
    assert managed_group(stack, svc) is None and lb["SecurityGroups"] == [listeners, shared["backend"]]
    perms = security_group(stack, listeners)["IpPermissions"]
    rules = {
        (p["IpProtocol"], p["FromPort"], p["ToPort"], r.get("CidrIp") or r.get("CidrIpv6"))
        for p in perms
        for r in [*p.get("IpRanges", []), *p.get("Ipv6Ranges", [])]
    }
    # Its listener port only, from both families, and path-MTU discovery: ICMP 3/4 (IPv4), ICMPv6 2/0 "too big".
    assert rules == {
        *(("tcp", 80, 80, cidr) for cidr in ("0.0.0.0/0", "::/0")),
        ("icmp", 3, 4, "0.0.0.0/0"),
        ("icmpv6", 2, 0, "::/0"),
    }
    gone(stack, svc)


def test_target_group_attributes_and_proxy_protocol(stack: Stack):
    annotations = {
        **NLB,
        A + "target-group-attributes": "deregistration_delay.timeout_seconds=45,stickiness.enabled=true,"
        "stickiness.type=source_ip",
        A + "proxy-protocol": "*",
    }
    create_lb_service(stack, "attrs", [80, 443], annotations)
    svc = served(stack, "attrs")
    lb = converged(stack, svc, lambda lb: len(lb["Listeners"]) == 2, "two listeners")
    for tg in lb["TargetGroups"].values():
        assert {
            k: tg["Attributes"].get(k)
            for k in (
                "deregistration_delay.timeout_seconds",
                "stickiness.enabled",
                "stickiness.type",
                "proxy_protocol_v2.enabled",
            )
        } == {
            "deregistration_delay.timeout_seconds": "45",
            "stickiness.enabled": "true",
            "stickiness.type": "source_ip",
            "proxy_protocol_v2.enabled": "true",
        }
    gone(stack, svc)


def test_annotations_read_differently_upstream_get_warnings_naming_them(stack: Stack):
    annotations = {**NLB, A + "alpn-policy": "HTTP2Preferred", A + "proxy-protocol": "*"}
    create_lb_service(stack, "lbc-names", [80], annotations)
    svc = served(stack, "lbc-names")
    ignored = wait_event(stack, "lbc-names", "AnnotationIgnored")
    assert ignored["type"] == "Warning"
    assert ignored["message"] == (
        f"{A}alpn-policy: only the AWS Load Balancer Controller understands it; ignored: TLS listeners get no ALPN "
        "policy"
    )
    differs = wait_event(stack, "lbc-names", "AnnotationDiffers")["message"]
    assert differs.startswith(f"{A}scheme not set: internet-facing (the cloud-provider-aws default")
    assert f"{A}proxy-protocol: applied to this NLB as target-group attribute" in differs
    lb = converged(stack, svc, lambda lb: len(lb["TargetGroups"]) == 1, "one target group")
    (tg,) = lb["TargetGroups"].values()
    assert tg["TargetType"] == "instance"
    gone(stack, svc)


def test_cross_zone_access_logs_and_additional_tags(stack: Stack):
    annotations = {
        **NLB,
        A + "cross-zone-load-balancing-enabled": "true",
        A + "access-log-enabled": "true",
        A + "access-log-s3-bucket-name": "team-lb-logs",
        A + "access-log-s3-bucket-prefix": "prod/web",
        A + "additional-resource-tags": "team=web, cost-center=42",
    }
    create_lb_service(stack, "logged", [80], annotations)
    svc = served(stack, "logged")
    lb = converged(
        stack, svc, lambda lb: lb["Attributes"].get("access_logs.s3.enabled") == "true", "access logs enabled"
    )
    assert {k: lb["Attributes"][k] for k in ("access_logs.s3.bucket", "access_logs.s3.prefix")} == {
        "access_logs.s3.bucket": "team-lb-logs",
        "access_logs.s3.prefix": "prod/web",
    }
    assert lb["Attributes"]["load_balancing.cross_zone.enabled"] == "true"
    wanted = {"team": "web", "cost-center": "42", "kubernetes.io/cluster/devstack": "owned"}
    # Default source ranges: no security group of its own to tag (the cluster's shared groups carry no Service's).
    assert managed_group(stack, svc) is None
    for tags in (lb["Tags"], lb["TargetGroups"][80]["Tags"]):
        assert wanted.items() <= tags.items()
        assert tags["kubernetes.io/service-name"] == "default/logged"
    # Removing the annotations resets the attributes in place.
    annotate(stack, "logged", {A + "access-log-enabled": None, A + "cross-zone-load-balancing-enabled": None})
    lb = converged(
        stack,
        svc,
        lambda lb: (
            lb["Attributes"]["access_logs.s3.enabled"] == "false"
            and lb["Attributes"]["load_balancing.cross_zone.enabled"] == "false"
        ),
        "attributes reset",
    )
    gone(stack, svc)


def test_target_node_labels_register_only_matching_nodes(stack: Stack):
    assert stack.world is not None
    first, second = stack.world.instances[0], stack.world.instances[1]
    core = stack.core()
    core.patch_node(first.private_dns, {"metadata": {"labels": {"pool": "edge"}}})
    try:
        create_lb_service(stack, "edge", [80], {**NLB, A + "target-node-labels": "pool=edge"})
        svc = served(stack, "edge")
        converged(stack, svc, lambda lb: lb["TargetGroups"][80]["Targets"] == [first.instance_id], "one target")
        # A node that gets the label joins (membership -> HOSTS delta), without touching the rest.
        core.patch_node(second.private_dns, {"metadata": {"labels": {"pool": "edge"}}})
        converged(
            stack,
            svc,
            lambda lb: lb["TargetGroups"][80]["Targets"] == sorted([first.instance_id, second.instance_id]),
            "labelled node added",
        )
    finally:
        for node in (first, second):
            core.patch_node(node.private_dns, {"metadata": {"labels": {"pool": None}}})
    gone(stack, svc)


def test_health_check_annotations_including_timeout(stack: Stack):
    annotations = {
        **NLB,
        A + "healthcheck-protocol": "http",
        A + "healthcheck-port": "10254",
        A + "healthcheck-path": "/readyz",
        A + "healthcheck-healthy-threshold": "4",
        A + "healthcheck-unhealthy-threshold": "5",
        A + "healthcheck-interval": "15",
        A + "healthcheck-timeout": "7",  # cloud-provider-aws drops it (#822); we send it
    }
    create_lb_service(stack, "checked", [80], annotations)
    tg = nlb(stack, served(stack, "checked"))["TargetGroups"][80]  # type: ignore[index]
    wanted = {
        "HealthCheckProtocol": "HTTP",
        "HealthCheckPort": "10254",
        "HealthCheckPath": "/readyz",
        "HealthCheckIntervalSeconds": 15,
        "HealthCheckTimeoutSeconds": 7,
        "HealthyThresholdCount": 4,
        "UnhealthyThresholdCount": 5,
    }
    assert {k: tg.get(k) for k in wanted} == wanted
    gone(stack, read_service(stack, "checked"))  # type: ignore[arg-type]


def test_source_ranges_managed_group_and_one_node_rule(stack: Stack):
    ranges = ["203.0.113.0/24", "198.51.100.7/32"]
    create_lb_service(stack, "ranged", [80, 443], loadBalancerSourceRanges=ranges)
    create_lb_service(stack, "open", [8080], NLB)
    svc, other = served(stack, "ranged"), served(stack, "open")
    group = managed_group(stack, svc)
    assert group is not None
    shared = shared_groups(stack)
    backend = shared["backend"]
    assert nlb(stack, svc)["SecurityGroups"] == [group["GroupId"], backend]  # type: ignore[index]
    # Default ranges: no group of its own, the cluster's listener group of its port and the backend.
    assert nlb(stack, other)["SecurityGroups"] == [shared["ipv4 tcp:8080"], backend]  # type: ignore[index]
    assert managed_group(stack, other) is None

    def lb_rules(group_id: str) -> set[tuple[str, int, int, str]]:
        perms = security_group(stack, group_id)["IpPermissions"]
        return {
            (p["IpProtocol"], p["FromPort"], p["ToPort"], r["CidrIp"]) for p in perms for r in p.get("IpRanges", [])
        }

    # Listener ports from the ranges, plus ICMP "fragmentation needed" (path-MTU discovery, as cloud-provider-aws).
    assert lb_rules(group["GroupId"]) == {("tcp", port, port, cidr) for port in (80, 443) for cidr in ranges} | {
        ("icmp", 3, 4, cidr) for cidr in ranges
    }
    # ONE node rule for every LB, from the shared backend group (all traffic), whatever their ports and ranges.
    assert [rule[0] for rule in node_rules_from(stack, backend)] == ["-1"]
    assert not node_rules_from(stack, group["GroupId"])
    node_group = security_group(stack, stack.world.node_sg_id)  # type: ignore[union-attr]
    assert not [p for p in node_group["IpPermissions"] if p.get("IpRanges")]  # no per-CIDR rule on the nodes

    # A changed range is authorized and the stale one revoked; the node rule stays as it is.
    patch_service(stack, "ranged", {"spec": {"loadBalancerSourceRanges": ["203.0.113.0/24", "192.0.2.0/24"]}})
    wanted = {
        (proto, low, high, cidr)
        for proto, low, high in (("tcp", 80, 80), ("tcp", 443, 443), ("icmp", 3, 4))
        for cidr in ("203.0.113.0/24", "192.0.2.0/24")
    }
    stack.wait_for(lambda: lb_rules(group["GroupId"]) == wanted, what="source ranges updated")
    assert len(node_rules_from(stack, backend)) == 1
    gone(stack, svc, other)
    assert managed_group(stack, svc) is None  # its own group went with it
    assert len(node_rules_from(stack, backend)) == 1  # the shared rule stays for the next load balancer


def test_bring_your_own_security_groups(stack: Stack):
    world, ec2 = stack.world, stack.aws("ec2")
    assert world is not None
    # Annotations may name cluster-tagged groups only (AnnotationSecurityGroups=cluster-tagged, the default).
    tags = [{"ResourceType": "security-group", "Tags": [{"Key": world.cluster_tag_key, "Value": "shared"}]}]
    byo = ec2.create_security_group(
        GroupName="byo-web", Description="mine", VpcId=world.vpc_id, TagSpecifications=tags
    )["GroupId"]
    create_lb_service(stack, "byo", [80], {**NLB, A + "security-groups": byo})
    svc = served(stack, "byo")
    assert nlb(stack, svc)["SecurityGroups"] == [byo]  # type: ignore[index]
    assert managed_group(stack, svc) is None  # no managed group
    assert security_group(stack, byo)["IpPermissions"] == []  # used as it is, never modified
    assert len(node_rules_from(stack, byo)) == 1
    gone(stack, svc)
    assert security_group(stack, byo)["GroupId"] == byo  # not ours: kept
    assert not node_rules_from(stack, byo)


def test_changes_to_a_live_nlb_are_applied_in_place(stack: Stack):
    create_lb_service(stack, "live", [80], NLB)
    svc = served(stack, "live")
    before = converged(stack, svc, lambda lb: lb["TargetGroups"][80]["Targets"] == instances(stack), "targets")
    calls_before = service_calls(stack)
    annotate(
        stack,
        "live",
        {A + "healthcheck-interval": "20", A + "target-group-attributes": "deregistration_delay.timeout_seconds=10"},
    )
    patch_service(
        stack,
        "live",
        {"spec": {"ports": [{"name": f"p{p}", "port": p, "targetPort": 8080} for p in (80, 8443)]}},
    )
    svc = read_service(stack, "live")  # type: ignore[assignment]
    after = converged(
        stack,
        svc,
        lambda lb: (
            set(lb["Listeners"]) == {80, 8443}
            and lb["TargetGroups"][80]["HealthCheckIntervalSeconds"] == 20
            and lb["TargetGroups"][80]["Attributes"].get("deregistration_delay.timeout_seconds") == "10"
            and lb["TargetGroups"][8443]["Targets"] == instances(stack)
        ),
        "changes applied",
    )
    stack.runner.drain(30)  # type: ignore[union-attr]
    assert after["LoadBalancerArn"] == before["LoadBalancerArn"]
    assert after["TargetGroups"][80]["TargetGroupArn"] == before["TargetGroups"][80]["TargetGroupArn"]
    assert after["TargetGroups"][8443]["Port"] == node_ports(svc)[8443]
    changed = mutating(service_calls(stack) - calls_before)
    assert not {"elbv2:CreateLoadBalancer", "elbv2:DeleteLoadBalancer", "elbv2:DeleteTargetGroup"} & set(changed)
    assert changed["elbv2:ModifyTargetGroup"] >= 1 and changed["elbv2:CreateListener"] == 1
    gone(stack, svc)
