"""The nodes Lambda in one process: the Kubernetes API emulator over HTTP (real client) and in-process moto, driven
through NodeRuntime.handle_batch with Lambda-shaped SQS records. Also where the AWS calls per node join / leave /
event are measured exactly (CallCounter, botocore hooks)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client, config
from moto import mock_aws

from ccm.aws.clients import AwsClients
from ccm.aws.instances import Ec2Instances
from ccm.config import Settings
from ccm.contracts.messages import Delta, delta_for
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.node import model as m
from ccm.node import runtime as node_runtime
from ccm.node.events import EC2_EVENTS_GROUP, SAFETY_PASS_GROUP, ec2_state_change_body, scheduled_event_body
from ccm.node.runtime import NodeContext, NodeRuntime, PassContext
from devstack.k8s_emulator import Emulator

REGION = "us-east-1"

MERGE = "application/merge-patch+json"


class Ctx:
    function_name = "nodes"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodes"
    memory_limit_in_mb = 512
    aws_request_id = "req"
    log_group_name = "g"
    log_stream_name = "s"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


class Harness:
    def __init__(self, vpc_id: str, instances: list[str], clients: AwsClients, emulator: Emulator, kubeconfig: str):
        self.instance_ids = instances
        self.clients = clients
        self.emulator = emulator
        api_client = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(api_client)
        self.sqs = boto3.client("sqs", region_name=REGION)
        self.queue_url = self.sqs.create_queue(
            QueueName=f"nodes-{uuid.uuid4().hex[:8]}.fifo",
            Attributes={"FifoQueue": "true", "VisibilityTimeout": "360", "ContentBasedDeduplication": "true"},
        )["QueueUrl"]
        self.delta_calls: list[tuple[str, str | None]] = []
        self.pass_calls: list[int] = []
        self.runtime = NodeRuntime(
            Settings("test-cluster", vpc_id, region=REGION),
            Kube(from_kubeconfig(kubeconfig)),
            clients,
            Ec2Instances(clients, REGION, vpc_id),
            delta_consumers=[self._consumer],
            periodic_consumers=[lambda ctx: self.pass_calls.append(len(ctx.nodes))],
        )
        self.ec2 = boto3.client("ec2", region_name=REGION)

    def _consumer(self, delta: Delta, ctx: NodeContext) -> None:
        node = ctx.node()
        self.delta_calls.append((delta.type, m.provider_id(node) if node else None))

    def instance(self, index: int) -> dict[str, Any]:
        iid = self.instance_ids[index]
        found: dict[str, Any] = self.ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        return found

    # -- Kubernetes ---------------------------------------------------------------------------------------------
    def create_node(self, name: str, *, ready: str = "False", provider_id: str = "", tainted: bool = True, **meta: Any):
        spec: dict[str, Any] = {}
        if tainted:
            spec["taints"] = [{"key": m.UNINITIALIZED_TAINT, "effect": "NoSchedule"}]
        if provider_id:
            spec["providerID"] = provider_id
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, **meta},
            "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady"}]},
        }
        return self.emulator.create(body)

    def read(self, name: str) -> dict[str, Any] | None:
        return self.emulator.get("nodes", None, name)

    def set_ready(self, name: str, status: str) -> dict[str, Any]:
        patch = {"status": {"conditions": [{"type": "Ready", "status": status}]}}
        return json.loads(self.core.patch_node_status(name, patch, _content_type=MERGE, _preload_content=False).data)

    def events(self, name: str, uid: str | None = None) -> list[tuple[str, str]]:
        """Events about the Node by its UID (Events outlive their objects); pass the UID once the Node is gone."""
        if uid is None:
            live = self.read(name)
            assert live is not None, f"{name} is gone: pass its uid"
            uid = live["metadata"]["uid"]
        items = json.loads(self.core.list_namespaced_event("default", _preload_content=False).data)["items"]
        return [(e["type"], e["reason"]) for e in items if e["involvedObject"].get("uid") == uid]

    # -- SQS / Lambda -------------------------------------------------------------------------------------------
    def invoke(self, body: str, group: str, attempt: int | None = None) -> dict[str, Any]:
        """Send, receive and shape like Lambda; invoke; delete what did not fail (like the ESM)."""
        self.sqs.send_message(
            QueueUrl=self.queue_url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=str(uuid.uuid4())
        )
        received = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
        )["Messages"]
        arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        records = []
        for msg in received:
            attributes = dict(msg["Attributes"])
            if attempt is not None:
                attributes["ApproximateReceiveCount"] = str(attempt)
            records.append(
                {
                    "messageId": msg["MessageId"],
                    "receiptHandle": msg["ReceiptHandle"],
                    "body": msg["Body"],
                    "attributes": attributes,
                    "messageAttributes": {},
                    "md5OfBody": hashlib.md5(msg["Body"].encode()).hexdigest(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": arn,
                    "awsRegion": REGION,
                }
            )
        response: dict[str, Any] = self.runtime.handle_batch({"Records": records}, Ctx())
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        for record in records:
            if record["messageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"])
        return response

    def delta(self, name: str, event_type: str = "MODIFIED", attempt: int | None = None) -> dict[str, Any]:
        node = self.read(name)
        assert node is not None
        return self.invoke(delta_for("Node", event_type, node).to_body(), name, attempt)

    def aws_calls(self, action: Any) -> Counter[str]:
        """The AWS calls `action` makes, SQS (the retry bookkeeping) excluded."""
        before = self.clients.counter.snapshot()
        action()
        diff = self.clients.counter.snapshot() - before
        return Counter({op: n for op, n in diff.items() if not op.startswith("sqs:")})


@dataclass
class Cloud:
    vpc_id: str
    subnets: list[str]


@pytest.fixture(scope="module")
def cloud() -> Iterator[Cloud]:
    """One in-process moto for the module (starting it is most of a test's cost); each test launches its own
    instances into it, so tests never see each other's instance states."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {
            "AWS_ACCESS_KEY_ID": "t",
            "AWS_SECRET_ACCESS_KEY": "t",
            "AWS_DEFAULT_REGION": REGION,
        }.items():
            mp.setenv(key, value)
        with mock_aws():
            ec2 = boto3.client("ec2", region_name=REGION)
            vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
            subnets = [
                ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=az)["Subnet"]["SubnetId"]
                for i, az in enumerate(("us-east-1a", "us-east-1b"))
            ]
            yield Cloud(vpc, subnets)


