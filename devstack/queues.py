"""Create the template's SQS queues in the local AWS, and make moto's SQS FIFO behave like SQS under concurrency.

`lambda_record` turns a received SQS message into the record Lambda's SQS event source would pass, and
`batch_item_failures` reads a ReportBatchItemFailures response the way Lambda does.

`create_queues` stands in for CloudFormation: same names, same attributes, dead-letter queues first so the source
queues' RedrivePolicy can carry the real DLQ ARN.

`harden_moto_sqs` fixes three moto 5.2 SQS races/bugs that our parallel pollers hit and real SQS does not have
(it is applied by `devstack.aws.start_moto_server`; it patches moto's in-process server models, never boto3):

1. Out-of-order redelivery: when several messages of one FIFO group time out together, moto releases them one at
   a time while scanning and treats the group as still in flight until the LAST one, so it delivers the last
   message first (A3 before A1, A2).
2. Group blocking race: concurrent ReceiveMessage calls each take a snapshot of in-flight groups, so two pollers
   can get messages of the same group at once.
3. Lost updates: DeleteMessage rebuilds the message list without a lock, so a concurrent send or delete can be
   undone (a message lost or a deleted one resurrected).
The fix serialises each queue's mutations on the queue's own (re-entrant) lock and releases timed-out in-flight
messages once, before scanning, never during the scan; long polling waits outside the lock.
"""

from __future__ import annotations

import base64
import functools
import json
import time
from typing import Any

from devstack.template import TemplateFacts

# The system attributes Lambda puts in a FIFO record (plus AWSTraceHeader / DeadLetterQueueSourceArn if present).
LAMBDA_RECORD_ATTRIBUTES = (
    "ApproximateReceiveCount",
    "SentTimestamp",
    "SequenceNumber",
    "MessageGroupId",
    "SenderId",
    "MessageDeduplicationId",
    "ApproximateFirstReceiveTimestamp",
)
_POLL_STEP_SECONDS = 0.05
SQS_DEFAULT_MAXIMUM_MESSAGE_SIZE = 262_144
_hardened = False


def create_queues(sqs_client: Any, template_facts: TemplateFacts, cluster_name: str) -> dict[str, str]:
    """Create every AWS::SQS::Queue of the template for `cluster_name`; returns {logical id: queue URL}.

    Idempotent while the attributes are unchanged (CreateQueue returns the existing queue).
    """
    facts = template_facts.with_parameters({"ClusterName": cluster_name})
    urls: dict[str, str] = {}
    arns: dict[str, str] = {}
    for logical_id in facts.queue_creation_order():
        queue = facts.queues[logical_id]
        attributes = dict(queue.attributes)
        if queue.redrive_target is not None:
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": arns[queue.redrive_target], "maxReceiveCount": queue.max_receive_count}
            )
        url: str = sqs_client.create_queue(QueueName=queue.name, Attributes=attributes)["QueueUrl"]
        urls[logical_id] = url
        arns[logical_id] = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
    return urls


def queue_arn(sqs_client: Any, queue_url: str) -> str:
    arn: str = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return arn


def lambda_record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One ReceiveMessage message (all system and message attributes requested) as a Lambda SQS event record."""
    attributes: dict[str, Any] = message.get("Attributes", {})
    ordered = {k: attributes[k] for k in LAMBDA_RECORD_ATTRIBUTES if k in attributes}
    ordered.update({k: v for k, v in attributes.items() if k not in ordered})
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": ordered,
        "messageAttributes": {
            name: _lambda_message_attribute(value) for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    record.update({"eventSource": "aws:sqs", "eventSourceARN": queue_arn, "awsRegion": region})
    return record


def batch_item_failures(response: Any, batch_ids: set[str]) -> set[str] | None:
    """The ids a ReportBatchItemFailures response lists, or None when Lambda would fail the whole batch."""
    if response is None:
        return set()
    try:
        json.dumps(response)
    except (TypeError, ValueError):
        return None
    if not isinstance(response, dict):
        return None
    items = response.get("batchItemFailures")
    if items is None:
        return set()
    if not isinstance(items, list):
        return None
    failed: set[str] = set()
    for item in items:
        ident = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(ident, str) or ident not in batch_ids:
            return None
        failed.add(ident)
    return failed


def _lambda_message_attribute(value: dict[str, Any]) -> dict[str, Any]:
    """SQS API shape (StringValue, BinaryValue bytes, ...) -> Lambda record shape (camelCase, base64 binaries)."""
    out: dict[str, Any] = {}
    if "StringValue" in value:
        out["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        out["binaryValue"] = _b64(value["BinaryValue"])
    out["stringListValues"] = list(value.get("StringListValues", []))
    out["binaryListValues"] = [_b64(b) for b in value.get("BinaryListValues", [])]
    out["dataType"] = value["DataType"]
    return out


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data).decode() if isinstance(data, bytes) else data


class _NoReleaseSet(set[Any]):
    """moto's receive scan releases visible in-flight messages with .remove(); during our scan that is a no-op."""

    def remove(self, element: Any) -> None:
        pass


