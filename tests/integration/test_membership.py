"""Membership table, coalesced host updates and the deferred HOSTS reconcile, on in-process moto + emulator."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client, config

from ccm.aws.clients import CallCounter
from ccm.aws.instances import Ec2Instances
from ccm.aws.table import ClusterTable
from ccm.aws.table_views import MembershipTable
from ccm.config import Settings
from ccm.contracts.messages import delta_for, parse_delta
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.membership import model
from ccm.membership.model import MemberRecord
from ccm.membership.nodes import MemberNodes
from ccm.membership.updater import MembershipUpdater
from ccm.node.events import SafetyPass
from ccm.node.runtime import NodeRuntime
from ccm.service.runtime import ServiceRuntime
from ccm.wiring.nodes import consumers
from ccm.wiring.services import build_service_runtime
from devstack.k8s_emulator import Emulator
from tests.factories import node
from tests.integration.conftest import CLUSTER, World
from tests.integration.test_service_reconciler import Ctx, create_service, receive_event, sqs_event


@pytest.fixture
def table(world: World) -> MembershipTable:
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(
        TableName="members",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return MembershipTable(ClusterTable("members", world.clients))


@pytest.fixture
def emulator(tmp_path: Path, world: World) -> Iterator[Emulator]:
    emu = Emulator().start()
    emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    for n in world.nodes():
        emu.create(n)
    yield emu
    emu.stop()


@pytest.fixture
def kube(emulator: Emulator, tmp_path: Path) -> Kube:
    return Kube(from_kubeconfig(str(tmp_path / "kubeconfig")))


def user_api(tmp_path: Path) -> client.CoreV1Api:
    """The official client, writing Services as a user (kubectl) would."""
    return client.CoreV1Api(config.new_client_from_config(config_file=str(tmp_path / "kubeconfig")))


def service_runtime(kube: Kube, world: World, table: MembershipTable) -> ServiceRuntime:
    return build_service_runtime(
        Settings(CLUSTER, world.vpc_id, default_lb_type="nlb"), kube, world.clients, table.table
    )


def test_store_orders_writes_by_resource_version_and_needs_seeding(table: MembershipTable):
    assert table.members() is None
    assert table.write("n1", MemberRecord("n1", "i-1"), 10)
    assert not table.write("n1", MemberRecord("n1", "i-old"), 9)  # older observation loses
    assert table.members() is None  # not seeded yet: readers must LIST
    table.seed([("n2", MemberRecord("n2", "i-2"), 5), ("n1", MemberRecord("n1", "i-stale"), 3)])
    assert sorted((r.name, r.instance_id) for r in table.members()) == [("n1", "i-1"), ("n2", "i-2")]
    assert table.write("n2", None, 20, deleted=True)
    table.seed([("n2", MemberRecord("n2", "i-2"), 6)])  # a late LIST cannot resurrect a deleted node
    assert [r.name for r in table.members()] == ["n1"]


def test_member_nodes_list_once_then_read_the_table(
    table: MembershipTable, kube: Kube, emulator: Emulator, world: World
):
    members = MemberNodes(kube, table)
    emulator.clear_log()
    first = members.records()
    second = members.records()
    assert sorted(r.instance_id for r in first) == sorted(world.instances)
    assert first == second
    node_lists = [r for r in emulator.request_log.snapshot() if r["path"] == "/api/v1/nodes"]
    assert len(node_lists) == 1  # the seeding LIST; afterwards the table answers


def _services_queue() -> tuple[Any, str]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="svc.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "360"})[
        "QueueUrl"
    ]
    return sqs, url


def test_updater_tells_only_affected_services_once_per_bucket(table: MembershipTable, world: World):
    sqs, url = _services_queue()
    table.seed([])
    table.register_service("default/a", "uid-a", {})
    table.register_service("default/b", "uid-b", {"role": "web"})
    table.register_service("default/c", "uid-c", {"role": "db"})
    now = [1000.0]
    updater = MembershipUpdater(table, world.clients.queue(url), clock=lambda: now[0])
    joined = node("n9", "i-9", role="web")
    joined["metadata"]["resourceVersion"] = "50"
    assert updater.on_node_delta(delta_for("Node", "ADDED", joined)) == 2  # a and b, not c
    # Same change seen again (duplicate delivery), and a second join in the same bucket: nothing more to send.
    assert updater.on_node_delta(delta_for("Node", "ADDED", joined)) == 0
    other = node("n10", "i-10", role="web")
    other["metadata"]["resourceVersion"] = "51"
    assert updater.on_node_delta(delta_for("Node", "ADDED", other)) == 0
    # A cold execution environment re-sends; SQS deduplication collapses it into the queued message.
    cold = MembershipUpdater(table, world.clients.queue(url), clock=lambda: now[0])
    third = node("n11", "i-11", role="web")
    third["metadata"]["resourceVersion"] = "52"
    assert cold.on_node_delta(delta_for("Node", "ADDED", third)) == 2
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    bodies = [parse_delta(m["Body"]) for m in messages]
    assert sorted((d.key, d.type, d.object["notBefore"]) for d in bodies) == [
        ("default/a", "HOSTS", 1005.0),
        ("default/b", "HOSTS", 1005.0),
    ]
    # Next bucket: a new message.
    now[0] = 1010.0
    leaving = delta_for("Node", "DELETED", joined)
    assert updater.on_node_delta(leaving) == 2


def test_hosts_message_waits_for_its_bucket_then_updates_targets(
    table: MembershipTable, kube: Kube, emulator: Emulator, world: World, tmp_path: Path
):
    sqs, url = _services_queue()
    core = user_api(tmp_path)
    runtime = service_runtime(kube, world, table)
    stack = {"core": core, "runtime": runtime, "sqs": sqs, "queue_url": url}

    svc = create_service(core)
    event = sqs_event(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert runtime.handle_batch(event, Ctx()) == {"batchItemFailures": []}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=event["Records"][0]["receiptHandle"])
    assert [s[0] for s in table.services()] == ["default/web"]

    # A new instance joins as a node; the updater sends a HOSTS message for the current bucket.
    ec2 = world.clients.session.client("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    new_id = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet)["Instances"][0][
        "InstanceId"
    ]
    joined = emulator.create(node("n-new", new_id))
    now = time.time()
    updater = MembershipUpdater(table, world.clients.queue(url), bucket_seconds=2, clock=lambda: now)
    assert updater.on_node_delta(delta_for("Node", "ADDED", joined)) == 1

    deferred = receive_event(stack)
    not_before = json.loads(deferred["Records"][0]["body"])["object"]["notBefore"]
    assert len(runtime.handle_batch(deferred, Ctx())["batchItemFailures"]) == 1  # waits for its bucket's end
    assert receive_event(stack)["Records"] == []  # invisible meanwhile: the group is held, not spinning
    # Visible again at the bucket's end: the delay is whole seconds (ceil), set a moment after the handler
    # started, so allow up to 1 s + that moment; poll instead of a fixed sleep (a busy CI host is slow).
    deadline = not_before + 5.0
    hosts_event = receive_event(stack)
    while not hosts_event["Records"] and time.time() < deadline:
        time.sleep(0.2)
        hosts_event = receive_event(stack)
    assert hosts_event["Records"], "visible again once the bucket is over"
    assert time.time() >= not_before, "not before the bucket's end"
    emulator.clear_log()
    world.clients.counter.reset_thread()
    assert runtime.handle_batch(hosts_event, Ctx()) == {"batchItemFailures": []}
    calls = world.clients.counter.thread_calls()
    # Only the difference, by the checkpoint's ARNs: one RegisterTargets per target group, no ELB read; the one
    # other write is the checkpoint's new target set.
    assert calls["elbv2:RegisterTargets"] == 2 and CallCounter.mutating(calls) == 3
    assert not [op for op in calls if op.startswith("elbv2:Describe")]
    assert calls["dynamodb:UpdateItem"] == 1
    assert not [r for r in emulator.request_log.snapshot() if r["path"] == "/api/v1/nodes"]  # no LIST
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    assert "UpdatedLoadBalancer" in {e["reason"] for e in events}


def test_safety_pass_removes_a_member_whose_deleted_delta_was_lost(
    table: MembershipTable, kube: Kube, emulator: Emulator, world: World, monkeypatch: pytest.MonkeyPatch
):
    """A node deleted from the API while its DELETED delta was lost (watcher restarted during an
    SQS outage, purged DLQ) stayed a member forever. The 5-minute safety pass now reconciles the table against
    its LIST: the member goes, affected Services get a HOSTS message, and a converged pass writes nothing."""
    sqs, url = _services_queue()
    MemberNodes(kube, table).records()  # seeded from the API: n0, n1, n2 are members
    table.register_service("default/all", "uid-all", {})
    table.register_service("default/db", "uid-db", {"role": "db"})  # selects none of them: not affected
    victim = world.nodes()[1]["metadata"]["name"]
    emulator.delete("nodes", None, victim)  # no delta reaches the nodes Lambda
    settings = Settings(CLUSTER, world.vpc_id, membership_table="members", services_queue_url=url)
    _, on_pass = consumers(settings, world.clients)  # what the nodes function's composition root wires
    instances = Ec2Instances(world.clients, settings.region, settings.vpc_id)
    runtime = NodeRuntime(settings, kube, world.clients, instances, delta_consumers=[], periodic_consumers=on_pass)

    runtime.on_safety_pass(SafetyPass("tick-1"))

    assert sorted(r.name for r in table.members() or []) == sorted(
        n["metadata"]["name"] for n in world.nodes() if n["metadata"]["name"] != victim
    )
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [(d.key, d.type) for d in (parse_delta(m["Body"]) for m in messages)] == [("default/all", "HOSTS")]
    # Converged: the next pass reads the table once and writes nothing.
    world.clients.counter.reset_thread()
    runtime.on_safety_pass(SafetyPass("tick-2"))
    calls = world.clients.counter.thread_calls()
    assert {op: n for op, n in calls.items() if op.startswith(("dynamodb:", "sqs:"))} == {"dynamodb:Query": 1}


def test_safety_pass_keeps_a_node_that_joined_after_its_list(
    table: MembershipTable, kube: Kube, emulator: Emulator, world: World, monkeypatch: pytest.MonkeyPatch
):
    """A member written after the pass's LIST (newer resourceVersion) is not taken for a missed deletion."""
    _, url = _services_queue()
    updater = MembershipUpdater(table, world.clients.queue(url))
    nodes, list_rv = kube.list_nodes_at()
    table.seed((n["metadata"]["name"], model.member_record(n), int(n["metadata"]["resourceVersion"])) for n in nodes)
    late = emulator.create(node("late", world.instances[0]))  # joins after the LIST; its delta is processed
    assert updater.on_node_delta(delta_for("Node", "ADDED", late)) == 0  # no Service registered yet
    assert updater.reconcile(nodes, list_rv) == []
    assert "late" in {r.name for r in table.members() or []}