@pytest.fixture
def h(cloud: Cloud, tmp_path: Path) -> Iterator[Harness]:
    ec2 = boto3.client("ec2", region_name=REGION)
    instances = [
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=cloud.subnets[i % 2])["Instances"][
            0
        ]["InstanceId"]
        for i in range(3)
    ]
    emu = Emulator().start()
    kubeconfig = emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    harness = Harness(cloud.vpc_id, instances, AwsClients(region=REGION), emu, kubeconfig)
    yield harness
    emu.stop()
    harness.sqs.delete_queue(QueueUrl=harness.queue_url)


NOT_READY = "node.kubernetes.io/not-ready"  # every new Node gets it from admission (TaintNodesByCondition)


def test_tainted_node_joins_by_name_then_by_provider_id(h: Harness) -> None:
    inst = h.instance(0)
    name = inst["PrivateDnsName"]
    h.create_node(name)
    calls = h.aws_calls(lambda: h.delta(name, "ADDED"))
    # Cold execution environment: the lookup by private DNS name plus the zone-ID cache fill.
    assert calls == Counter({"ec2:DescribeInstances": 1, "ec2:DescribeAvailabilityZones": 1})

    node = h.read(name)
    assert node is not None
    zone = inst["Placement"]["AvailabilityZone"]
    assert node["spec"]["providerID"] == f"aws:///{zone}/{inst['InstanceId']}"
    # Only our uninitialized taint went: admission's not-ready one is the node lifecycle controller's to remove.
    assert [t["key"] for t in node["spec"].get("taints") or []] == [NOT_READY]
    labels = node["metadata"]["labels"]
    assert labels[m.INSTANCE_TYPE] == labels[m.BETA_INSTANCE_TYPE] == inst["InstanceType"]
    assert labels[m.ZONE] == labels[m.BETA_ZONE] == zone
    assert labels[m.REGION] == labels[m.BETA_REGION] == REGION
    assert labels[m.ZONE_ID].startswith("use1-az")
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": inst["PrivateIpAddress"]}
    assert {"type": "Hostname", "address": name} in node["status"]["addresses"]
    assert h.events(name) == [("Normal", "Synced")]
    assert h.delta_calls[-1] == ("ADDED", node["spec"]["providerID"])  # consumers see the initialised node

    # Warm: a node registered with its providerID costs one DescribeInstances and nothing else.
    second = h.instance(1)
    h.create_node("second", provider_id=f"aws:///{second['Placement']['AvailabilityZone']}/{second['InstanceId']}")
    assert h.aws_calls(lambda: h.delta("second", "ADDED")) == Counter({"ec2:DescribeInstances": 1})
    assert [t["key"] for t in h.read("second")["spec"].get("taints") or []] == [NOT_READY]

    # A Ready, initialised node costs no AWS call at all.
    h.set_ready(name, "True")
    assert h.aws_calls(lambda: h.delta(name)) == Counter()


