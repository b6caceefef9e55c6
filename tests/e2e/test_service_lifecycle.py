"""End to end through the production path: watcher process -> SQS FIFO (moto server) -> runner -> the real
handler -> ELBv2 (moto server) -> Service status in the emulator."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from ccm import predicates as p
from ccm.aws import faults
from ccm.messages import delta_for
from devstack.stack import Stack
from tests.e2e.helpers import (
    DELETE_TIMEOUT,
    aws_state,
    cluster_resources,
    create_service,
    dlq_depth,
    hostname,
    node_ports,
    read_service,
)


def test_create_update_delete(stack: Stack):
    svc = create_service(stack, "web", [80, 443])
    host = stack.wait_for(lambda: hostname(stack, "web"), what="EXTERNAL-IP hostname")
    svc = read_service(stack, "web")
    assert p.FINALIZER in svc["metadata"]["finalizers"]
    instances = sorted(stack.state()["instances"])
    ports = node_ports(svc)
    assert aws_state(stack, svc) == {
        "dns": host,
        "listeners": {80: ("TCP", ports[80], instances), 443: ("TCP", ports[443], instances)},
    }

    stack.core().patch_namespaced_service(
        "web",
        "default",
        {
            "spec": {
                "ports": [
                    {"name": "p80", "port": 80, "targetPort": 8080},
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                ]
            }
        },
        _content_type="application/merge-patch+json",
    )
    svc = read_service(stack, "web")
    ports = node_ports(svc)
    expected = {80: ("TCP", ports[80], instances), 53: ("UDP", ports[53], instances)}
    stack.wait_for(lambda: (aws_state(stack, svc) or {}).get("listeners") == expected, what="ports updated")
    stack.runner.drain(30)
    assert len(cluster_resources(stack)["targetgroup"]) == 2  # the 443 group is gone

    stack.core().delete_namespaced_service("web", "default")
    stack.wait_for(
        lambda: read_service(stack, "web") is None, timeout=DELETE_TIMEOUT, what="finalizer removed and Service gone"
    )
    assert aws_state(stack, svc) is None
    stack.runner.drain(30)
    assert cluster_resources(stack) == {"loadbalancer": [], "targetgroup": []}
    events = json.loads(stack.core().list_namespaced_event("default", _preload_content=False).data)["items"]
    reasons = {e["reason"] for e in events if e["involvedObject"].get("uid") == svc["metadata"]["uid"]}
    assert {"EnsuringLoadBalancer", "EnsuredLoadBalancer", "DeletingLoadBalancer", "DeletedLoadBalancer"} <= reasons


def test_type_change_to_cluster_ip_cleans_up(stack: Stack):
    svc = create_service(stack, "flip", [80])
    stack.wait_for(lambda: hostname(stack, "flip"), what="hostname")
    stack.core().patch_namespaced_service(
        "flip", "default", {"spec": {"type": "ClusterIP"}}, _content_type="application/merge-patch+json"
    )
    stack.wait_for(lambda: aws_state(stack, svc) is None, timeout=DELETE_TIMEOUT, what="LB deleted")
    live = stack.wait_for(
        lambda: (s := read_service(stack, "flip")) and p.FINALIZER not in s["metadata"].get("finalizers", []) and s,
        timeout=DELETE_TIMEOUT,
        what="finalizer removed",
    )
    assert not (live.get("status") or {}).get("loadBalancer", {}).get("ingress")


def test_duplicates_and_a_crash_between_aws_calls_converge_without_leaks(stack: Stack, faults_file: Path):
    # Crash right after the first target group exists and again after the first listener: two retries.
    faults.arm(faults_file, {"elasticloadbalancing:CreateTargetGroup": 1, "elasticloadbalancing:CreateListener": 1})
    svc = create_service(stack, "crashy", [80, 8080])
    # Duplicates: the same observation sent again by "another watcher" (same dedup id collapses) and as a
    # fresh message (different dedup id) that must be a no-op.
    delta = delta_for("Service", "ADDED", svc)
    sqs, url = stack.sqs(), stack.queue_urls["ServicesQueue"]
    for dedup in (delta.deduplication_id, delta.deduplication_id, str(uuid.uuid4())):
        sqs.send_message(
            QueueUrl=url, MessageBody=delta.to_body(), MessageGroupId=delta.group_id, MessageDeduplicationId=dedup
        )
    stack.wait_for(lambda: hostname(stack, "crashy"), timeout=60, what="hostname after crashes")
    instances = sorted(stack.state()["instances"])
    ports = node_ports(read_service(stack, "crashy"))
    stack.wait_for(
        lambda: (
            (aws_state(stack, svc) or {}).get("listeners")
            == {80: ("TCP", ports[80], instances), 8080: ("TCP", ports[8080], instances)}
        ),
        timeout=60,
        what="both listeners after retries",
    )
    stack.runner.drain(60)
    assert json.loads(faults_file.read_text())["crash_after"] == {
        "elasticloadbalancing:CreateTargetGroup": 0,
        "elasticloadbalancing:CreateListener": 0,
    }
    resources = cluster_resources(stack)
    assert len(resources["loadbalancer"]) == 1 and len(resources["targetgroup"]) == 2  # nothing orphaned
    assert dlq_depth(stack) == 0

    stack.core().delete_namespaced_service("crashy", "default")
    stack.wait_for(lambda: read_service(stack, "crashy") is None, timeout=DELETE_TIMEOUT, what="deleted")
    stack.runner.drain(30)
    assert cluster_resources(stack) == {"loadbalancer": [], "targetgroup": []}


def test_kubernetes_errors_are_retried_through_the_queue(stack: Stack):
    assert stack.emulator is not None
    # The reconciler's status write fails twice; the message comes back after its backoff and converges.
    stack.emulator.faults.fail_next(2, status=500, method="PATCH", path_regex=r"/services/flaky/status$")
    create_service(stack, "flaky", [80])
    started = time.monotonic()
    stack.wait_for(lambda: hostname(stack, "flaky"), timeout=60, what="hostname after 500s")
    assert time.monotonic() - started >= 4  # at least the first 5 s backoff (visibility), no busy loop
    stack.core().delete_namespaced_service("flaky", "default")
    stack.wait_for(lambda: read_service(stack, "flaky") is None, timeout=DELETE_TIMEOUT, what="deleted")


def test_malformed_message_lands_in_the_dlq_without_blocking_others(stack: Stack):
    sqs, url = stack.sqs(), stack.queue_urls["ServicesQueue"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody='{"v": 1, "kind": "Service"}',
        MessageGroupId="default/bad",
        MessageDeduplicationId=str(uuid.uuid4()),
    )
    create_service(stack, "neighbour", [80])
    stack.wait_for(lambda: hostname(stack, "neighbour"), what="neighbour served")
    stack.wait_for(lambda: dlq_depth(stack) == 1, timeout=60, what="malformed message in the DLQ")
    message = sqs.receive_message(QueueUrl=stack.queue_urls["ServicesDLQ"])["Messages"][0]
    assert message["Body"] == '{"v": 1, "kind": "Service"}'
    sqs.delete_message(QueueUrl=stack.queue_urls["ServicesDLQ"], ReceiptHandle=message["ReceiptHandle"])
    stack.core().delete_namespaced_service("neighbour", "default")
    stack.wait_for(lambda: read_service(stack, "neighbour") is None, timeout=DELETE_TIMEOUT, what="deleted")
