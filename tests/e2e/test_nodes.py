"""Node initialisation and lifecycle end to end: kubelet-like Node objects in the emulator -> watcher process ->
nodes FIFO queue (moto server) -> runner -> the real nodes handler -> EC2 (moto server) -> the Node in the emulator.

moto has no EventBridge -> SQS delivery to rely on, so the tests send what the rules of template.yaml would
deliver: EventBridge-shaped bodies on the nodes queue with the rules' static message groups (content-based
deduplication, as for EventBridge).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

from kubernetes import client

from ccm.node import model as m
from ccm.node.events import EC2_EVENTS_GROUP, SAFETY_PASS_GROUP, ec2_state_change_body, scheduled_event_body
from devstack.aws import NODE_IMAGE_ID
from devstack.stack import Stack

from .helpers import function_calls

MERGE = "application/merge-patch+json"


def launch(stack: Stack, instance_type: str = "m5.large") -> dict[str, Any]:
    assert stack.world is not None
    ec2 = stack.aws("ec2")
    az = stack.world.azs[0]
    inst: dict[str, Any] = ec2.run_instances(
        ImageId=NODE_IMAGE_ID,
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        SubnetId=stack.world.private_subnets[az],
        SecurityGroupIds=[stack.world.node_sg_id],
    )["Instances"][0]
    return inst


def provider_id(inst: dict[str, Any]) -> str:
    return f"aws:///{inst['Placement']['AvailabilityZone']}/{inst['InstanceId']}"


def create_node(
    stack: Stack,
    name: str,
    *,
    ready: str = "False",
    provider: str = "",
    tainted: bool = True,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as a kubelet with --cloud-provider=external registers it (uninitialized taint, NotReady)."""
    spec: dict[str, Any] = {}
    if tainted:
        spec["taints"] = [{"key": m.UNINITIALIZED_TAINT, "effect": "NoSchedule"}]
    if provider:
        spec["providerID"] = provider
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": annotations or {}},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady"}]},
    }
    return json.loads(stack.core().create_node(body, _preload_content=False).data)


def read_node(stack: Stack, name: str) -> dict[str, Any] | None:
    try:
        return json.loads(stack.core().read_node(name, _preload_content=False).data)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def set_ready(stack: Stack, name: str, status: str) -> None:
    patch = {"status": {"conditions": [{"type": "Ready", "status": status, "reason": "Test"}]}}
    stack.core().patch_node_status(name, patch, _content_type=MERGE)


def node_events(stack: Stack, node: dict[str, Any]) -> list[tuple[str, str]]:
    """Events about this Node, matched by UID: Events outlive their object (a predecessor of the same name)."""
    items = json.loads(stack.core().list_namespaced_event("default", _preload_content=False).data)["items"]
    uid = node["metadata"]["uid"]
    return [(e["type"], e["reason"]) for e in items if e["involvedObject"].get("uid") == uid]


def send_event(stack: Stack, body: str, group: str) -> None:
    # What the EventBridge rules do: static group, no deduplication id (the queue hashes the content).
    stack.sqs().send_message(QueueUrl=stack.queue_urls["NodesQueue"], MessageBody=body, MessageGroupId=group)


def node_calls(stack: Stack) -> Counter[str]:
    """AWS calls made so far by the node controller the runner hosts (its runtime's CallCounter, in every execution
    environment). Excluded: SQS and the membership table (DynamoDB), which the membership consumer uses and
    tests/e2e/test_membership.py covers."""
    calls = function_calls(stack, "NodeReconcilerFunction", "ccm.wiring.nodes")
    return Counter({op: n for op, n in calls.items() if not op.startswith(("sqs:", "dynamodb:"))})


def settle(stack: Stack) -> None:
    assert stack.runner is not None
    stack.runner.drain(30)


def test_tainted_node_joins_and_is_initialised(stack: Stack) -> None:
    settle(stack)
    before = node_calls(stack)
    inst = launch(stack)
    name = inst["PrivateDnsName"]
    created = create_node(stack, name)
    node = stack.wait_for(
        lambda: (n := read_node(stack, name)) and not m.has_taint(n, m.UNINITIALIZED_TAINT) and n,
        what="uninitialized taint removed",
    )
    assert node["spec"]["providerID"] == provider_id(inst)
    labels = node["metadata"]["labels"]
    zone = inst["Placement"]["AvailabilityZone"]
    assert labels[m.INSTANCE_TYPE] == labels[m.BETA_INSTANCE_TYPE] == "m5.large"
    assert labels[m.ZONE] == labels[m.BETA_ZONE] == zone
    assert labels[m.REGION] == labels[m.BETA_REGION] == stack.config.region
    assert labels[m.ZONE_ID]
    addresses = [(a["type"], a["address"]) for a in node["status"]["addresses"]]
    assert addresses[0] == ("InternalIP", inst["PrivateIpAddress"])
    assert ("InternalDNS", name) in addresses and ("Hostname", name) in addresses
    stack.wait_for(lambda: ("Normal", "Synced") in node_events(stack, created), what="Synced event")
    settle(stack)
    joined = node_calls(stack) - before
    # One lookup; our two writes come back as deltas of a Ready=False node (a live kubelet): no lookup for them.
    # DescribeAvailabilityZones only fills the per-environment zone-ID cache on the first join.
    assert joined["ec2:DescribeInstances"] == 1 and joined["ec2:DescribeAvailabilityZones"] <= 1, joined
    assert set(joined) <= {"ec2:DescribeInstances", "ec2:DescribeAvailabilityZones"}, joined
    print(f"\nAWS calls for one node join (NotReady at registration): {dict(joined)}")

    # The kubelet turns Ready: no AWS call at all.
    before = node_calls(stack)
    set_ready(stack, name, "True")
    settle(stack)
    assert node_calls(stack) - before == Counter()