def test_missing_instance_keeps_the_taint_and_retries_then_gives_up(h: Harness) -> None:
    h.create_node("ip-10-9-9-9.ec2.internal", ready="True")
    response = h.delta("ip-10-9-9-9.ec2.internal", "ADDED")
    assert len(response["batchItemFailures"]) == 1  # retried with a 5 s visibility backoff
    assert h.sqs.receive_message(QueueUrl=h.queue_url).get("Messages") is None  # not visible yet
    node = h.read("ip-10-9-9-9.ec2.internal")
    assert m.has_taint(node, m.UNINITIALIZED_TAINT) and not m.provider_id(node)
    assert h.events("ip-10-9-9-9.ec2.internal") == [("Warning", "SyncNodeFailed")]
    # The last attempt does not fail: the Warning stands and the safety pass tries again later.
    h.sqs.purge_queue(QueueUrl=h.queue_url)
    assert h.delta("ip-10-9-9-9.ec2.internal", attempt=4) == {"batchItemFailures": []}


def test_an_instance_not_visible_yet_is_a_wait_unless_another_step_failed(h: Harness) -> None:
    name = "ip-10-9-9-8.ec2.internal"
    h.create_node(name, ready="True")
    node_runtime.metrics.clear_metrics()
    assert len(h.delta(name, "ADDED")["batchItemFailures"]) == 1
    # EC2 is eventually consistent: waiting for the instance is not a failure (ccm.retry).
    assert "NodeRecordWaiting" in node_runtime.metrics.metric_set
    assert "NodeRecordFailed" not in node_runtime.metrics.metric_set

    def boom(delta: Delta, ctx: NodeContext) -> None:
        raise RuntimeError("consumer broke")

    h.runtime._delta_consumers = [boom]
    h.sqs.purge_queue(QueueUrl=h.queue_url)
    node_runtime.metrics.clear_metrics()
    assert len(h.delta(name, attempt=2)["batchItemFailures"]) == 1
    assert "NodeRecordFailed" in node_runtime.metrics.metric_set
    assert "NodeRecordWaiting" not in node_runtime.metrics.metric_set


def test_provided_node_ip_mismatch_keeps_the_taint(h: Harness) -> None:
    name = h.instance(0)["PrivateDnsName"]
    h.create_node(name, annotations={m.PROVIDED_NODE_IP: "192.168.77.77"})
    assert h.delta(name, "ADDED") == {"batchItemFailures": []}  # not retried: the annotation must change
    node = h.read(name)
    assert m.has_taint(node, m.UNINITIALIZED_TAINT) and not m.provider_id(node)
    assert h.events(name) == [("Warning", "SyncNodeFailed")]

    h.core.patch_node(
        name,
        {"metadata": {"annotations": {m.PROVIDED_NODE_IP: h.instance(0)["PrivateIpAddress"]}}},
        _content_type=MERGE,
    )
    h.delta(name)
    assert not m.has_taint(h.read(name), m.UNINITIALIZED_TAINT)


def test_terminated_instance_deletes_only_a_not_ready_node(h: Harness) -> None:
    inst = h.instance(0)
    pid = f"aws:///{inst['Placement']['AvailabilityZone']}/{inst['InstanceId']}"
    h.create_node("doomed", provider_id=pid, tainted=False, ready="True")
    h.ec2.terminate_instances(InstanceIds=[inst["InstanceId"]])
    event = ec2_state_change_body(inst["InstanceId"], "terminated", "e-1")

    # Still Ready (the heartbeat grace period has not run out): upstream deletes only NotReady nodes.
    calls = h.aws_calls(lambda: h.invoke(event, EC2_EVENTS_GROUP))
    assert calls == Counter()
    assert h.read("doomed") is not None

    # It turns NotReady: its delta confirms the termination and deletes it.
    uid = h.read("doomed")["metadata"]["uid"]
    h.set_ready("doomed", "Unknown")
    calls = h.aws_calls(lambda: h.delta("doomed"))
    assert calls == Counter({"ec2:DescribeInstances": 1, "ec2:DescribeAvailabilityZones": 1})
    assert h.read("doomed") is None
    assert ("Normal", "DeletingNode") in h.events("doomed", uid)

    # The event path on its own: a NotReady node, then the event.
    other = h.instance(1)
    pid = f"aws:///{other['Placement']['AvailabilityZone']}/{other['InstanceId']}"
    h.create_node("doomed2", provider_id=pid, tainted=False, ready="False")
    h.ec2.terminate_instances(InstanceIds=[other["InstanceId"]])
    calls = h.aws_calls(
        lambda: h.invoke(ec2_state_change_body(other["InstanceId"], "terminated", "e-2"), EC2_EVENTS_GROUP)
    )
    assert calls == Counter({"ec2:DescribeInstances": 1})
    assert h.read("doomed2") is None