def test_a_forged_node_deleted_removes_no_member_until_the_api_confirms(
    table: MembershipTable, kube: Kube, emulator: Emulator, world: World, monkeypatch: pytest.MonkeyPatch
):
    """A Node DELETED is a hint: forged (any queue sender) or stale, it must not pull a live node out of every load
    balancer. The consumer asks the API (one GET): the live node with that UID stays a member, nobody is told; the
    same name now held by a Node with another UID, or a 404, confirms the deletion."""
    sqs, url = _services_queue()
    MemberNodes(kube, table).records()  # seeded from the API
    table.register_service("default/all", "uid-all", {})
    settings = Settings(CLUSTER, world.vpc_id, membership_table="members", services_queue_url=url)
    on_delta, _ = consumers(settings, world.clients)  # what the nodes function's composition root wires
    instances = Ec2Instances(world.clients, settings.region, settings.vpc_id)
    runtime = NodeRuntime(settings, kube, world.clients, instances, delta_consumers=on_delta)
    members = sorted(n["metadata"]["name"] for n in world.nodes())
    victim = next(n for n in kube.list_nodes_at()[0] if n["metadata"]["name"] == members[1])

    emulator.clear_log()
    runtime.on_delta(delta_for("Node", "DELETED", victim))  # the victim's own UID and name: as forged as it gets
    assert sorted(r.name for r in table.members() or []) == members
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    gets = [r for r in emulator.request_log.snapshot() if r["method"] == "GET"]
    assert [r["path"] for r in gets] == [f"/api/v1/nodes/{members[1]}"]  # the one confirming GET

    emulator.delete("nodes", None, members[1])  # really gone: the API answers 404
    runtime.on_delta(delta_for("Node", "DELETED", victim))
    assert sorted(r.name for r in table.members() or []) == [m for m in members if m != members[1]]
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [(d.key, d.type) for d in (parse_delta(m["Body"]) for m in messages)] == [("default/all", "HOSTS")]


def test_a_node_deleted_for_a_name_now_held_by_another_node_removes_the_old_member(
    table: MembershipTable, kube: Kube, emulator: Emulator, world: World, monkeypatch: pytest.MonkeyPatch
):
    _sqs, url = _services_queue()
    MemberNodes(kube, table).records()
    settings = Settings(CLUSTER, world.vpc_id, membership_table="members", services_queue_url=url)
    on_delta, _ = consumers(settings, world.clients)
    instances = Ec2Instances(world.clients, settings.region, settings.vpc_id)
    runtime = NodeRuntime(settings, kube, world.clients, instances, delta_consumers=on_delta)
    members = sorted(n["metadata"]["name"] for n in world.nodes())
    old = next(n for n in kube.list_nodes_at()[0] if n["metadata"]["name"] == members[0])
    emulator.delete("nodes", None, members[0])
    emulator.create(node(members[0], "i-0ffffffffffffffff"))  # re-created under the same name: another UID
    runtime.on_delta(delta_for("Node", "DELETED", old))
    assert members[0] not in {r.name for r in table.members() or []}
