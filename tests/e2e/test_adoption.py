"""Migration from cloud-provider-aws, end to end: a Classic ELB that cloud-provider-aws made for a Service (name
`a` + UID without dashes [:32], cluster tag, service-name tag, its `k8s-elb-<name>` security group and the node
rule from it) exists BEFORE the Service reaches us; we adopt it and reconcile it in place: same LB, same group,
no second LB, and on deletion nothing is left."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devstack.stack import Stack
from tests.e2e.helpers import (
    clb,
    create_lb_service,
    gone,
    hostname,
    lb_name,
    managed_group,
    node_ports,
    node_rules_from,
    read_service,
    record_calls,
    running_stack,
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory, default_lb_type="clb") as running:
        yield running


def made_by_cloud_provider_aws(stack: Stack, svc: dict[str, Any]) -> dict[str, Any]:
    """What cloud-provider-aws leaves for a 2-port TCP Service (aws_loadbalancer.go), built with plain boto3."""
    world, elb, ec2 = stack.world, stack.aws("elb"), stack.aws("ec2")
    assert world is not None
    name, cluster_tag = lb_name(svc), f"kubernetes.io/cluster/{stack.config.cluster_name}"
    group = ec2.create_security_group(
        GroupName=f"k8s-elb-{name}",
        Description=f"Security group for Kubernetes ELB {name} (default/legacy)",
        VpcId=world.vpc_id,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": [{"Key": cluster_tag, "Value": "owned"}]}],
    )["GroupId"]
    ports = node_ports(svc)
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]} for p in ports
        ]
        + [{"IpProtocol": "icmp", "FromPort": 3, "ToPort": 4, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    # Upstream's node rule: all traffic from the LB's group, without a description.
    ec2.authorize_security_group_ingress(
        GroupId=world.node_sg_id, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}]
    )
    elb.create_load_balancer(
        LoadBalancerName=name,
        Listeners=[
            {"Protocol": "TCP", "LoadBalancerPort": p, "InstanceProtocol": "TCP", "InstancePort": np}
            for p, np in ports.items()
        ],
        Subnets=sorted(world.public_subnets.values()),
        SecurityGroups=[group],
        Scheme="internet-facing",
        Tags=[{"Key": cluster_tag, "Value": "owned"}, {"Key": "kubernetes.io/service-name", "Value": "default/legacy"}],
    )
    first = node_ports(svc)[min(ports)]
    elb.configure_health_check(
        LoadBalancerName=name,
        HealthCheck={
            "Target": f"TCP:{first}",
            "Interval": 10,
            "Timeout": 5,
            "UnhealthyThreshold": 6,
            "HealthyThreshold": 2,
        },
    )
    elb.register_instances_with_load_balancer(
        LoadBalancerName=name, Instances=[{"InstanceId": i} for i in stack.state()["instances"]]
    )
    lb = clb(stack, svc)
    assert lb is not None
    return lb


def test_a_clb_made_by_cloud_provider_aws_is_adopted_in_place(stack: Stack):
    assert stack.runner is not None
    creates = record_calls(stack, "elb", ["CreateLoadBalancer", "DeleteLoadBalancer", "DeleteLoadBalancerListeners"])
    stack.runner.pause()  # the Service exists (and has its LB) before our reconciler sees it
    try:
        svc = create_lb_service(stack, "legacy", [80, 443])
        svc = read_service(stack, "legacy")  # type: ignore[assignment]
        before = made_by_cloud_provider_aws(stack, svc)
    finally:
        stack.runner.resume()
    stack.wait_for(lambda: hostname(stack, "legacy") == before["DNSName"], timeout=60, what="the existing hostname")
    stack.runner.drain(60)
    after = clb(stack, svc)
    assert after is not None
    assert (after["CreatedTime"], after["DNSName"]) == (before["CreatedTime"], before["DNSName"])
    assert creates == []  # no second LB, no listener re-created
    names = [d["LoadBalancerName"] for d in stack.aws("elb").describe_load_balancers()["LoadBalancerDescriptions"]]
    assert names == [lb_name(svc)]
    assert stack.aws("elbv2").describe_load_balancers()["LoadBalancers"] == []
    # Reconciled in place: our ownership tag added; the upstream per-LB group is replaced by the cluster's shared
    # groups (default source ranges: the listener group of its ports, and the backend every LB carries), its node
    # rule retired and the group deleted, so the node group keeps ONE rule for every LB (docs/security.md).
    assert after["Tags"]["serverless-ccm/service-uid"] == svc["metadata"]["uid"]
    assert after["Tags"]["kubernetes.io/cluster/devstack"] == "owned"
    (upstream,) = before["SecurityGroups"]
    shared = {
        g["GroupId"]
        for g in stack.aws("ec2").describe_security_groups(
            Filters=[{"Name": "tag-key", "Values": ["serverless-ccm/role"]}]
        )["SecurityGroups"]
    }
    assert len(after["SecurityGroups"]) == 2 and set(after["SecurityGroups"]) <= shared  # listener group, backend
    stack.wait_for(lambda: managed_group(stack, svc) is None, timeout=60, what="the upstream group retired")
    assert not node_rules_from(stack, upstream)
    assert sum(len(node_rules_from(stack, g)) for g in shared) == 1  # the backend's one rule
    assert {p: d["Listener"]["InstancePort"] for p, d in after["Listeners"].items()} == node_ports(svc)
    assert sorted(i["InstanceId"] for i in after["Instances"]) == sorted(stack.state()["instances"])

    gone(stack, svc)
    assert clb(stack, svc) is None and managed_group(stack, svc) is None
    assert sum(len(node_rules_from(stack, g)) for g in shared) == 1  # the shared rule serves the next LB
