"""The queue contract: what the controllers send to a FIFO queue and hand back to one (ccm.aws.queues.SqsQueue
implements it; CloudClients.queue gives one per URL). No controller holds an SDK client."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

MAX_BATCH: Final = 10  # SendMessageBatch and ChangeMessageVisibilityBatch take at most 10 entries


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    body: str
    group_id: str
    deduplication_id: str


@dataclass(frozen=True, slots=True)
class HandedBack:
    """A received message to make visible again after `delay_seconds` (its retry delay)."""

    message_id: str
    receipt_handle: str
    delay_seconds: int


class MessageQueue(Protocol):
    def send(self, message: OutgoingMessage) -> None:
        """One message; raises when SQS refuses it."""
        ...

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> tuple[int, list[str]]:
        """Up to MAX_BATCH messages per call, as many calls as needed: (sent, reasons of those refused)."""
        ...

    def hand_back(self, messages: Sequence[HandedBack]) -> None:
        """Set each message's visibility timeout (best effort: the queue's own timeout brings them back anyway)."""
        ...
