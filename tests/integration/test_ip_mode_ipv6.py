# ruff: noqa: F811  (the fixtures imported from the other modules are parameters here)
"""Issue 24 leftovers: an IPv6-primary Service in `ip` mode, through the real Lambda handler, a dual-stack API
emulator (the kubelet gives pods an IPv6 address too; the EndpointSlice controller writes a slice per Service
family) and moto answering IPv6 target groups as AWS does (devstack.aws_faithful_elb_targets)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from ccm.contracts.messages import delta_for
from devstack.k8s_emulator import Emulator
from tests.integration.conftest import REGION, World
from tests.integration.test_ip_mode import IP_MODE, Pods, create_ip_service, health, target_groups
from tests.integration.test_one_model_per_pass import stack  # noqa: F401
from tests.integration.test_service_reconciler import invoke

A = "service.beta.kubernetes.io/aws-load-balancer-"


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    """A dual-stack cluster: Services may be IPv6-primary."""
    emu = Emulator(service_families=("IPv4", "IPv6")).start()
    emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield emu
    emu.stop()


def _ipv6_subnets() -> list[str]:
    """An IPv6 /56 for the VPC and a /64 of it for each subnet (in zone order), as a dual-stack VPC has."""
    ec2 = boto3.client("ec2", region_name=REGION)
    (vpc,) = ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.0.0.0/16"]}])["Vpcs"]
    assoc = ec2.associate_vpc_cidr_block(VpcId=vpc["VpcId"], AmazonProvidedIpv6CidrBlock=True)
    blocks = ipaddress.ip_network(assoc["Ipv6CidrBlockAssociation"]["Ipv6CidrBlock"]).subnets(new_prefix=64)
    subnets = sorted(ec2.describe_subnets()["Subnets"], key=lambda s: s["CidrBlock"])
    out = []
    for subnet, block in zip(subnets, blocks, strict=False):
        ec2.associate_subnet_cidr_block(SubnetId=subnet["SubnetId"], Ipv6CidrBlock=str(block))
        out.append(str(block))
    return out


def _ipv6_service(core: Any, pods: Pods, annotations: dict[str, str]) -> dict[str, Any]:
    return create_ip_service(core, pods, annotations, ipFamilyPolicy="PreferDualStack", ipFamilies=["IPv6"])


@pytest.fixture
def pods(emulator: Emulator, stack: dict[str, Any]) -> Pods:
    pods = Pods(emulator)
    blocks = _ipv6_subnets()
    nodes = [n["metadata"]["name"] for n in emulator.list("nodes")]
    # As Pods' IPv4 pools: alternate subnets, pods in the upper half of each /64 (the VPC CNI's prefixes).
    pods.kubelet.ipv6_pools = {name: blocks[i % 2].replace("::/64", ":8000::/65") for i, name in enumerate(nodes)}
    return pods


def _ipv6_targets(pods: Pods) -> set[tuple[str, int]]:
    return {
        (ip["ip"], 8080)
        for p in pods.set.pods()
        for ip in (p.get("status") or {}).get("podIPs") or []
        if ipaddress.ip_address(ip["ip"]).version == 6
    }


def test_an_ipv6_primary_service_on_a_dualstack_nlb_gets_an_ipv6_group_of_its_pods_ipv6_addresses(
    stack: dict[str, Any], world: World, pods: Pods
) -> None:
    pods.scale(3)
    svc = _ipv6_service(stack["core"], pods, {**IP_MODE, A + "ip-address-type": "dualstack"})
    slices = {s["addressType"] for s in pods.emu.list("endpointslices", "default")}
    assert slices == {"IPv4", "IPv6"}  # the emulator's controller: one slice per Service family
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    (tg,) = target_groups()
    assert tg["TargetType"] == "ip" and tg["IpAddressType"] == "ipv6"
    registered = {(d["Target"]["Id"], d["Target"]["Port"]) for d in health(tg["TargetGroupArn"])}
    assert registered == _ipv6_targets(pods) and len(registered) == 3
    (lb,) = boto3.client("elbv2", region_name=REGION).describe_load_balancers()["LoadBalancers"]
    assert lb["IpAddressType"] == "dualstack" and tg["LoadBalancerArns"] == [lb["LoadBalancerArn"]]


def test_an_ipv6_primary_service_on_an_ipv4_nlb_is_a_warning_and_no_aws_change(
    stack: dict[str, Any], world: World, pods: Pods
) -> None:
    core = stack["core"]
    pods.scale(2)
    svc = _ipv6_service(core, pods, IP_MODE)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    assert target_groups() == []
    assert boto3.client("elbv2", region_name=REGION).describe_load_balancers()["LoadBalancers"] == []
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    (warning,) = [e for e in events if e["type"] == "Warning"]
    assert "spec.ipFamilies[0]" in warning["message"] and "ip-address-type: dualstack" in warning["message"]
