# ruff: noqa: F811  (the fixtures imported from the other modules are parameters here)
"""An NLB created without security groups (an adopted one: AWS cannot add groups to it), through the real handler:
its client, health-check and path-MTU rules appear on the node group as CIDR rules (the backend group's one rule does
not admit an LB that does not carry it), follow its ports and ranges, and go with it."""

from __future__ import annotations

from typing import Any

import boto3
from kubernetes import client

from ccm.aws import names
from ccm.aws import security_groups_model as m
from ccm.aws.clients import CallCounter
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cluster import Cluster
from ccm.contracts.messages import delta_for
from devstack.k8s_emulator import Emulator
from tests.integration.conftest import CLUSTER, REGION, World
from tests.integration.test_ip_mode import IP_MODE, Pods, create_ip_service, hint, pods  # noqa: F401
from tests.integration.test_one_model_per_pass import stack  # noqa: F401
from tests.integration.test_service_reconciler import create_service, emulator, invoke, read  # noqa: F401

A = "service.beta.kubernetes.io/aws-load-balancer-"


def node_group(world: World) -> str:
    ec2 = boto3.client("ec2", region_name=REGION)
    found = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"][0]
    return str(found["GroupId"])


def rules_of(world: World, lb_name: str) -> set[tuple[str, int, str | None]]:
    """The node group's rules named after the LB: (protocol, port or ICMP type, source)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    group = ec2.describe_security_groups(GroupIds=[node_group(world)])["SecurityGroups"][0]
    return {
        (r.protocol, r.from_port, r.cidr)
        for r in m.rules_from_permissions(group["IpPermissions"])
        if m.lb_named_by(r.description) == lb_name
    }


def nlb_without_groups(world: World, svc: dict[str, Any], scheme: str = "internet-facing") -> str:
    """What cloud-provider-aws (or this controller before groups) made: the Service's NLB, no security group."""
    elbv2 = boto3.client("elbv2", region_name=REGION)
    subnets = [
        s["SubnetId"]
        for s in boto3.client("ec2", region_name=REGION).describe_subnets(
            Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}]
        )["Subnets"]
    ]
    name = names.load_balancer_name(svc["metadata"]["uid"])
    lb = elbv2.create_load_balancer(
        Name=name,
        Type="network",
        Scheme=scheme,
        Subnets=subnets,
        Tags=[{"Key": names.cluster_tag_key(CLUSTER), "Value": "owned"}],
    )["LoadBalancers"][0]
    assert not lb.get("SecurityGroups")
    return name


def subnet_cidrs(world: World) -> set[str]:
    ec2 = boto3.client("ec2", region_name=REGION)
    found = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["Subnets"]
    return {s["CidrBlock"] for s in found}


def test_instance_targets_rules_appear_follow_the_ranges_and_go_with_the_nlb(
    stack: dict[str, Any], world: World, emulator: Emulator
) -> None:
    core: client.CoreV1Api = stack["core"]
    svc = create_service(core, ports=[{"name": "http", "port": 80}])  # the stack defaults to NLBs
    svc = read(core) or svc
    lb_name = nlb_without_groups(world, svc)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    live = read(core)
    assert live is not None and live["status"]["loadBalancer"]["ingress"]
    node_port = live["spec"]["ports"][0]["nodePort"]
    # Open to all: the client rule on the NodePort admits the health checks on it too (as upstream).
    assert rules_of(world, lb_name) == {("tcp", node_port, "0.0.0.0/0"), ("icmp", 3, "0.0.0.0/0")}
    lb = boto3.client("elbv2", region_name=REGION).describe_load_balancers(Names=[lb_name])["LoadBalancers"][0]
    assert not lb.get("SecurityGroups")  # still none: AWS cannot add them

    # Warm and unchanged: no call for the rules.
    world.clients.counter.reset_thread()
    assert invoke(stack, [delta_for("Service", "MODIFIED", live).to_body()]) == {"batchItemFailures": []}
    assert CallCounter.mutating(world.clients.counter.thread_calls()) == 0

    # Source ranges: the clients' range instead of everyone, health checks from the NLB's subnets.
    core.patch_namespaced_service("web", "default", {"spec": {"loadBalancerSourceRanges": ["203.0.113.0/24"]}})
    live = read(core)
    assert live is not None
    assert invoke(stack, [delta_for("Service", "MODIFIED", live).to_body()]) == {"batchItemFailures": []}
    assert rules_of(world, lb_name) == {
        ("tcp", node_port, "203.0.113.0/24"),
        ("icmp", 3, "203.0.113.0/24"),
        *(("tcp", node_port, c) for c in subnet_cidrs(world)),
    }

    # Another NodePort: the new port's rules are added, the old port's revoked.
    ports = {"spec": {"ports": [{"name": "http", "port": 80, "nodePort": 30999}]}}
    core.patch_namespaced_service("web", "default", ports, _content_type="application/merge-patch+json")
    live = read(core)
    assert live is not None and live["spec"]["ports"][0]["nodePort"] == 30999 != node_port
    # Make before break: the old target group serves on the old port until its listener moves (the pass waits for
    # the new group), so both ports are open meanwhile; the new port's health checks need its rule already.
    assert invoke(stack, [delta_for("Service", "MODIFIED", live).to_body()])["batchItemFailures"]
    assert {("tcp", 30999, "203.0.113.0/24"), ("tcp", node_port, "203.0.113.0/24")} <= rules_of(world, lb_name)
    stack["sqs"].purge_queue(QueueUrl=stack["queue_url"])
    assert invoke(stack, [delta_for("Service", "SYNC", live).to_body()]) == {"batchItemFailures": []}
    assert rules_of(world, lb_name) == {
        ("tcp", 30999, "203.0.113.0/24"),
        ("icmp", 3, "203.0.113.0/24"),
        *(("tcp", 30999, c) for c in subnet_cidrs(world)),
    }

    # Deleted: its rules go with it.
    core.delete_namespaced_service("web", "default")
    deleting = read(core)
    assert invoke(stack, [delta_for("Service", "MODIFIED", deleting).to_body()]) == {"batchItemFailures": []}
    assert read(core) is None
    assert rules_of(world, lb_name) == set()


