"""What AWS does on its own while time passes, for the chaos tests: EventBridge's rules (the nodes safety pass, EC2
state-change events), the sweeper's schedule, and a DLQ redrive (`start-message-move-task`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

from ccm.node.events import EC2_EVENTS_GROUP, SAFETY_PASS_GROUP, ec2_state_change_body, scheduled_event_body
from ccm.route.trigger import ROUTES_GROUP
from devstack.stack import REPO, Stack
from tests.chaos.invariants import aws


def send_to_nodes_queue(stack: Stack, body: str, group: str) -> None:
    """What the EventBridge rules do: a static group, no deduplication id (the queue hashes the content)."""
    aws(stack, "sqs").send_message(QueueUrl=stack.queue_urls["NodesQueue"], MessageBody=body, MessageGroupId=group)


def safety_pass(stack: Stack) -> None:
    """One tick of the rate(5 minutes) rules: the nodes Lambda's safety pass (and the membership reconcile) and,
    with routes enabled, the route reconciler's periodic pass (RoutesSafetyPassRule, group "routes"), which is
    what removes the route of a node deleted while the watcher was down."""
    send_to_nodes_queue(stack, scheduled_event_body(str(uuid.uuid4())), SAFETY_PASS_GROUP)
    if "RoutesQueue" in stack.queue_urls:
        aws(stack, "sqs").send_message(
            QueueUrl=stack.queue_urls["RoutesQueue"],
            MessageBody=scheduled_event_body(str(uuid.uuid4())),
            MessageGroupId=ROUTES_GROUP,
        )


def instance_state_event(stack: Stack, instance_id: str, state: str) -> None:
    """EventBridge's "EC2 Instance State-change Notification" for an instance, as the rule delivers it."""
    send_to_nodes_queue(stack, ec2_state_change_body(instance_id, state, str(uuid.uuid4())), EC2_EVENTS_GROUP)


# EventBridge invokes a scheduled function asynchronously, and Lambda retries an asynchronous invocation that
# returns a function error twice (Lambda Developer Guide, "Asynchronous invocation": "retries function errors
# twice"; the template sets no EventInvokeConfig, so the default MaximumRetryAttempts of 2 holds). A run that fails
# on a passing API error (a Kubernetes 500 on its Service LIST) is therefore run again, not lost; three failures in
# a row are a real failure.
ASYNC_ATTEMPTS = 3


def run_sweeper(stack: Stack, grace_minutes: float = 0) -> dict[str, Any]:
    """One scheduled run of the sweeper function, as EventBridge starts it: a fresh process (a new execution
    environment) with the function's template environment and the stack's endpoints, retried as Lambda retries an
    asynchronous invocation (ASYNC_ATTEMPTS). Returns the summary of the attempt that succeeded, with `attempts`."""
    failures: list[str] = []
    while len(failures) < ASYNC_ATTEMPTS:
        done = _sweeper_process(stack, grace_minutes)
        if done.returncode == 0:
            summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
            summary["attempts"] = len(failures) + 1
            return summary
        failures.append(f"attempt {len(failures) + 1} ({done.returncode}): {done.stderr[-2000:]}")
    raise AssertionError("sweeper run failed on every asynchronous attempt:\n" + "\n".join(failures))


def _sweeper_process(stack: Stack, grace_minutes: float) -> subprocess.CompletedProcess[str]:
    assert stack.facts is not None
    fn = stack.facts.functions["SweeperFunction"]
    env = {
        **os.environ,
        **{k: v for k, v in fn.environment.items() if k not in fn.unresolved},
        # Its own identity: its re-enqueued SYNCs must carry the sweeper's SenderId (ccm.senders).
        **stack.function_environment("SweeperFunction"),
        "SERVICES_QUEUE_URL": stack.queue_urls["ServicesQueue"],
        "SWEEPER_TABLE": stack.tables["MembershipTable"],
        "SWEEPER_GRACE_MINUTES": str(grace_minutes),
        "PYTHONPATH": os.pathsep.join(str(d) for d in fn.layer_dirs),
    }
    code = (
        "import json\n"
        "from ccm.sweeper.runtime import vars_of\n"
        "from ccm.wiring.sweeper import runtime\n"
        "report = vars_of(runtime().run())\n"
        "print(json.dumps({k: v for k, v in report.items() if k != 'decisions'}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def redrive(stack: Stack, dlq: str, source: str) -> int:
    """What `aws sqs start-message-move-task` does for a FIFO DLQ (docs/runbook.md; moto has no message move
    tasks): every message goes back to its source queue as a new message (new id, receive count 0) in its own
    group, oldest first, deduplicated by the id SQS gave it in the DLQ. Returns how many were moved."""
    sqs = aws(stack, "sqs")
    moved = 0
    while True:
        batch = sqs.receive_message(
            QueueUrl=stack.queue_urls[dlq],
            MaxNumberOfMessages=10,
            VisibilityTimeout=30,
            MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
        ).get("Messages", [])
        if not batch:
            return moved
        for message in batch:
            attrs = message["Attributes"]
            sqs.send_message(
                QueueUrl=stack.queue_urls[source],
                MessageBody=message["Body"],
                MessageGroupId=attrs["MessageGroupId"],
                MessageDeduplicationId=attrs.get("MessageDeduplicationId") or message["MessageId"],
            )
            sqs.delete_message(QueueUrl=stack.queue_urls[dlq], ReceiptHandle=message["ReceiptHandle"])
            moved += 1