def test_stopped_instance_taints_its_node_until_ready_again(h: Harness) -> None:
    inst = h.instance(2)
    pid = f"aws:///{inst['Placement']['AvailabilityZone']}/{inst['InstanceId']}"
    h.create_node("sleepy", provider_id=pid, tainted=False, ready="Unknown")
    h.ec2.stop_instances(InstanceIds=[inst["InstanceId"]])
    h.invoke(ec2_state_change_body(inst["InstanceId"], "stopped", "e-3"), EC2_EVENTS_GROUP)
    assert m.has_taint(h.read("sleepy"), m.SHUTDOWN_TAINT)
    h.ec2.start_instances(InstanceIds=[inst["InstanceId"]])
    h.set_ready("sleepy", "True")
    assert h.aws_calls(lambda: h.delta("sleepy")) == Counter()
    assert [t["key"] for t in h.read("sleepy")["spec"]["taints"]] == [NOT_READY]  # ours went, admission's stays


def test_safety_pass_one_describe_for_all_nodes(h: Harness) -> None:
    pids = []
    for i in range(3):
        inst = h.instance(i)
        pids.append((inst, f"aws:///{inst['Placement']['AvailabilityZone']}/{inst['InstanceId']}"))
    h.create_node("alive", provider_id=pids[0][1], tainted=False, ready="True")
    h.create_node("dead", provider_id=pids[1][1], tainted=False, ready="Unknown")
    h.create_node(pids[2][0]["PrivateDnsName"], tainted=True, ready="False")  # its delta was lost
    h.create_node("foreign", provider_id="gce://p/z/n", tainted=False, ready="Unknown")
    h.ec2.terminate_instances(InstanceIds=[pids[1][0]["InstanceId"]])

    calls = h.aws_calls(lambda: h.invoke(scheduled_event_body("tick-1"), SAFETY_PASS_GROUP))
    # 2 lookups (by ID for 2 nodes, by name for the uninitialised one) + the zone-ID cache.
    assert calls == Counter({"ec2:DescribeInstances": 2, "ec2:DescribeAvailabilityZones": 1})
    assert h.read("dead") is None
    assert h.read("foreign") is not None  # not ours to judge
    alive = h.read("alive")
    assert alive["status"]["addresses"][0] == {"type": "InternalIP", "address": pids[0][0]["PrivateIpAddress"]}
    assert not m.has_taint(h.read(pids[2][0]["PrivateDnsName"]), m.UNINITIALIZED_TAINT)
    assert h.pass_calls == [3]  # the periodic consumer saw the nodes left

    # Converged: the next pass only reads.
    h.emulator.clear_log()
    calls = h.aws_calls(lambda: h.invoke(scheduled_event_body("tick-2"), SAFETY_PASS_GROUP))
    assert calls == Counter({"ec2:DescribeInstances": 1})
    assert [r for r in h.emulator.request_log if r["method"] not in ("GET",)] == []


def test_consumer_failure_retries_the_record_but_others_still_run(h: Harness) -> None:
    seen: list[str] = []

    def boom(delta: Delta, ctx: NodeContext) -> None:
        raise RuntimeError("consumer broke")

    h.runtime._delta_consumers = [boom, lambda delta, ctx: seen.append(delta.key)]
    h.create_node("n1", tainted=False, ready="True")
    response = h.delta("n1")
    assert len(response["batchItemFailures"]) == 1
    assert seen == ["n1"]


def test_deleted_delta_reaches_consumers_without_a_lookup(h: Harness) -> None:
    deleted = Delta("Node", "DELETED", "gone", "u", "1", 0.0, {})
    assert h.aws_calls(lambda: h.invoke(deleted.to_body(), "gone")) == Counter()
    assert h.delta_calls == [("DELETED", None)]


def test_malformed_message_becomes_visible_at_once(h: Harness) -> None:
    response = h.invoke(json.dumps({"detail-type": "Nope", "source": "x", "id": "1", "detail": {}}), "x")
    assert len(response["batchItemFailures"]) == 1
    again = h.sqs.receive_message(QueueUrl=h.queue_url).get("Messages", [])
    assert len(again) == 1