def test_ip_targets_rules_follow_the_pod_ports_through_the_endpoints_path(
    stack: dict[str, Any], world: World, emulator: Emulator, pods: Pods
) -> None:
    """A Service made before its pods: no pod port yet, then the pods' port opens from the NLB's subnets (TCP ip
    targets do not see the client) on the endpoints-only pass, without a full reconcile."""
    core: client.CoreV1Api = stack["core"]
    svc = create_ip_service(core, pods, IP_MODE)
    lb_name = nlb_without_groups(world, svc)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    assert rules_of(world, lb_name) == set()

    pods.scale(2)
    assert invoke(stack, [hint(svc, emulator)]) == {"batchItemFailures": []}
    assert rules_of(world, lb_name) == {("tcp", 8080, c) for c in subnet_cidrs(world)}

    # The same endpoints again: the rules are known, no call for them.
    world.clients.counter.reset_thread()
    assert invoke(stack, [hint(svc, emulator)]) == {"batchItemFailures": []}
    assert not any(op.startswith("ec2:") for op in world.clients.counter.thread_calls())


def test_the_sweeper_retires_the_rules_of_an_nlb_gone_without_its_delete(
    stack: dict[str, Any], world: World, emulator: Emulator
) -> None:
    core: client.CoreV1Api = stack["core"]
    svc = create_service(core, ports=[{"name": "http", "port": 80}])
    lb_name = nlb_without_groups(world, svc)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    assert rules_of(world, lb_name)
    sweeper_groups = SecurityGroups(world.clients, Cluster(CLUSTER, world.vpc_id))
    assert sweeper_groups.revoke_stale_node_rules(lambda lbs: set(lbs)) == []  # alive: kept
    assert rules_of(world, lb_name)
    stale = sweeper_groups.revoke_stale_node_rules(lambda lbs: set())  # gone (deleted by hand)
    assert {m.lb_named_by(r.description) for r in stale} == {lb_name}
    assert rules_of(world, lb_name) == set()


def test_an_internal_nlb_open_to_all_admits_its_vpc(stack: dict[str, Any], world: World, emulator: Emulator) -> None:
    core: client.CoreV1Api = stack["core"]
    svc = create_service(core, ports=[{"name": "http", "port": 80}])
    core.patch_namespaced_service("web", "default", {"metadata": {"annotations": {A + "internal": "true"}}})
    svc = read(core) or svc
    lb_name = nlb_without_groups(world, svc, "internal")
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    node_port = (read(core) or svc)["spec"]["ports"][0]["nodePort"]
    assert rules_of(world, lb_name) == {
        ("tcp", node_port, "10.0.0.0/16"),  # the VPC's block, not 0.0.0.0/0
        ("icmp", 3, "10.0.0.0/16"),
        *(("tcp", node_port, c) for c in subnet_cidrs(world)),
    }
