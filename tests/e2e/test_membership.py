"""Node-driven target updates end to end: a Node change -> watcher -> nodes queue -> nodes Lambda (membership
table + a coalesced HOSTS message in the Service's own FIFO group) -> service Lambda -> targets in ELBv2."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from ccm import predicates as p
from ccm.node.events import SAFETY_PASS_GROUP, scheduled_event_body
from devstack.stack import Stack, StackConfig
from tests.e2e.helpers import aws_state, create_service, hostname, read_service
from tests.e2e.test_nodes import create_node, launch, provider_id, send_event

MERGE = "application/merge-patch+json"
BUCKET_S = 2  # short coalescing buckets keep the test quick; production uses 15 s


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("membership"),
        concurrency=3,
        resync_seconds=3600,
        extra_env={"HOST_UPDATE_BUCKET_SECONDS": str(BUCKET_S)},
    )
    with Stack(config) as running:
        yield running


def targets(stack: Stack, svc: dict) -> list[str] | None:
    state = aws_state(stack, svc)
    if not state or not isinstance(state["listeners"], dict) or not state["listeners"]:
        return None
    sets = {tuple(t) for _, _, t in state["listeners"].values()}
    return list(next(iter(sets))) if len(sets) == 1 else None


def test_excluded_node_leaves_and_a_joining_node_enters_every_target_group(stack: Stack):
    create_service(stack, "members", [80, 443])
    stack.wait_for(lambda: hostname(stack, "members"), what="hostname")
    svc = read_service(stack, "members")
    initial = sorted(stack.state()["instances"])
    stack.wait_for(lambda: targets(stack, svc) == initial, what="all nodes registered")

    core = stack.core()
    victim = core.list_node().items[0].metadata.name
    victim_id = next(i for i in initial if i in core.read_node(victim).spec.provider_id)
    core.patch_node(victim, {"metadata": {"labels": {p.EXCLUDE_LABEL: "true"}}})
    remaining = [i for i in initial if i != victim_id]
    stack.wait_for(lambda: targets(stack, svc) == remaining, timeout=60, what="excluded node deregistered")

    # A new node joins (kubelet registers it tainted; the nodes Lambda initialises it, then it becomes a member).
    inst = launch(stack)
    create_node(stack, inst["PrivateDnsName"], ready="True", provider=provider_id(inst))
    grown = sorted([*remaining, inst["InstanceId"]])
    stack.wait_for(lambda: targets(stack, svc) == grown, timeout=60, what="new node registered")

    # Host updates ran in the Service's own group and did not touch its status.
    live = read_service(stack, "members")
    assert live["status"]["loadBalancer"]["ingress"][0]["hostname"] == hostname(stack, "members")
    events = stack.core().list_namespaced_event("default").items
    assert any(e.reason == "UpdatedLoadBalancer" and e.involved_object.uid == live["metadata"]["uid"] for e in events)


def test_a_burst_of_joins_is_coalesced_into_few_target_updates(stack: Stack):
    create_service(stack, "burst", [80, 443])
    stack.wait_for(lambda: hostname(stack, "burst"), what="hostname")
    svc = read_service(stack, "burst")
    before = set(targets(stack, svc) or [])
    stack.runner.drain(30)

    def host_updates() -> int:
        events = stack.core().list_namespaced_event("default").items
        uid = svc["metadata"]["uid"]
        return sum(1 for e in events if e.reason == "UpdatedLoadBalancer" and e.involved_object.uid == uid)

    updates_before = host_updates()
    joined = []
    started = time.monotonic()
    for _ in range(6):
        inst = launch(stack)
        create_node(stack, inst["PrivateDnsName"], ready="True", provider=provider_id(inst))
        joined.append(inst["InstanceId"])
    burst_s = time.monotonic() - started
    expected = sorted(before | set(joined))
    stack.wait_for(lambda: targets(stack, svc) == expected, timeout=90, what="every joined node registered")
    stack.runner.drain(30)
    updates = host_updates() - updates_before
    # Each host update is one RegisterTargets per target group. Without coalescing there would be 6 (one per join);
    # with buckets of BUCKET_S seconds there is at most one per bucket the burst touched (+1 for a boundary).
    assert 1 <= updates <= min(len(joined) - 1, int(burst_s // BUCKET_S) + 2), (updates, burst_s)


def test_a_node_deleted_while_the_watcher_was_down_leaves_every_target_group_at_the_safety_pass(stack: Stack):
    """The watcher is stateless: restarted after a node was deleted, its relist cannot report the deletion. The
    5-minute safety pass (EventBridge tick on the nodes queue) reconciles the membership table against the API."""
    create_service(stack, "healing", [80])
    stack.wait_for(lambda: hostname(stack, "healing"), what="hostname")
    svc = read_service(stack, "healing")
    stack.wait_for(lambda: targets(stack, svc), timeout=60, what="targets registered")
    before = targets(stack, svc) or []
    core = stack.core()
    victim = next(n for n in core.list_node().items if any(i in n.spec.provider_id for i in before))
    victim_id = next(i for i in before if i in victim.spec.provider_id)
    stack.runner.drain(30)

    stack.stop_watcher()
    core.delete_node(victim.metadata.name)
    stack.start_watcher()
    stack.runner.drain(30)
    assert victim_id in (targets(stack, svc) or []), "no delta told anyone: the stale member is still a target"

    send_event(stack, scheduled_event_body(str(uuid.uuid4())), SAFETY_PASS_GROUP)
    remaining = sorted(i for i in before if i != victim_id)
    stack.wait_for(lambda: targets(stack, svc) == remaining, timeout=60, what="stale member deregistered")
