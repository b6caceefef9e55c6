"""Odd inputs end to end: bodies that are not deltas, and Services with odd but legal shapes."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from ccm.aws.lbconfig import parse_load_balancer_config
from ccm.aws.nlb_model import desired_nlb
from ccm.contracts import kube as p
from devstack.stack import Stack
from tests.chaos import world as w
from tests.e2e.helpers import lb_name

BAD_BODIES = {
    "not-json": "this is not JSON {",
    "no-fields": '{"v": 1, "kind": "Service"}',
    "future-schema": json.dumps({"v": 99, "kind": "Service", "type": "ADDED", "key": "x/y"}),
    "bad-key": json.dumps(
        {
            "v": 1,
            "kind": "Service",
            "type": "ADDED",
            "key": "no-slash",
            "uid": "u",
            "resourceVersion": "1",
            "observedAt": 1.0,
            "object": {},
        }
    ),
    # Legal for SQS (< 256 KiB) but nothing we could have sent: a huge object that is not a delta.
    "oversized": json.dumps({"v": 1, "kind": "Service", "padding": "x" * 250_000}),
}


@pytest.fixture
def ns(stack: Stack) -> Iterator[str]:
    name = f"odd-{uuid.uuid4().hex[:8]}"
    assert stack.emulator is not None
    stack.emulator.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    for svc in stack.emulator.list("services", name):
        w.delete_service(stack, name, svc["metadata"]["name"])
    names = [s["metadata"]["name"] for s in stack.emulator.list("services", name)]
    gone = {n: w.Expected(lb=True, valid=True, deleted=True) for n in names}
    problems = w.quiesce(stack, lambda: w.violations(stack, name, gone, stack.baseline), 60)  # type: ignore[attr-defined]
    assert not problems, problems


def wait_hostname(stack: Stack, ns: str, name: str, timeout: float = 60) -> str:
    def host() -> str | None:
        svc = w.read(stack, "services", ns, name) or {}
        ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return ingress[0].get("hostname") if ingress else None

    hostname: str = stack.wait_for(host, timeout=timeout, what=f"{ns}/{name} hostname")
    return hostname


def events_of(stack: Stack, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Events about this object, matched by UID: Events outlive their object (a predecessor of the same name)."""
    ns, uid = obj["metadata"]["namespace"], obj["metadata"]["uid"]
    items = json.loads(stack.core().list_namespaced_event(ns, _preload_content=False).data)["items"]
    return [(e["type"], e["reason"], e["message"]) for e in items if e["involvedObject"].get("uid") == uid]


def test_bodies_that_are_not_deltas_are_dead_lettered_without_blocking_their_batch(stack: Stack, ns: str) -> None:
    assert stack.runner is not None
    sqs, url = w.aws(stack, "sqs"), stack.queue_urls["ServicesQueue"]
    # Stop the Lambdas so the neighbour's delta and the bad bodies arrive in the same batch.
    stack.runner.pause()
    try:
        w.create_service(stack, w.service_body(ns, "neighbour", True, [(80, "TCP")], {}))
        stack.wait_for(lambda: w.queue_depth(stack, "ServicesQueue") >= 1, what="the neighbour's delta")
        bad_ids = {
            sqs.send_message(
                QueueUrl=url, MessageBody=body, MessageGroupId=f"{ns}/{label}", MessageDeduplicationId=str(uuid.uuid4())
            )["MessageId"]
            for label, body in BAD_BODIES.items()
        }
    finally:
        stack.runner.resume()
    wait_hostname(stack, ns, "neighbour")
    stack.wait_for(
        lambda: w.queue_depth(stack, "ServicesDLQ") == len(BAD_BODIES), timeout=60, what="bad bodies dead-lettered"
    )
    # The first batch held good and bad records: only the bad ones were reported failed.
    mixed = [i for i in stack.runner.log if bad_ids & set(i.message_ids) and set(i.message_ids) - bad_ids]
    assert mixed and all(i.outcome == "partial" and set(i.failed_ids) <= bad_ids for i in mixed)

    dlq = stack.queue_urls["ServicesDLQ"]
    received: list[dict[str, Any]] = []
    while len(received) < len(BAD_BODIES):
        received += sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", [])
    assert sorted(m["Body"] for m in received) == sorted(BAD_BODIES.values())
    sqs.purge_queue(QueueUrl=dlq)
    # The service function's log stream (Powertools JSON lines, extra= fields at the top level).
    logged = [
        r
        for r in stack.runner.log_records("ServiceReconcilerFunction")
        if r.get("message") == "rejecting malformed message"
    ]
    reasons = " | ".join(str(r.get("reason", "")) for r in logged)
    assert "body is not JSON" in reasons and "does not match delta schema" in reasons
    assert "Service key must be <namespace>/<name>" in reasons


def test_a_load_balancer_without_ports_is_refused_by_the_api_server(stack: Stack, ns: str) -> None:
    body = w.service_body(ns, "portless", True, [], {})
    with pytest.raises(k8s.ApiException) as refused:
        w.create_service(stack, body)
    assert refused.value.status == 422 and "spec.ports" in str(refused.value.body)