def faithful_moto_sqs_message_size() -> None:
    """moto 5.2 creates queues with MaximumMessageSize 1 MiB; SQS's default is 262,144 bytes (CreateQueue API
    reference: "MaximumMessageSize ... Default: 262,144 (256 KiB)"; 1 MiB only when the attribute is raised), so a
    delta over 256 KiB that moto took is refused by a real queue with "Message must be shorter than 262144 bytes".
    Patches moto's server-side Queue model, never boto3. Idempotent."""
    from moto.sqs.models import Queue

    if getattr(Queue, "_ccm_default_size", False):
        return
    original_init = Queue.__init__

    @functools.wraps(original_init)
    def __init__(self: Queue, name: str, region: str, account_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("MaximumMessageSize", SQS_DEFAULT_MAXIMUM_MESSAGE_SIZE)
        original_init(self, name, region, account_id, **kwargs)

    Queue.__init__ = __init__  # type: ignore[method-assign]
    Queue._ccm_default_size = True  # type: ignore[attr-defined]


def _deliverable(queue: Any) -> bool:
    """Whether moto's receive could hand out or dead-letter a message now: one visible, not delayed, and (FIFO) of no
    group with a message in flight. Same tests as moto's Message.visible / .delayed, with one clock reading."""
    from moto.core.utils import unix_time_millis

    now = unix_time_millis()
    blocked = {m.group_id for m in queue._pending_messages if m.group_id is not None} if queue.fifo_queue else set()
    return any(
        now > m.visible_at and now >= m.delayed_until and not (m.group_id is not None and m.group_id in blocked)
        for m in queue._messages
    )


def harden_moto_sqs() -> None:
    """Patch moto's SQS models in this process (idempotent); see the module docstring for why."""
    global _hardened
    faithful_moto_sqs_message_size()
    if _hardened:
        return
    from moto.sqs.models import Queue, SQSBackend

    original_receive = SQSBackend.receive_message
    original_delete = Queue.delete_message
    original_add = Queue.add_message
    original_change_visibility = SQSBackend.change_message_visibility

    @functools.wraps(original_receive)
    def receive_message(
        self: SQSBackend,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        queue = self.get_queue(queue_name)
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        while True:
            with queue._messages_lock:
                # Release every timed-out in-flight message first, so a group is blocked only by messages that
                # are really still in flight and the scan below delivers the group's oldest message first.
                for message in [m for m in queue.pending_messages if m.visible]:
                    queue.pending_messages.discard(message)
                # Nothing to hand out (the usual answer to a long poll): skip moto's scan, which reads the clock
                # twice per message and copies the in-flight groups (the bench's pollers made it most of moto's time).
                result: list[Any] = []
                if _deliverable(queue):
                    # A message whose timeout expires DURING the scan must not be released by it (that is bug 1
                    # again, in a smaller window): the scan sees a pending set it can add to but not remove from.
                    queue._pending_messages = _NoReleaseSet(queue._pending_messages)
                    try:
                        result = original_receive(
                            self, queue_name, count, 0, visibility_timeout, message_attribute_names
                        )
                    finally:
                        present = set(queue._messages)  # a message moved to the DLQ is in flight nowhere
                        queue._pending_messages = {m for m in queue._pending_messages if m in present}
            if result or time.monotonic() >= deadline:
                return result
            time.sleep(_POLL_STEP_SECONDS)  # long polling, outside the lock

    @functools.wraps(original_delete)
    def delete_message(self: Queue, receipt_handle: str) -> None:
        with self._messages_lock:
            original_delete(self, receipt_handle)

    @functools.wraps(original_add)
    def add_message(self: Queue, message: Any) -> None:
        with self._messages_lock:  # re-entrant: the original takes it again to notify waiters
            original_add(self, message)

    @functools.wraps(original_change_visibility)
    def change_message_visibility(
        self: SQSBackend, queue_name: str, receipt_handle: str, visibility_timeout: int
    ) -> None:
        with self.get_queue(queue_name)._messages_lock:
            original_change_visibility(self, queue_name, receipt_handle, visibility_timeout)

    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]
    Queue.delete_message = delete_message  # type: ignore[method-assign]
    Queue.add_message = add_message  # type: ignore[method-assign]
    SQSBackend.change_message_visibility = change_message_visibility  # type: ignore[method-assign]
    _hardened = True


def create_tables(ddb_client: Any, template_facts: TemplateFacts) -> dict[str, str]:
    """Create every AWS::DynamoDB::Table of the template (key schema, billing, TTL); returns {logical id: name}.

    Stands in for CloudFormation like create_queues; tables without a TableName get `<stack>-<LogicalId>`.
    """
    names: dict[str, str] = {}
    for logical_id, res in (template_facts._doc.get("Resources") or {}).items():
        if res.get("Type") != "AWS::DynamoDB::Table":
            continue
        props = res.get("Properties") or {}
        name = str(props.get("TableName") or f"{template_facts.stack_name}-{logical_id}")
        existing = ddb_client.list_tables().get("TableNames", [])
        if name not in existing:
            ddb_client.create_table(
                TableName=name,
                KeySchema=props["KeySchema"],
                AttributeDefinitions=props["AttributeDefinitions"],
                BillingMode=props.get("BillingMode", "PAY_PER_REQUEST"),
            )
            ttl = props.get("TimeToLiveSpecification")
            if ttl and ttl.get("Enabled"):
                ddb_client.update_time_to_live(
                    TableName=name, TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True}
                )
        names[logical_id] = name
    return names
