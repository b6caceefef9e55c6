"""Only the expected senders: SQS stamps each message with its sender (SenderId), and each function accepts a
message kind only from the principal that owns it (ccm.senders). The devstack's moto reports the signing
principal as SQS does (devstack.sqs_sender): the watcher (and the tests standing in for it) sign with one key,
the functions with another, mapped to the role ids the template passes as SENDERS_*."""

from __future__ import annotations

import time
import uuid
from typing import Any

import boto3

from ccm.contracts.messages import Delta, delta_for
from devstack.sqs_sender import FUNCTIONS_KEY, FUNCTIONS_ROLE_ID, WATCHER_ROLE_ID
from devstack.stack import SECRET, Stack
from tests.e2e.helpers import create_service, hostname, read_service


def _as_functions(stack: Stack) -> Any:
    session = boto3.session.Session(
        aws_access_key_id=FUNCTIONS_KEY, aws_secret_access_key=SECRET, region_name=stack.config.region
    )
    return session.client("sqs", endpoint_url=stack.endpoint_url)


def _send(sqs: Any, url: str, delta: Delta) -> None:
    sqs.send_message(
        QueueUrl=url,
        MessageBody=delta.to_body(),
        MessageGroupId=delta.group_id,
        MessageDeduplicationId=str(uuid.uuid4()),
    )


def _depth(stack: Stack, queue: str) -> int:
    attrs = stack.sqs().get_queue_attributes(
        QueueUrl=stack.queue_urls[queue], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])


def test_sqs_reports_the_signing_principal_as_sender(stack: Stack):
    url = stack.sqs().create_queue(QueueName=f"probe-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    stack.sqs().send_message(QueueUrl=url, MessageBody="from the watcher")
    _as_functions(stack).send_message(QueueUrl=url, MessageBody="from a function")
    got = stack.sqs().receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["SenderId"])
    senders = {m["Body"]: m["Attributes"]["SenderId"] for m in got["Messages"]}
    assert senders == {
        "from the watcher": f"{WATCHER_ROLE_ID}:watcher",
        "from a function": f"{FUNCTIONS_ROLE_ID}:devstack-functions",
    }


def test_a_service_delta_from_a_function_role_is_dead_lettered_unprocessed(stack: Stack):
    svc = create_service(stack, "guarded", [80])
    stack.wait_for(lambda: hostname(stack, "guarded"), timeout=60, what="hostname")
    before_dlq = _depth(stack, "ServicesDLQ")
    # A function role (which may send HOSTS and SYNC) forges the watcher's kinds: refused, however plausible.
    live = read_service(stack, "guarded")
    assert live is not None
    services = stack.queue_urls["ServicesQueue"]
    _send(_as_functions(stack), services, delta_for("Service", "MODIFIED", live))
    _send(
        _as_functions(stack),
        services,
        Delta(
            "Service", "DELETED", "default/other", live["metadata"]["uid"], "1", time.time(), {"type": "LoadBalancer"}
        ),
    )
    # The watcher may not send HOSTS (the nodes function's kind).
    _send(
        stack.sqs(),
        services,
        Delta("Service", "HOSTS", "default/guarded", svc["metadata"]["uid"], "h", time.time(), {}),
    )
    stack.wait_for(lambda: _depth(stack, "ServicesDLQ") == before_dlq + 3, timeout=60, what="3 refused messages")
    # A Node delta from a function role: the nodes queue refuses it as well.
    node = stack.core().list_node().items[0].to_dict()
    before_nodes_dlq = _depth(stack, "NodesDLQ")
    forged = Delta("Node", "DELETED", node["metadata"]["name"], node["metadata"]["uid"], "1", time.time(), {})
    _send(_as_functions(stack), stack.queue_urls["NodesQueue"], forged)
    stack.wait_for(lambda: _depth(stack, "NodesDLQ") == before_nodes_dlq + 1, timeout=60, what="refused node delta")
    assert hostname(stack, "guarded")
