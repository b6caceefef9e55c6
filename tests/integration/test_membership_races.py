"""Regressions found by the chaos test (tests/chaos): a node change racing a Service's first reconcile, and a
host update of a Service whose annotations became invalid. In-process moto + the API server emulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccm.aws.table import ClusterTable
from ccm.aws.table_views import MembershipTable
from ccm.contracts.messages import delta_for, parse_delta
from ccm.k8s.kube import Kube
from ccm.membership.model import MemberRecord
from ccm.membership.nodes import MemberNodes
from ccm.membership.updater import MembershipUpdater
from devstack.k8s_emulator import Emulator
from tests.integration.conftest import World
from tests.integration.test_membership import (  # noqa: F401 - fixtures
    _services_queue,
    emulator,
    kube,
    service_runtime,
    table,
    user_api,
)
from tests.integration.test_service_reconciler import Ctx, create_service, sqs_event


class StoreWithARacingWriter(MembershipTable):
    """Runs `meanwhile` once, right before the next node write: another Lambda acting between two steps."""

    meanwhile: Callable[[], None] | None = None

    def write(self, name: str, record: MemberRecord | None, resource_version: int, deleted: bool = False) -> bool:
        hook, self.meanwhile = self.meanwhile, None
        if hook is not None:
            hook()
        return super().write(name, record, resource_version, deleted)


class MembersWithANodeLeavingAfterTheRead(MemberNodes):
    """The nodes Lambda processes a node deletion right after the service reconcile read the members."""

    leave: Callable[[], None] | None = None

    def for_service(self, svc: dict[str, Any]) -> list[dict[str, Any]]:
        nodes = super().for_service(svc)
        hook, self.leave = self.leave, None
        if hook is not None:
            hook()
        return nodes


def _hosts_messages(sqs: Any, url: str) -> list[str]:
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [parse_delta(m["Body"]).key for m in messages if parse_delta(m["Body"]).type == "HOSTS"]


def test_a_service_registering_between_tell_and_store_is_told(table: MembershipTable, world: World):  # noqa: F811
    racing = StoreWithARacingWriter(ClusterTable("members", world.clients))
    sqs, url = _services_queue()
    leaving = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "resourceVersion": "7"}, "spec": {}}
    racing.seed([("n1", MemberRecord("n1", "i-1", {}, 5), 5)])
    # A reconcile registers its Service after the updater listed the registered ones, before it stored the change.
    racing.meanwhile = lambda: racing.register_service("default/web", "uid-web", {})
    updater = MembershipUpdater(racing, world.clients.queue(url), clock=lambda: 1000.0)
    assert updater.on_node_delta(delta_for("Node", "DELETED", leaving)) == 1
    assert _hosts_messages(sqs, url) == ["default/web"]


def test_a_node_leaving_during_the_first_reconcile_reaches_the_new_service(
    table: MembershipTable,  # noqa: F811
    emulator: Emulator,  # noqa: F811
    kube: Kube,  # noqa: F811
    world: World,
    tmp_path: Path,
):
    sqs, url = _services_queue()
    core = user_api(tmp_path)
    runtime = service_runtime(kube, world, table)
    members = MembersWithANodeLeavingAfterTheRead(kube, table)
    runtime.reconciler.members = members
    victim = emulator.list("nodes")[0]
    updater = MembershipUpdater(table, world.clients.queue(url), clock=lambda: 1000.0)

    def node_leaves() -> None:
        emulator.delete("nodes", None, victim["metadata"]["name"])
        updater.on_node_delta(delta_for("Node", "DELETED", victim))

    members.for_service({"metadata": {}, "spec": {}})  # seeds the table from a LIST, as a first reconcile does
    members.leave = node_leaves
    svc = create_service(core)
    event = sqs_event({"sqs": sqs, "queue_url": url}, [delta_for("Service", "ADDED", svc).to_body()])
    assert runtime.handle_batch(event, Ctx()) == {"batchItemFailures": []}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=event["Records"][0]["receiptHandle"])
    # The LB got the old members; the Service was registered before the read, so the departure is announced.
    assert _hosts_messages(sqs, url) == ["default/web"]


def test_a_host_update_of_a_now_invalid_service_warns_without_retrying(
    table: MembershipTable,  # noqa: F811
    emulator: Emulator,  # noqa: F811
    kube: Kube,  # noqa: F811
    world: World,
    tmp_path: Path,
):
    sqs, url = _services_queue()
    core = user_api(tmp_path)
    runtime = service_runtime(kube, world, table)
    stack = {"sqs": sqs, "queue_url": url}
    svc = create_service(core)
    event = sqs_event(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert runtime.handle_batch(event, Ctx()) == {"batchItemFailures": []}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=event["Records"][0]["receiptHandle"])
    bad = {"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval": "soon"}
    patched = core.patch_namespaced_service(
        "web", "default", {"metadata": {"annotations": bad}}, _preload_content=False
    )
    hosts = delta_for("Service", "HOSTS", json.loads(patched.data))
    body = json.loads(hosts.to_body())
    body["object"] = {"notBefore": 0}
    event = sqs_event(stack, [json.dumps(body)])
    # Bad input is not retried into the DLQ: the record succeeds and the user gets a Warning.
    assert runtime.handle_batch(event, Ctx()) == {"batchItemFailures": []}
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    assert "SyncLoadBalancerFailed" in {e["reason"] for e in events if e["type"] == "Warning"}
