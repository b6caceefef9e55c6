"""The route reconcile in one process: the Kubernetes API emulator over HTTP (real client), in-process moto (with
faithful blackhole states), driven through RouteRuntime.handle_batch with Lambda-shaped records from a real
FIFO queue. AWS calls are counted with the CallCounter (botocore event hooks)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client, config

from ccm.aws import faults
from ccm.aws.clients import AwsClients
from ccm.contracts.messages import Delta, delta_for
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.route import runtime as route_runtime
from ccm.route.kube import RouteKube
from ccm.route.plan import parse_cluster_cidrs
from ccm.route.runtime import RouteRuntime, RouteSettings
from ccm.route.trigger import ROUTES_GROUP
from ccm.wiring.routes import build_route_runtime
from devstack.aws import faithful_moto_route_state
from devstack.k8s_emulator import Emulator
from devstack.queues import lambda_record
from tests.integration.conftest import CLUSTER, REGION, World
from tests.integration.test_service_reconciler import Ctx

TAG = f"kubernetes.io/cluster/{CLUSTER}"
CIDRS = parse_cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/56"])


@dataclass
class Env:
    world: World
    emulator: Emulator
    core: client.CoreV1Api
    runtime: RouteRuntime
    ec2: Any
    sqs: Any
    queue_url: str
    tables: list[str]  # the cluster-tagged tables of our VPC
    untagged: str
    faults_file: Path
    received: list[dict[str, Any]] | None = None  # the last batch's messages (receipt handles)

    def node(self, index: int, *cidrs: str, instance: str | None = None) -> dict[str, Any]:
        iid = instance or self.world.instances[index]
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{index}"},
            "spec": {"providerID": f"aws:///us-east-1a/{iid}", "podCIDRs": list(cidrs or [f"10.244.{index}.0/24"])},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        return self.emulator.create(body)

    def routes(self, table: str) -> dict[str, tuple[str, str]]:
        """destination -> (instance, state) of one table."""
        (rt,) = self.ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"]
        return {
            r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock"): (r.get("InstanceId", ""), r["State"])
            for r in rt["Routes"]
        }

    def pod_routes(self, table: str) -> dict[str, str]:
        return {d: i for d, (i, _) in self.routes(table).items() if d.startswith(("10.244.", "fd00:10:244"))}

    def deliver(self, *bodies: str, ctx: Any = None) -> tuple[dict[str, Any], Counter[str], list[dict[str, Any]]]:
        """Send, receive and hand the batch to the handler; returns (response, EC2 calls, Kubernetes writes)."""
        for i, body in enumerate(bodies):
            self.sqs.send_message(
                QueueUrl=self.queue_url, MessageBody=body, MessageGroupId=ROUTES_GROUP, MessageDeduplicationId=f"d{i}"
            )
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
        )["Messages"]
        self.received = messages
        arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"]
        records = [lambda_record(m, arn["QueueArn"], REGION) for m in messages]
        before = self.world.clients.counter.snapshot()
        self.emulator.clear_log()
        response = self.runtime.handle_batch({"Records": records}, ctx or Ctx())
        calls = self.world.clients.counter.snapshot() - before
        writes = [e for e in self.emulator.request_log.snapshot() if e["method"] != "GET"]
        for m in messages:  # what the ESM does for the records not reported failed
            failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
            if m["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        return response, Counter({k: v for k, v in calls.items() if k.startswith("ec2:")}), writes

    def condition(self, name: str) -> dict[str, Any] | None:
        node = json.loads(self.core.read_node(name, _preload_content=False).data)
        return next((c for c in node["status"]["conditions"] if c["type"] == "NetworkUnavailable"), None)

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = json.loads(self.core.list_namespaced_event("default", _preload_content=False).data)["items"]
        return [e for e in items if e["reason"] == reason]


@pytest.fixture
def env(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    faithful_moto_route_state()
    faults_file = tmp_path / "faults.json"
    faults.arm(faults_file, {})
    monkeypatch.setenv(faults.ENV_VAR, str(faults_file))  # read when the route clients are built, below
    ec2 = boto3.client("ec2", region_name=REGION)

    def table(vpc: str, tagged: bool) -> str:
        tags = [{"ResourceType": "route-table", "Tags": [{"Key": TAG, "Value": "owned"}]}] if tagged else []
        return str(ec2.create_route_table(VpcId=vpc, TagSpecifications=tags)["RouteTable"]["RouteTableId"])

    tables = sorted([table(world.vpc_id, True), table(world.vpc_id, True)])
    untagged = table(world.vpc_id, False)
    other_vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    table(other_vpc, True)  # tagged for the cluster, but in another VPC: must stay untouched
    # Routes that are not ours: outside the cluster CIDRs, whatever their target.
    for rt in (*tables, untagged):
        ec2.create_route(RouteTableId=rt, DestinationCidrBlock="192.168.0.0/24", InstanceId=world.instances[0])
        ec2.create_route(RouteTableId=rt, DestinationCidrBlock="10.244.200.0/24", InstanceId=world.instances[2])
    ec2.delete_route(RouteTableId=untagged, DestinationCidrBlock="10.244.200.0/24")
    emu = Emulator().start()
    kubeconfig = emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    api_client = config.new_client_from_config(config_file=kubeconfig)
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="routes.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "360"})
    clients = AwsClients(region=REGION, counter=world.clients.counter)
    runtime = build_route_runtime(
        RouteSettings(CLUSTER, world.vpc_id, CIDRS), RouteKube(from_kubeconfig(kubeconfig)), clients
    )
    world.clients = clients
    core = client.CoreV1Api(api_client)
    yield Env(world, emu, core, runtime, ec2, sqs, url["QueueUrl"], tables, untagged, faults_file)
    emu.stop()


def trigger(node: dict[str, Any], event_type: str = "ADDED") -> str:
    return delta_for("Node", event_type, node).to_body()


def test_routes_in_every_tagged_table_then_converged(env: Env) -> None:
    nodes = [env.node(i) for i in range(3)]
    response, calls, writes = env.deliver(*(trigger(n) for n in nodes))
    assert response == {"batchItemFailures": []}
    want = {f"10.244.{i}.0/24": env.world.instances[i] for i in range(3)}
    for table in env.tables:
        # The stale route of ours (10.244.200.0/24, no node) is gone; the one outside the cluster CIDR stays.
        assert env.pod_routes(table) == want
        assert env.routes(table)["192.168.0.0/24"] == (env.world.instances[0], "active")
    assert "10.244.0.0/24" not in env.routes(env.untagged)
    # One reconcile for the batch of three: one read of all tables, one read of the instances.
    assert calls == {
        "ec2:DescribeRouteTables": 1,
        "ec2:DescribeInstances": 1,
        "ec2:ModifyInstanceAttribute": 3,
        "ec2:CreateRoute": 6,
        "ec2:DeleteRoute": 2,
    }
    for iid in env.world.instances:
        attr = env.ec2.describe_instance_attribute(InstanceId=iid, Attribute="sourceDestCheck")
        assert attr["SourceDestCheck"]["Value"] is False
    assert [(w["method"], w["path"]) for w in writes] == [("PATCH", f"/api/v1/nodes/node-{i}/status") for i in range(3)]
    cond = env.condition("node-1")
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        "RouteCreated",
        "RouteController created a route",
    )

    # Converged: a periodic pass reads the tables and instances once, writes nothing, patches nothing.
    scheduled = json.dumps({"source": "aws.events", "detail-type": "Scheduled Event", "id": "e1"})
    response, calls, writes = env.deliver(scheduled)
    assert response == {"batchItemFailures": []}
    assert calls == {"ec2:DescribeRouteTables": 1, "ec2:DescribeInstances": 1}
    assert writes == []
    # An event-driven pass that finds nothing to do reads only the tables.
    _, calls, writes = env.deliver(trigger(nodes[0], "MODIFIED"))
    assert calls == {"ec2:DescribeRouteTables": 1} and writes == []


def test_node_added_removed_and_cidr_changed(env: Env) -> None:
    env.node(0)
    env.deliver(trigger(env.node(1)))
    _, calls, _ = env.deliver(trigger(env.node(2)))
    # One route change per table for a new node, SourceDestCheck read and turned off once.
    assert calls == {
        "ec2:DescribeRouteTables": 1,
        "ec2:DescribeInstances": 1,
        "ec2:ModifyInstanceAttribute": 1,
        "ec2:CreateRoute": 2,
    }
    gone = env.emulator.delete("nodes", None, "node-1")
    _, calls, writes = env.deliver(Delta("Node", "DELETED", "node-1", gone["metadata"]["uid"], "9", 1.0, {}).to_body())
    assert calls == {"ec2:DescribeRouteTables": 1, "ec2:DeleteRoute": 2}
    assert writes == []
    # A node re-registered under the same name with another pod CIDR (podCIDRs are immutable otherwise).
    env.emulator.delete("nodes", None, "node-2")
    env.node(2, "10.244.22.0/24")
    _, calls, _ = env.deliver(trigger(env.node(3, "10.244.3.0/24", instance=env.world.instances[1])))
    assert calls["ec2:CreateRoute"] == 4 and calls["ec2:DeleteRoute"] == 2
    for table in env.tables:
        assert env.pod_routes(table) == {
            "10.244.0.0/24": env.world.instances[0],
            "10.244.22.0/24": env.world.instances[2],
            "10.244.3.0/24": env.world.instances[1],
        }
    attr = env.ec2.describe_instance_attribute(InstanceId=env.world.instances[2], Attribute="sourceDestCheck")
    assert attr["SourceDestCheck"]["Value"] is False


def test_blackholes_are_replaced_or_deleted(env: Env) -> None:
    env.deliver(trigger(env.node(0)))
    # A route to an instance that was terminated turns into a blackhole (moto made faithful by the devstack).
    doomed = env.ec2.run_instances(ImageId="ami-12c6146b", MinCount=2, MaxCount=2)["Instances"]
    for rt in env.tables:
        env.ec2.create_route(RouteTableId=rt, DestinationCidrBlock="10.244.1.0/24", InstanceId=doomed[0]["InstanceId"])
        env.ec2.create_route(RouteTableId=rt, DestinationCidrBlock="10.244.9.0/24", InstanceId=doomed[1]["InstanceId"])
    env.ec2.terminate_instances(InstanceIds=[d["InstanceId"] for d in doomed])
    assert env.routes(env.tables[0])["10.244.9.0/24"][1] == "blackhole"
    # A route to a network interface that was deleted is a blackhole too, whatever its target kind.
    subnet = env.ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [env.world.vpc_id]}])["Subnets"][0]
    eni = env.ec2.create_network_interface(SubnetId=subnet["SubnetId"])["NetworkInterface"]["NetworkInterfaceId"]
    env.ec2.create_route(RouteTableId=env.tables[0], DestinationCidrBlock="10.244.50.0/24", NetworkInterfaceId=eni)
    env.ec2.delete_network_interface(NetworkInterfaceId=eni)
    assert env.routes(env.tables[0])["10.244.50.0/24"] == ("", "blackhole")
    # node-1 takes over the blackholed destination; 10.244.9.0/24 and 10.244.50.0/24 belong to nobody.
    _, calls, _ = env.deliver(trigger(env.node(1)))
    assert calls["ec2:ReplaceRoute"] == 2 and calls["ec2:DeleteRoute"] == 3 and "ec2:CreateRoute" not in calls
    for table in env.tables:
        assert env.routes(table)["10.244.1.0/24"] == (env.world.instances[1], "active")
        assert "10.244.9.0/24" not in env.routes(table) and "10.244.50.0/24" not in env.routes(table)
    # The contract's flat listing sees both tables (and nothing of the other VPC's tagged table).
    listed = env.runtime.routes.list_routes(CLUSTER)
    assert {r.route_table_id for r in listed} == set(env.tables)
    assert {r.destination_cidr for r in listed if r.target_instance == env.world.instances[1]} == {"10.244.1.0/24"}


def test_a_node_whose_instance_is_gone_gets_the_failure_condition(env: Env) -> None:
    env.deliver(trigger(env.node(0)), trigger(env.node(1)))
    env.ec2.terminate_instances(InstanceIds=[env.world.instances[1]])
    response, calls, _ = env.deliver(trigger(env.node(2)))
    # Not retried (retrying cannot bring the instance back): nothing is called for it, no record kept.
    assert response == {"batchItemFailures": []}
    assert "ec2:ReplaceRoute" not in calls
    cond = env.condition("node-1")
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "NoRouteCreated")
    (event,) = env.events("FailedToCreateRoute")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Node"
    assert event["message"].startswith("Could not create route ")
    assert (
        f"10.244.1.0/24 for node node-1 after 0ms: instance {env.world.instances[1]} is terminated" in event["message"]
    )
    # Once the Node object is gone too, its blackholes are deleted and nothing else changes.
    gone = env.emulator.delete("nodes", None, "node-1")
    _, calls, writes = env.deliver(Delta("Node", "DELETED", "node-1", gone["metadata"]["uid"], "9", 1.0, {}).to_body())
    assert calls == {"ec2:DescribeRouteTables": 1, "ec2:DeleteRoute": 2}
    assert writes == []


def test_a_failed_route_call_is_reported_and_retried(env: Env) -> None:
    env.node(0)
    # The first route is made, then the "Lambda dies" before it learns so: an event, the failure condition, and
    # the record kept for a retry with the backoff delay.
    faults.arm(env.faults_file, {"ec2:CreateRoute": 1})
    response, calls, _ = env.deliver(trigger(env.node(1)))
    assert len(response["batchItemFailures"]) == 1 and calls["ec2:CreateRoute"] == 4
    (event,) = env.events("FailedToCreateRoute")
    assert event["involvedObject"]["name"] == "node-0"
    assert "InjectedCrash: injected crash after ec2:CreateRoute" in event["message"]
    assert (env.condition("node-0") or {})["status"] == "True"
    assert (env.condition("node-1") or {})["status"] == "False"
    # The retry (a thorough pass: SourceDestCheck re-read) finds every route in place and clears the condition.
    assert env.received is not None
    env.sqs.change_message_visibility(
        QueueUrl=env.queue_url, ReceiptHandle=env.received[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    response, calls, writes = env.deliver()
    assert response == {"batchItemFailures": []}
    assert calls == {"ec2:DescribeRouteTables": 1, "ec2:DescribeInstances": 1}
    assert [w["path"] for w in writes] == ["/api/v1/nodes/node-0/status"]
    assert (env.condition("node-0") or {})["status"] == "False"


def test_a_reconcile_the_invocation_has_no_time_for_is_kept_without_delay_not_failed(env: Env) -> None:
    class AlmostOver(Ctx):
        def get_remaining_time_in_millis(self) -> int:
            return 12_000  # minus the 6 s kept to hand the batch back: less than one bounded AWS attempt

    env.node(0)
    route_runtime.metrics.clear_metrics()
    response, _, writes = env.deliver(trigger(env.node(1)), ctx=AlmostOver())
    assert len(response["batchItemFailures"]) == 1
    assert env.pod_routes(env.tables[0]) == {"10.244.200.0/24": env.world.instances[2]}  # nothing written
    assert writes == []
    assert "RouteReconcileFailed" not in route_runtime.metrics.metric_set
    # Kept with no delay: the next invocation continues at once.
    assert env.sqs.receive_message(QueueUrl=env.queue_url).get("Messages")


def test_ipv6_pod_cidrs_and_malformed_messages(env: Env) -> None:
    dual = env.node(0, "10.244.0.0/24", "fd00:10:244::/64")
    response, calls, _ = env.deliver("not a delta", trigger(dual))
    assert len(response["batchItemFailures"]) == 1  # only the malformed one, made visible again at once
    assert calls["ec2:CreateRoute"] == 4
    for table in env.tables:
        assert env.pod_routes(table) == {
            "10.244.0.0/24": env.world.instances[0],
            "fd00:10:244::/64": env.world.instances[0],
        }


def test_a_node_trigger_is_taken_only_from_the_nodes_function(env: Env) -> None:
    """SQS stamps each message with its sender: a node trigger not sent by the nodes function's role (SENDERS_NODES)
    is rejected unprocessed (made visible again, then dead-lettered); the schedule's event, which EventBridge sends
    (the queue policy admits only our rule), is taken whoever SQS names."""
    env.runtime.senders = {"watcher": frozenset(), "nodes": frozenset({"AROANODESROLE"}), "sweeper": frozenset()}
    node = env.node(0)
    response, calls, _ = env.deliver(trigger(node))
    assert len(response["batchItemFailures"]) == 1 and calls["ec2:CreateRoute"] == 0
    for refused in env.received:  # what the redrive policy does once its receives are used up
        env.sqs.delete_message(QueueUrl=env.queue_url, ReceiptHandle=refused["ReceiptHandle"])
    tick = json.dumps(
        {"version": "0", "id": "tick-1", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    )
    response, calls, _ = env.deliver(tick)
    assert response["batchItemFailures"] == [] and calls["ec2:CreateRoute"] == 2  # the pass routes node-0
    sender = env.received[0]["Attributes"]["SenderId"].split(":")[0]
    env.runtime.senders = {"watcher": frozenset(), "nodes": frozenset({sender}), "sweeper": frozenset()}
    response, _, _ = env.deliver(trigger(env.node(1)))
    assert response["batchItemFailures"] == []