def test_provided_node_ip_mismatch_keeps_the_taint(stack: Stack) -> None:
    inst = launch(stack)
    name = inst["PrivateDnsName"]
    created = create_node(stack, name, annotations={m.PROVIDED_NODE_IP: "10.123.45.67"})
    stack.wait_for(lambda: ("Warning", "SyncNodeFailed") in node_events(stack, created), what="Warning event")
    settle(stack)
    node = read_node(stack, name)
    assert node is not None and m.has_taint(node, m.UNINITIALIZED_TAINT)
    assert not m.provider_id(node) and m.INSTANCE_TYPE not in node["metadata"]["labels"]
    assert ("Normal", "Synced") not in node_events(stack, created)


def test_terminated_instance_event_deletes_its_not_ready_node(stack: Stack) -> None:
    inst = launch(stack)
    name = f"dying-{uuid.uuid4().hex[:6]}"
    created = create_node(stack, name, provider=provider_id(inst), tainted=False, ready="Unknown")
    settle(stack)  # its delta was judged while the instance still ran: nothing to do
    assert read_node(stack, name) is not None
    stack.aws("ec2").terminate_instances(InstanceIds=[inst["InstanceId"]])
    before = node_calls(stack)
    send_event(stack, ec2_state_change_body(inst["InstanceId"], "terminated", str(uuid.uuid4())), EC2_EVENTS_GROUP)
    stack.wait_for(lambda: read_node(stack, name) is None, what="node deleted")
    assert ("Normal", "DeletingNode") in node_events(stack, created)
    settle(stack)
    left = node_calls(stack) - before
    assert left == Counter({"ec2:DescribeInstances": 1}), left
    print(f"\nAWS calls for one node leave (EC2 terminated event): {dict(left)}")


def test_ready_node_is_kept_until_it_turns_not_ready(stack: Stack) -> None:
    inst = launch(stack)
    name = f"ready-{uuid.uuid4().hex[:6]}"
    create_node(stack, name, provider=provider_id(inst), tainted=False, ready="True")
    stack.aws("ec2").terminate_instances(InstanceIds=[inst["InstanceId"]])
    send_event(stack, ec2_state_change_body(inst["InstanceId"], "terminated", str(uuid.uuid4())), EC2_EVENTS_GROUP)
    settle(stack)
    # Upstream deletes only NotReady nodes: the terminated instance's kubelet stops heartbeating shortly.
    assert read_node(stack, name) is not None
    set_ready(stack, name, "Unknown")  # the node lifecycle controller's verdict after the grace period
    stack.wait_for(lambda: read_node(stack, name) is None, what="node deleted once NotReady")


def test_stopped_instance_taints_its_node_until_ready_again(stack: Stack) -> None:
    inst = launch(stack)
    name = f"stopped-{uuid.uuid4().hex[:6]}"
    create_node(stack, name, provider=provider_id(inst), tainted=False, ready="Unknown")
    settle(stack)
    ec2 = stack.aws("ec2")
    ec2.stop_instances(InstanceIds=[inst["InstanceId"]])
    send_event(stack, ec2_state_change_body(inst["InstanceId"], "stopped", str(uuid.uuid4())), EC2_EVENTS_GROUP)
    node = stack.wait_for(
        lambda: (n := read_node(stack, name)) and m.has_taint(n, m.SHUTDOWN_TAINT) and n, what="shutdown taint"
    )
    assert {"key": m.SHUTDOWN_TAINT, "effect": "NoSchedule"} in node["spec"]["taints"]
    ec2.start_instances(InstanceIds=[inst["InstanceId"]])
    set_ready(stack, name, "True")
    stack.wait_for(
        lambda: (n := read_node(stack, name)) and not m.has_taint(n, m.SHUTDOWN_TAINT), what="shutdown taint removed"
    )


def test_safety_pass_deletes_a_dead_node_without_any_event(stack: Stack) -> None:
    inst = launch(stack)
    name = f"lost-{uuid.uuid4().hex[:6]}"
    created = create_node(stack, name, provider=provider_id(inst), tainted=False, ready="Unknown")
    settle(stack)
    stack.aws("ec2").terminate_instances(InstanceIds=[inst["InstanceId"]])  # and its EventBridge event is lost
    settle(stack)
    assert read_node(stack, name) is not None
    send_event(stack, scheduled_event_body(str(uuid.uuid4())), SAFETY_PASS_GROUP)
    stack.wait_for(lambda: read_node(stack, name) is None, what="node deleted by the safety pass")
    assert ("Normal", "DeletingNode") in node_events(stack, created)
    # The seeded, initialised nodes are untouched.
    assert stack.world is not None
    for seeded in stack.world.node_objects():
        assert read_node(stack, seeded["metadata"]["name"]) is not None


def test_nothing_reached_the_nodes_dlq(stack: Stack) -> None:
    settle(stack)
    attrs = stack.sqs().get_queue_attributes(
        QueueUrl=stack.queue_urls["NodesDLQ"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"
    assert stack.runner is not None
    assert not [i for i in stack.runner.log if i.function == "NodeReconcilerFunction" and i.outcome == "error"]
