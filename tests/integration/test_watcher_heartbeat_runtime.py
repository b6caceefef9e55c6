"""A watcher heartbeat through the real services handler path: one log line with its lag, no custom metric (the
silence alarm watches the queue's own AWS/SQS metric), no Kubernetes or AWS call."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from ccm.aws.clients import AwsClients
from ccm.config import Settings
from ccm.contracts.messages import heartbeat_for
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.service.runtime import metrics
from ccm.wiring.services import build_service_runtime
from devstack.k8s_emulator import Emulator


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    emu = Emulator().start()
    emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield emu
    emu.stop()


def lambda_event(sqs: Any, url: str) -> dict[str, Any]:
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m["Attributes"],
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(m["Body"].encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }
            for m in received["Messages"]
        ]
    }


def emitted(out: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        for directive in doc.get("_aws", {}).get("CloudWatchMetrics", []):
            for metric in directive["Metrics"]:
                raw = doc[metric["Name"]]
                values[metric["Name"]] = sum(raw) if isinstance(raw, list) else raw
    return values


def test_heartbeat_logs_its_lag_publishes_no_metric_and_calls_nothing(
    emulator: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="services.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        beat = heartbeat_for("watcher-0", time.time() - 2.5, 60)  # sent 2.5 s ago
        sqs.send_message(
            QueueUrl=url,
            MessageBody=beat.to_body(),
            MessageGroupId=beat.group_id,
            MessageDeduplicationId=beat.deduplication_id,
        )
        event = lambda_event(sqs, url)
        clients = AwsClients(region="us-east-1")
        runtime = build_service_runtime(
            Settings("unit", "vpc-1"), Kube(from_kubeconfig(str(tmp_path / "kubeconfig"))), clients
        )
        emulator.request_log.clear()
        metrics.clear_metrics()
        capsys.readouterr()

        response = runtime.handle_batch(event, None)
        metrics.flush_metrics()

    assert response == {"batchItemFailures": []}
    out = capsys.readouterr().out
    assert emitted(out) == {}  # every metric-hour is billed; the alarm reads AWS/SQS NumberOfMessagesDeleted
    (beat,) = [r for r in caplog.records if r.getMessage() == "watcher heartbeat"]
    assert beat.levelname == "INFO"  # the dashboard's lag widget reads it: it must pass the default log level
    assert 2500 <= vars(beat)["watcher_lag_ms"] < 60_000
    assert vars(beat)["replica"] == "watcher-0"
    assert not any("duration_ms" in vars(r) or "aws_calls" in vars(r) for r in caplog.records)  # not a reconcile
    assert clients.counter.snapshot() == {}  # no AWS call
    assert list(emulator.request_log) == []  # no Kubernetes call