def test_conflict_is_resolved_by_re_planning(h: Harness) -> None:
    name = h.instance(0)["PrivateDnsName"]
    stale = h.create_node(name)
    # Someone adds a taint after we read the node: our guarded patch gets 409, we re-read and keep theirs.
    h.core.patch_node(
        name,
        {"spec": {"taints": [*stale["spec"]["taints"], {"key": "theirs", "effect": "NoSchedule"}]}},
        _content_type=MERGE,
    )
    result = h.runtime.sync.sync_one(stale)
    assert result.initialised
    assert [t["key"] for t in h.read(name)["spec"]["taints"]] == [NOT_READY, "theirs"]


def test_pass_context_shape(h: Harness) -> None:
    contexts: list[PassContext] = []
    h.runtime._periodic_consumers = [contexts.append]
    inst = h.instance(0)
    h.create_node(
        "p", provider_id=f"aws:///{inst['Placement']['AvailabilityZone']}/{inst['InstanceId']}", tainted=False
    )
    h.invoke(scheduled_event_body("tick"), SAFETY_PASS_GROUP)
    (ctx,) = contexts
    assert [m.name(n) for n in ctx.nodes] == ["p"]
    assert ctx.instances["p"] is not None and ctx.instances["p"].state == "running"


def test_driver_batches_lookups_and_refuses_ambiguous_names(h: Harness) -> None:
    from ccm.aws.instances import FILTER_CHUNK

    driver = Ec2Instances(h.clients, REGION)  # no VPC scope: the name below matches in every VPC
    real = h.instance(0)
    ghosts = [{"metadata": {"name": f"g{i}"}, "spec": {"providerID": f"aws:///z/i-{i:017x}"}} for i in range(250)]
    nodes = [*ghosts, {"metadata": {"name": "real"}, "spec": {"providerID": f"aws:///z/{real['InstanceId']}"}}]
    calls = h.aws_calls(lambda: driver.instances_metadata(nodes))
    assert calls["ec2:DescribeInstances"] == -(-251 // FILTER_CHUNK)  # one filtered call per 200 IDs
    found = driver.instances_metadata(nodes)
    assert len(found) == 251 and sum(v is not None for v in found.values()) == 1
    assert found["real"] is not None and found["real"].provider_id.endswith(real["InstanceId"])

    # The same private DNS name in a second VPC (overlapping CIDR): ambiguous without the VPC scope.
    other_vpc = h.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = h.ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    twin = h.ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet, PrivateIpAddress=real["PrivateIpAddress"]
    )["Instances"][0]
    assert twin["PrivateDnsName"] == real["PrivateDnsName"]
    unnamed = {"metadata": {"name": real["PrivateDnsName"]}, "spec": {}}
    assert driver.instances_metadata([unnamed])[real["PrivateDnsName"]] is None
    scoped = Ec2Instances(h.clients, REGION, vpc_id=real["VpcId"])
    assert scoped.instances_metadata([unnamed])[real["PrivateDnsName"]] is not None
    with pytest.raises(LookupError):
        scoped.instance_metadata({"metadata": {"name": "nobody"}, "spec": {}})
    assert scoped.instance_exists(unnamed) and not scoped.instance_shutdown(unnamed)


def test_failed_delete_is_a_warning_and_a_retry(h: Harness) -> None:
    inst = h.instance(0)
    h.create_node("stuck", provider_id=f"aws:///z/{inst['InstanceId']}", tainted=False, ready="Unknown")
    h.ec2.terminate_instances(InstanceIds=[inst["InstanceId"]])
    h.emulator.faults.fail_next(1, 500, method="DELETE", path_regex="/nodes/stuck")
    response = h.delta("stuck")
    assert len(response["batchItemFailures"]) == 1
    assert h.read("stuck") is not None
    assert sorted(h.events("stuck")) == [("Normal", "DeletingNode"), ("Warning", "DeletingNodeFailed")]
    failed = json.loads(h.core.list_namespaced_event("default", _preload_content=False).data)["items"]
    (message,) = [e["message"] for e in failed if e["reason"] == "DeletingNodeFailed"]
    assert (
        message == "Failed to delete node stuck: (500) Internal Server Error: Internal error occurred: injected fault"
    )
    h.sqs.purge_queue(QueueUrl=h.queue_url)
    assert h.delta("stuck", attempt=2) == {"batchItemFailures": []}
    assert h.read("stuck") is None
