"""Routes end to end on the devstack (EnableRoutes=true, one cluster-tagged route table per AZ): watcher process ->
nodes queue -> nodes Lambda (routes feed) -> routes queue (one FIFO group) -> route reconciler -> EC2 routes in
moto and the NetworkUnavailable condition in the emulator."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from ccm.route.trigger import ROUTES_GROUP
from devstack.stack import Stack, StackConfig

from .helpers import function_calls

SCHEDULED = {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("devstack-routes"),
        routes=True,
        route_table_per_az=True,
        resync_seconds=3600,
    )
    with Stack(config) as running:
        yield running


def pod_routes(stack: Stack) -> dict[str, dict[str, tuple[str, str]]]:
    """table -> {destination inside 10.244.0.0/16: (instance, state)} for every cluster-tagged table."""
    assert stack.world is not None
    tables = stack.aws("ec2").describe_route_tables(RouteTableIds=stack.world.cluster_route_table_ids)["RouteTables"]
    return {
        t["RouteTableId"]: {
            r["DestinationCidrBlock"]: (r.get("InstanceId", ""), r["State"])
            for r in t["Routes"]
            if r.get("DestinationCidrBlock", "").startswith("10.244.")
        }
        for t in tables
    }


def expected(stack: Stack, nodes: dict[int, str]) -> dict[str, dict[str, tuple[str, str]]]:
    """{index: instance} -> the routes every table must hold."""
    assert stack.world is not None
    want = {f"10.244.{i}.0/24": (iid, "active") for i, iid in nodes.items()}
    return {t: want for t in stack.world.cluster_route_table_ids}


def condition(stack: Stack, name: str) -> dict[str, Any] | None:
    node = json.loads(stack.core().read_node(name, _preload_content=False).data)
    return next((c for c in node["status"].get("conditions", []) if c["type"] == "NetworkUnavailable"), None)


def ec2_calls(stack: Stack) -> Counter[str]:
    """Every EC2 call the route reconciler's clients made (in its execution environments)."""
    calls = function_calls(stack, "RouteReconcilerFunction", "ccm.wiring.routes")
    return Counter({k: v for k, v in calls.items() if k.startswith("ec2:")})


def safety_pass(stack: Stack) -> None:
    """What RoutesSafetyPassRule delivers every 5 minutes (EventBridge is not part of the devstack)."""
    body = json.dumps({**SCHEDULED, "id": str(uuid.uuid4()), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ")})
    stack.sqs().send_message(QueueUrl=stack.queue_urls["RoutesQueue"], MessageBody=body, MessageGroupId=ROUTES_GROUP)
    assert stack.runner is not None
    stack.runner.drain(30)


def test_pod_cidrs_get_routes_in_every_tagged_table_and_converge_quietly(stack: Stack) -> None:
    assert stack.world is not None and stack.emulator is not None and stack.runner is not None
    instances = {i: inst.instance_id for i, inst in enumerate(stack.world.instances)}
    assert len(stack.world.cluster_route_table_ids) == 2
    stack.wait_for(lambda: pod_routes(stack) == expected(stack, instances), timeout=30, what="routes in both tables")
    stack.runner.drain(30)
    names = [inst.private_dns for inst in stack.world.instances]
    for name in names:
        cond = condition(stack, name)
        assert cond is not None
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "False",
            "RouteCreated",
            "RouteController created a route",
        )
    ec2 = stack.aws("ec2")
    for iid in instances.values():
        assert (
            ec2.describe_instance_attribute(InstanceId=iid, Attribute="sourceDestCheck")["SourceDestCheck"]["Value"]
            is False
        )
    # At the template's LogLevel (INFO: the runtime puts the root logger there) every reconcile logged its summary
    # and none failed: a reserved LogRecord key in its `extra=` once made each one raise after writing the routes.
    routes = [i for i in stack.runner.log if i.function == "RouteReconcilerFunction"]
    assert routes and all(i.outcome == "success" for i in routes), routes
    summaries = [
        r for r in stack.runner.log_records("RouteReconcilerFunction") if r.get("message") == "routes reconciled"
    ]
    assert summaries and summaries[0]["level"] == "INFO" and summaries[0]["routes_created"] >= 1
    before = ec2_calls(stack)
    assert before["ec2:ModifyInstanceAttribute"] == 3  # once per instance, however many triggers arrived
    assert before["ec2:CreateRoute"] == 6  # 3 pod CIDRs x 2 tables, no retries

    # The periodic pass over a converged cluster: reads only, no PATCH of any node, SourceDestCheck not touched.
    stack.emulator.clear_log()
    safety_pass(stack)
    calls = ec2_calls(stack) - before
    assert calls == {"ec2:DescribeRouteTables": 1, "ec2:DescribeInstances": 1}
    writes = [e for e in stack.emulator.request_log.snapshot() if e["method"] not in ("GET",)]
    assert writes == []
    assert pod_routes(stack) == expected(stack, instances)


def test_routes_follow_nodes_going_and_changing_cidr(stack: Stack) -> None:
    assert stack.world is not None
    instances = {i: inst.instance_id for i, inst in enumerate(stack.world.instances)}
    stack.wait_for(lambda: pod_routes(stack) == expected(stack, instances), timeout=30, what="initial routes")
    core = stack.core()
    gone = stack.world.instances[2].private_dns
    core.delete_node(gone)
    del instances[2]
    stack.wait_for(lambda: pod_routes(stack) == expected(stack, instances), timeout=30, what="routes of node 2 gone")

    # Node 1 re-registers with another pod CIDR (podCIDRs are immutable: a new Node object is the real case).
    moved = stack.world.node_objects()[1]
    core.delete_node(moved["metadata"]["name"])
    stack.wait_for(lambda: "10.244.1.0/24" not in next(iter(pod_routes(stack).values())), what="old CIDR unrouted")
    for key in ("uid", "resourceVersion"):
        moved["metadata"].pop(key)
    moved["spec"]["podCIDR"], moved["spec"]["podCIDRs"] = "10.244.7.0/24", ["10.244.7.0/24"]
    core.create_node(moved)
    del instances[1]
    instances[7] = stack.world.instances[1].instance_id
    stack.wait_for(lambda: pod_routes(stack) == expected(stack, instances), timeout=30, what="route for the new CIDR")
    stack.wait_for(
        lambda: (condition(stack, moved["metadata"]["name"]) or {}).get("status") == "False", what="condition"
    )


def test_a_blackhole_is_cleaned_by_the_periodic_pass(stack: Stack) -> None:
    assert stack.world is not None
    ec2 = stack.aws("ec2")
    table = stack.world.cluster_route_table_ids[0]
    doomed = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="10.244.99.0/24", InstanceId=doomed)
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="192.168.99.0/24", InstanceId=doomed)  # not ours
    ec2.terminate_instances(InstanceIds=[doomed])
    assert pod_routes(stack)[table]["10.244.99.0/24"] == (doomed, "blackhole")
    before = ec2_calls(stack)
    safety_pass(stack)
    assert "10.244.99.0/24" not in pod_routes(stack)[table]
    assert (ec2_calls(stack) - before)["ec2:DeleteRoute"] == 1
    (rt,) = ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"]
    outside = [r for r in rt["Routes"] if r.get("DestinationCidrBlock") == "192.168.99.0/24"]
    assert [r["State"] for r in outside] == ["blackhole"]  # outside the cluster CIDR: never touched
