"""Independent reads of one record made at once (ccm.aws.parallel), on in-process moto: they overlap in time, the
record's thread counts every one of them, the invocation's deadline still holds in the helper threads, and a new
execution environment's first create reads subnets, route tables and the cluster's groups together."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import pytest

from ccm import deadline
from ccm.aws import subnets
from ccm.aws.nlb import NetworkLoadBalancers
from ccm.aws.parallel import in_parallel
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cluster import Cluster
from tests.factories import service
from tests.integration.conftest import CLUSTER, REGION, World
from tests.lb_types import only

SLOW_S = 0.2  # each read held this long: sequential reads cannot overlap


class Spans:
    """When each call ran ([start, end] per operation), from the client's own before-call / after-call events."""

    def __init__(self, client: Any) -> None:
        self.spans: list[tuple[str, float, float]] = []
        self._started = threading.local()
        self._lock = threading.Lock()
        client.meta.events.register("before-call.ec2.*", self._before)
        client.meta.events.register("after-call.ec2.*", self._after)

    def _before(self, model: Any, **_: Any) -> None:
        self._started.at = time.monotonic()
        time.sleep(SLOW_S)

    def _after(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.spans.append((model.name, self._started.at, time.monotonic()))

    def of(self, name: str) -> tuple[float, float]:
        return next((start, end) for op, start, end in self.spans if op == name)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_reads_overlap_and_count_on_the_calling_thread(world: World) -> None:
    ec2 = world.clients.ec2
    spans = Spans(ec2)
    world.clients.counter.reset_thread()
    found_subnets, found_tables = in_parallel(
        world.clients.counter,
        lambda: ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["Subnets"],
        lambda: ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["RouteTables"],
    )
    assert len(found_subnets) == 2 and found_tables  # results in task order
    assert overlap(spans.of("DescribeSubnets"), spans.of("DescribeRouteTables"))
    assert world.clients.counter.thread_calls() == {"ec2:DescribeSubnets": 1, "ec2:DescribeRouteTables": 1}


def test_the_deadline_holds_in_the_helper_threads(world: World) -> None:
    ec2 = world.clients.ec2
    ran: list[str] = []
    # 1 s left: below the finish reserve, no call may start
    with deadline.invocation(lambda: 1.0), pytest.raises(deadline.OutOfTime):
        in_parallel(
            world.clients.counter,
            lambda: ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}]),
            lambda: ran.append("side task"),
        )
    assert ran == ["side task"]  # every task ran to its end before the error came up


def test_a_new_environment_reads_subnets_route_tables_and_groups_at_once(world: World) -> None:
    boto3.client("ec2", region_name=REGION).create_security_group(
        GroupName="nodes",
        Description="nodes",
        VpcId=world.vpc_id,
        TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]}
        ],
    )
    groups = SecurityGroups(world.clients, Cluster(CLUSTER, world.vpc_id))
    cluster = Cluster(CLUSTER, world.vpc_id, "ccm.aws/serverless")
    nlb = only("nlb", NetworkLoadBalancers(world.clients, cluster, groups), cluster, groups)
    nlb.ensure_load_balancer(service(), world.nodes())  # the cluster's shared groups now exist
    groups.forget_node_groups()  # a new execution environment: its caches are empty
    subnets.forget_discovery(world.vpc_id)
    spans = Spans(world.clients.ec2)
    world.clients.counter.reset_thread()
    nlb.ensure_load_balancer(service(), world.nodes())
    subnet_read, table_read = spans.of("DescribeSubnets"), spans.of("DescribeRouteTables")
    group_read = spans.of("DescribeSecurityGroups")
    assert overlap(subnet_read, table_read) and overlap(subnet_read, group_read) and overlap(table_read, group_read)
    calls = world.clients.counter.thread_calls()
    # The record's count has them all; one read of the groups settled the shared groups and the backend rule.
    assert {op: n for op, n in calls.items() if op.startswith("ec2:")} == {
        "ec2:DescribeSubnets": 1,
        "ec2:DescribeRouteTables": 1,
        "ec2:DescribeSecurityGroups": 1,
    }
