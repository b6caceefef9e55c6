"""SQS behind the queue contract (ccm.contracts.queues): the only module that calls SQS for the controllers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ccm.contracts.queues import MAX_BATCH, HandedBack, OutgoingMessage

log = logging.getLogger(__name__)


class SqsQueue:
    """One queue by URL, over the execution environment's counted, deadline-bound SQS client."""

    def __init__(self, clients: Any, url: str) -> None:
        self.clients = clients  # ccm.aws.clients.AwsClients (which makes these: no import cycle)
        self.url = url

    @property
    def sqs(self) -> Any:
        return self.clients.client("sqs")

    def send(self, message: OutgoingMessage) -> None:
        self.sqs.send_message(
            QueueUrl=self.url,
            MessageBody=message.body,
            MessageGroupId=message.group_id,
            MessageDeduplicationId=message.deduplication_id,
        )

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> tuple[int, list[str]]:
        sent, refused = 0, []
        for start in range(0, len(messages), MAX_BATCH):
            entries = [
                {
                    "Id": str(i),
                    "MessageBody": m.body,
                    "MessageGroupId": m.group_id,
                    "MessageDeduplicationId": m.deduplication_id,
                }
                for i, m in enumerate(messages[start : start + MAX_BATCH])
            ]
            response = self.sqs.send_message_batch(QueueUrl=self.url, Entries=entries)
            sent += len(response.get("Successful", []))
            refused += [f"{f.get('Code')}: {f.get('Message', '')}" for f in response.get("Failed", [])]
        return sent, refused

    def hand_back(self, messages: Sequence[HandedBack]) -> None:
        entries = [
            {"Id": m.message_id, "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": m.delay_seconds}
            for m in messages
        ]
        for start in range(0, len(entries), MAX_BATCH):
            try:
                self.sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=entries[start : start + MAX_BATCH])
            except Exception:  # the queue's own visibility timeout still brings them back
                log.warning("could not set retry delay", exc_info=True)