def test_a_hundred_ports_get_a_clear_warning_not_a_crash(stack: Stack, ns: str) -> None:
    """An NLB takes at most 50 listeners (a quota AWS does not raise; moto does not enforce it): refused up front,
    before a managed security group would hit its rules quota or half the listeners exist."""
    ports = [(10000 + i, "TCP") for i in range(100)]
    svc = w.create_service(stack, w.service_body(ns, "wide", True, ports, {}))
    warnings = stack.wait_for(
        lambda: [e for e in events_of(stack, svc) if e[0] == "Warning"], timeout=60, what="a Warning event"
    )
    assert [reason for _, reason, _ in warnings] == ["SyncLoadBalancerFailed"]  # upstream's reason
    assert "100 ports exceed the 50-listener limit of an NLB" in warnings[0][2], warnings
    assert w.drain(stack, time.monotonic() + 60)
    assert w.queue_depth(stack, "ServicesDLQ") == 0  # bad input is not retried into the DLQ
    view = w.aws_view(stack)
    uid = svc["metadata"]["uid"]
    assert not [a for a, v in view.lbs.items() if v["tags"].get(w.SERVICE_UID_TAG) == uid]
    assert not [a for a, v in view.tgs.items() if v["tags"].get(w.SERVICE_UID_TAG) == uid]


def test_an_ipv6_only_service_is_refused_by_an_ipv4_cluster(stack: Stack, ns: str) -> None:
    """The devstack cluster is single-stack IPv4, like most EKS clusters: the API server refuses the Service, so
    the controller never sees it (the watcher sends nothing, nothing is created)."""
    body = w.service_body(ns, "six", True, [(80, "TCP")], {})
    body["spec"].update(ipFamilies=["IPv6"], ipFamilyPolicy="SingleStack")
    with pytest.raises(k8s.ApiException) as refused:
        w.create_service(stack, body)
    assert refused.value.status == 422 and "spec.ipFamilies" in str(refused.value.body)


def test_an_ipv6_only_service_gets_an_ordinary_nlb() -> None:
    """On an IPv6 cluster the Service is still served by instance targets on its nodePorts (nodes are EC2
    instances with IPv4 addresses): the same NLB as for IPv4, as upstream; `ip-address-type: dualstack` is how
    IPv6 clients reach it."""
    svc = w.service_body("default", "six", True, [(80, "TCP"), (53, "UDP")], {})
    svc["metadata"]["uid"] = str(uuid.uuid4())
    svc["spec"].update(ipFamilies=["IPv6"], ipFamilyPolicy="SingleStack", clusterIP="fd00::10", clusterIPs=["fd00::10"])
    for i, port in enumerate(svc["spec"]["ports"]):
        port["nodePort"] = 30080 + i
    node = {"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"}}
    spec = desired_nlb(svc, parse_load_balancer_config(svc, "nlb"), [node], "chaos", "vpc-1")
    assert spec.ip_address_type == "ipv4" and spec.name == lb_name(svc)
    assert [(ls.port, ls.protocol, ls.target_group.port) for ls in spec.listeners] == [
        (80, "TCP", 30080),
        (53, "UDP", 30081),
    ]
    assert all(ls.target_group.targets for ls in spec.listeners)


def test_very_long_names_give_valid_unique_aws_names(stack: Stack) -> None:
    assert stack.emulator is not None
    ns = "n" * 55 + uuid.uuid4().hex[:8]  # 63 characters, the namespace maximum
    stack.emulator.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    names = ["s" * 62 + "1", "s" * 62 + "2"]  # 63 characters, equal up to the last one
    for name in names:
        w.create_service(stack, w.service_body(ns, name, True, [(80, "TCP"), (443, "TCP")], {}))
    model = {name: w.Expected(lb=True, valid=True, deleted=False) for name in names}
    problems = w.quiesce(stack, lambda: w.violations(stack, ns, model, stack.baseline), 90)  # type: ignore[attr-defined]
    assert problems == []
    view = w.aws_view(stack)
    lb_names = [v["lb"]["LoadBalancerName"] for v in view.lbs.values()]
    tg_names = [v["tg"]["TargetGroupName"] for v in view.tgs.values()]
    sg_names = [v["sg"]["GroupName"] for v in view.sgs.values()]
    assert len(lb_names) == 2 and len(tg_names) == 4
    assert all(len(n) <= 32 for n in lb_names + tg_names), lb_names + tg_names
    assert len(set(lb_names)) == 2 and len(set(tg_names)) == 4 and len(set(sg_names)) == len(sg_names)
    for name in names:
        live = w.read(stack, "services", ns, name)
        assert live is not None and p.has_finalizer(live)
        w.delete_service(stack, ns, name)
    gone = {name: w.Expected(lb=True, valid=True, deleted=True) for name in names}
    assert w.quiesce(stack, lambda: w.violations(stack, ns, gone, stack.baseline), 60) == []  # type: ignore[attr-defined]
