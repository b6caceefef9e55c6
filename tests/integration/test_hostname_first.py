"""A burst of creations, through the real handler (emulator over HTTP + in-process moto): a batch that creates
BURST_CREATIONS Services or more writes every hostname after the calls up to CreateLoadBalancer and hands the rest
back to the queue (ccm.retry.CONTINUATION_DELAY_SECONDS); the continuation converges to what a single-pass create
makes, with the same creates. A Service created alone is still made in one pass."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ccm.aws.errors import error_code
from ccm.aws.lbconfig import TYPE_ANNOTATION
from ccm.contracts.messages import delta_for
from tests.integration.conftest import World
from tests.integration.test_service_reconciler import (  # noqa: F401  (emulator, stack: fixtures)
    Ctx,
    create_service,
    emulator,
    read,
    receive_event,
    sqs_event,
    stack,
)

NAMES = ("web-a", "web-b", "web-c", "web-d", "web-e")  # BURST_CREATIONS: a burst
CREATES = ("elbv2:CreateLoadBalancer", "elbv2:CreateTargetGroup", "elbv2:CreateListener", "elbv2:RegisterTargets")


def deliver(stack_: dict[str, Any], event: dict[str, Any]) -> set[str]:
    """Like the ESM: invoke, delete what succeeded; returns the ids of the records handed back."""
    response: dict[str, Any] = stack_["runtime"].handle_batch(event, Ctx())
    back = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    for record in event["Records"]:
        if record["messageId"] not in back:
            stack_["sqs"].delete_message(QueueUrl=stack_["queue_url"], ReceiptHandle=record["receiptHandle"])
    return back


def end_state(world: World, hostname: str) -> tuple[list[int], list[int], list[int]]:
    """(listener ports, target group ports, targets per group) of the LB answering `hostname`."""
    elbv2 = world.clients.session.client("elbv2")
    (lb,) = [lb for lb in elbv2.describe_load_balancers()["LoadBalancers"] if lb["DNSName"] == hostname]
    listeners = elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]
    try:
        groups = elbv2.describe_target_groups(LoadBalancerArn=lb["LoadBalancerArn"])["TargetGroups"]
    except ClientError as err:  # moto's answer for an LB without target groups
        assert error_code(err) == "TargetGroupNotFound"
        groups = []
    targets = [
        len(elbv2.describe_target_health(TargetGroupArn=tg["TargetGroupArn"])["TargetHealthDescriptions"])
        for tg in groups
    ]
    return sorted(ls["Port"] for ls in listeners), sorted(tg["Port"] for tg in groups), sorted(targets)


def warm(stack_: dict[str, Any], lb_type: str = "nlb") -> None:
    """One create first: the cluster's shared security groups exist before a burst's passes run in parallel."""
    svc = typed(stack_["core"], create_service(stack_["core"], f"warm-{lb_type}"), lb_type)
    body = delta_for("Service", "ADDED", svc).to_body()
    assert deliver(stack_, sqs_event(stack_, [body], f"default/warm-{lb_type}")) == set()


def typed(core: Any, svc: dict[str, Any], lb_type: str) -> dict[str, Any]:
    if lb_type == "nlb":
        return svc
    patched: dict[str, Any] = json.loads(
        core.patch_namespaced_service(
            svc["metadata"]["name"],
            "default",
            {"metadata": {"annotations": {TYPE_ANNOTATION: lb_type}}},
            _preload_content=False,
            _content_type="application/merge-patch+json",
        ).data
    )
    return patched


def node_ports(svc: dict[str, Any]) -> list[int]:
    return sorted(port["nodePort"] for port in svc["spec"]["ports"])


def creates(world: World, before: Counter[str]) -> dict[str, int]:
    after = world.clients.counter.snapshot()
    return {op: after[op] - before[op] for op in CREATES if after[op] - before[op]}


def events_of(core: Any, svc: dict[str, Any]) -> list[tuple[str, str]]:
    items = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    uid = svc["metadata"]["uid"]
    return sorted((e["type"], e["reason"]) for e in items if e["involvedObject"].get("uid") == uid)


def test_a_burst_writes_every_hostname_first_and_the_continuation_converges(
    stack: dict[str, Any],  # noqa: F811
    world: World,
) -> None:
    core = stack["core"]
    alone = create_service(core, "alone")
    before = world.clients.counter.snapshot()
    assert deliver(stack, sqs_event(stack, [delta_for("Service", "ADDED", alone).to_body()], "default/alone")) == set()
    single = creates(world, before)
    alone = read(core, "alone")
    assert alone is not None
    single_state = end_state(world, alone["status"]["loadBalancer"]["ingress"][0]["hostname"])
    assert single_state[1] == node_ports(alone)  # target groups on the Service's node ports
    assert single == {
        "elbv2:CreateLoadBalancer": 1,
        "elbv2:CreateTargetGroup": 2,
        "elbv2:CreateListener": 2,
        "elbv2:RegisterTargets": 2,
    }

    services = [create_service(core, name) for name in NAMES]
    event: dict[str, Any] = {"Records": []}
    for svc in services:
        name = svc["metadata"]["name"]
        event["Records"] += sqs_event(stack, [delta_for("Service", "ADDED", svc).to_body()], f"default/{name}")[
            "Records"
        ]
    assert len(event["Records"]) == len(NAMES)
    before = world.clients.counter.snapshot()
    handed_back = deliver(stack, event)
    # Not visible at once: the delay keeps the burst's CreateLoadBalancer calls ahead of the rest. Ended here
    # instead of sleeping it out.
    assert receive_event(stack)["Records"] == []
    for record in event["Records"]:
        stack["sqs"].change_message_visibility(
            QueueUrl=stack["queue_url"], ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
        )

    # First pass: every hostname written, nothing made after CreateLoadBalancer, each record handed back.
    assert handed_back == {r["messageId"] for r in event["Records"]}
    assert creates(world, before) == {"elbv2:CreateLoadBalancer": len(NAMES)}
    hostnames = {}
    for name in NAMES:
        live = read(core, name)
        assert live is not None
        hostnames[name] = live["status"]["loadBalancer"]["ingress"][0]["hostname"]
        assert end_state(world, hostnames[name]) == ([], [], [])
        # A continuation is neither a failure nor a wait: no Warning.
        assert events_of(core, live) == [("Normal", "EnsuringLoadBalancer")]

    again = receive_event(stack)
    assert sorted(r["body"] for r in again["Records"]) == sorted(r["body"] for r in event["Records"])
    assert deliver(stack, again) == set()

    # The continuation converges to what a single pass makes, with the same creates in all.
    assert creates(world, before) == {op: n * len(NAMES) for op, n in single.items()}
    for name in NAMES:
        live = read(core, name)
        assert live is not None
        assert live["status"]["loadBalancer"]["ingress"][0]["hostname"] == hostnames[name]
        listeners, groups, targets = end_state(world, hostnames[name])
        assert (listeners, groups, targets) == (single_state[0], node_ports(live), single_state[2])
        assert ("Normal", "EnsuredLoadBalancer") in events_of(core, live)
        assert not [e for e in events_of(core, live) if e[0] == "Warning"]
    assert receive_event(stack)["Records"] == []


def test_a_crash_right_after_the_hostname_converges_with_no_leak(
    stack: dict[str, Any],  # noqa: F811
    world: World,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first pass dies between the status write and the deferral: the record comes back as a failure would
    (its visibility timeout), and the retry makes the rest; one LB, no second one, nothing orphaned."""
    core = stack["core"]
    warm(stack)
    services = [create_service(core, name) for name in NAMES]
    event: dict[str, Any] = {"Records": []}
    for svc in services:
        event["Records"] += sqs_event(
            stack, [delta_for("Service", "ADDED", svc).to_body()], f"default/{svc['metadata']['name']}"
        )["Records"]
    runtime = stack["runtime"]

    def crash(*_: Any, **__: Any) -> None:
        raise SystemExit("crash after the status write")  # not an Exception: nothing of ours catches it

    monkeypatch.setattr(runtime, "defer", crash)
    with pytest.raises(SystemExit):
        runtime.handle_batch(event, Ctx())
    monkeypatch.undo()
    elbv2 = world.clients.session.client("elbv2")
    assert len(elbv2.describe_target_groups()["TargetGroups"]) == 2  # the warm-up's: none of the burst's yet
    # The retry: the same records again (here at once; Lambda after the visibility timeout), one at a time.
    for record in event["Records"]:
        assert deliver(stack, {"Records": [record]}) == set()
    lbs = elbv2.describe_load_balancers()["LoadBalancers"]
    assert len(lbs) == len(services) + 1
    for svc in services:
        live = read(core, svc["metadata"]["name"])
        assert live is not None
        listeners, groups, targets = end_state(world, live["status"]["loadBalancer"]["ingress"][0]["hostname"])
        assert listeners == [80, 443] and len(groups) == 2 and min(targets) > 0
    assert len(elbv2.describe_target_groups()["TargetGroups"]) == 2 * (len(services) + 1)


def test_classic_elbs_of_a_burst_are_made_in_one_pass(stack: dict[str, Any], world: World) -> None:  # noqa: F811
    """A Classic ELB's CreateLoadBalancer makes its listeners, and it serves once its instances are registered:
    nothing to gain from a continuation, so a burst of them is made as before."""
    core = stack["core"]
    warm(stack, "clb")
    event: dict[str, Any] = {"Records": []}
    for name in NAMES:
        svc = typed(core, create_service(core, name), "clb")
        event["Records"] += sqs_event(stack, [delta_for("Service", "ADDED", svc).to_body()], f"default/{name}")[
            "Records"
        ]
    assert deliver(stack, event) == set()
    elb = world.clients.session.client("elb")
    described = elb.describe_load_balancers()["LoadBalancerDescriptions"]
    assert len(described) == len(NAMES) + 1 and all(len(lb["Instances"]) == len(world.nodes()) for lb in described)
