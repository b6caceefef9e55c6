"""SQS FIFO batch handling shared by the Lambda runtimes (services, nodes).

Powertools' SqsFifoPartialProcessor processes the records (skip_group_on_error: a failure fails only the rest of
its group); then every failed record's visibility is set to the retry delay its handler chose (`defer`, see
ccm.retry), and the records skipped after it in the same group get the same delay, so the group resumes as one.
Nothing sleeps.

The invocation's deadline (ccm.deadline): a record starts only while enough time is left, and one cut short by it
(OutOfTime) is returned too; both come back after ccm.retry.RETURN_DELAY_SECONDS, and neither is a failure.
"""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ccm import deadline
from ccm.contracts.cloud import CloudClients
from ccm.retry import RETURN_DELAY_SECONDS

log = logging.getLogger(__name__)


class Deferred(Exception):
    """The record is to be processed later (its visibility is set to the delay); not an error."""


class Returned(Deferred):
    """The invocation's time ran out before (or while) this record was processed."""


class FifoBatchRuntime:
    def __init__(self, clients: CloudClients) -> None:
        self.clients = clients
        self._delays: dict[str, int] = {}
        self._queue_urls: dict[str, str] = {}

    def handle_record(self, record: SQSRecord) -> None:
        raise NotImplementedError

    def defer(self, message_id: str, seconds: int) -> None:
        """Retry this (failing) record after `seconds`; 0 = visible again at once (poison -> DLQ quickly)."""
        self._delays[message_id] = seconds

    def handle_batch(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
        # Report every failure item by item even when all fail: raising would skip the retry scheduling.
        processor.raise_on_entire_batch_failure = False
        remaining = deadline.remaining_of(context)
        reserve = deadline.record_reserve_seconds()
        returned: list[str] = []

        def within_deadline(record: SQSRecord) -> None:
            if not deadline.can_start(remaining() if remaining else None, reserve):
                returned.append(record.message_id)
                self.defer(record.message_id, RETURN_DELAY_SECONDS)
                raise Returned("not started: the invocation's time is running out")
            try:
                self.handle_record(record)
            except deadline.OutOfTime as err:
                returned.append(record.message_id)
                self.defer(record.message_id, RETURN_DELAY_SECONDS)
                raise Returned(f"cut short: {err}") from None

        with deadline.invocation(remaining):
            response: dict[str, Any] = dict(
                process_partial_response(
                    event=event, record_handler=within_deadline, processor=processor, context=context
                )
            )
        if returned:
            log.info(
                "time running out: %d record(s) returned for the next invocation",
                len(returned),
                extra={"returned": returned, "retry_in_seconds": RETURN_DELAY_SECONDS},
            )
        self.defer_failures(event, response)
        return response

    def defer_failures(self, event: dict[str, Any], response: dict[str, Any]) -> None:
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        if not failed:
            return
        entries_by_queue: dict[str, list[dict[str, Any]]] = {}
        group_delay: dict[str, int] = {}
        for raw in event.get("Records", []):
            if raw["messageId"] not in failed:
                continue
            group = raw.get("attributes", {}).get("MessageGroupId", "")
            delay = self._delays.pop(raw["messageId"], group_delay.get(group, 0))
            group_delay.setdefault(group, delay)
            entries_by_queue.setdefault(raw["eventSourceARN"], []).append(
                {"Id": raw["messageId"], "ReceiptHandle": raw["receiptHandle"], "VisibilityTimeout": delay}
            )
        set_visibility(self.clients, self._queue_urls, entries_by_queue)


def set_visibility(
    clients: CloudClients, queue_urls: dict[str, str], entries_by_arn: dict[str, list[dict[str, Any]]]
) -> None:
    """ChangeMessageVisibilityBatch per queue (10 entries per call); `queue_urls` caches ARN -> URL."""
    sqs = clients.client("sqs")
    for arn, entries in entries_by_arn.items():
        if arn not in queue_urls:
            _, _, _, _, account, name = arn.split(":", 5)
            queue_urls[arn] = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        for start in range(0, len(entries), 10):
            try:
                sqs.change_message_visibility_batch(QueueUrl=queue_urls[arn], Entries=entries[start : start + 10])
            except Exception:  # the queue's own visibility timeout still brings them back
                log.warning("could not set retry delay", exc_info=True)
