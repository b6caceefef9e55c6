"""Shared fixtures: one moto server (real HTTP SQS) per session, fresh FIFO queues per test."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config as BotoConfig
from moto.server import ThreadedMotoServer

from ccm.contracts.messages import Delta, parse_delta
from devstack.k8s_emulator import Emulator
from devstack.queues import faithful_moto_sqs_message_size
from watcher.app import Watcher
from watcher.config import Config

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sqs_client(endpoint: str, **config: Any) -> Any:
    boto_config = BotoConfig(
        retries={"mode": "standard", "max_attempts": 1}, connect_timeout=1, read_timeout=5, **config
    )
    return boto3.session.Session().client(
        "sqs", endpoint_url=endpoint, region_name=REGION, config=boto_config, **CREDENTIALS
    )


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    faithful_moto_sqs_message_size()  # SQS's default 256 KiB per message, not moto's 1 MiB
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A fresh Kubernetes API emulator; frequent bookmarks keep resumed watches close to the head."""
    emu = Emulator(bookmark_interval=0.3).start()
    yield emu
    emu.stop()


@pytest.fixture
def sqs(moto_endpoint: str) -> Any:
    return sqs_client(moto_endpoint)


@pytest.fixture
def queues(sqs: Any) -> dict[str, str]:
    """A fresh pair of FIFO queues, keyed by delta kind."""
    suffix = uuid.uuid4().hex[:10]
    return {
        kind: sqs.create_queue(QueueName=f"{name}-{suffix}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        for kind, name in (("Service", "services"), ("Node", "nodes"))
    }


def receive_all(sqs: Any, url: str, expect: int | None = None, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Receive and delete messages. With `expect`, wait for that many (then check briefly for extras)."""
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    quiet_until: float | None = None
    while time.monotonic() < deadline:
        batch = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        messages.extend(batch)
        if batch:
            continue
        if expect is None or len(messages) >= expect:
            # Nothing right now; give stragglers a short moment before declaring the queue drained.
            quiet_until = quiet_until or time.monotonic() + 0.15
            if time.monotonic() >= quiet_until:
                break
        time.sleep(0.05)
    return messages


MakeWatcher = Callable[..., Watcher]


@pytest.fixture
def make_watcher(emulator: Emulator, tmp_path: Path, sqs: Any, queues: dict[str, str]) -> Iterator[MakeWatcher]:
    started: list[Watcher] = []
    kubeconfig = emulator.write_kubeconfig(str(tmp_path / "kubeconfig"))

    def make(sqs_override: Any = None, wait_ready: bool = True, **overrides: Any) -> Watcher:
        settings: dict[str, Any] = {
            "services_queue_url": queues["Service"],
            "nodes_queue_url": queues["Node"],
            "kubeconfig": kubeconfig,
            "health_host": "127.0.0.1",
            "health_port": 0,
            "watch_timeout_seconds": 30,
            "backoff_initial": 0.05,
            "backoff_max": 0.4,
            "sqs_probe_seconds": 0.3,
            "heartbeat_seconds": 0,  # heartbeats would add messages to the counts below; see test_heartbeat*
            **overrides,
        }
        watcher = Watcher(Config(**settings), sqs=sqs_override or sqs)
        watcher.start()
        started.append(watcher)
        if wait_ready:
            wait_until(lambda: watcher.ready, timeout=10)
        return watcher

    yield make
    for watcher in started:
        watcher.stop(flush_timeout=1)


def deltas(sqs: Any, url: str, expect: int | None = None) -> list[Delta]:
    return [parse_delta(m["Body"]) for m in receive_all(sqs, url, expect=expect)]


def summary(items: list[Delta]) -> list[tuple[str, str]]:
    return [(d.type, d.key) for d in items]


def metric(watcher: Watcher, name: str, **labels: str) -> float:
    return watcher.metrics.registry.get_sample_value(name, labels) or 0.0
