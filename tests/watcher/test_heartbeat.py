"""The watcher's heartbeat to the services queue (moto SQS FIFO over real HTTP)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ccm.contracts.messages import HEARTBEAT, parse_delta
from devstack.k8s_emulator import Emulator
from tests.watcher.conftest import receive_all, sqs_client, wait_until
from watcher.app import Watcher
from watcher.buffer import DeltaBuffer
from watcher.config import Config, parse_args
from watcher.metrics import Metrics
from watcher.sender import Sender


def sent(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("watcher_heartbeats_sent_total") or 0.0


def sender(sqs: Any, queues: dict[str, str], replica: str, metrics: Metrics) -> Sender:
    return Sender(sqs, queues, DeltaBuffer(10), metrics, probe_seconds=60, heartbeat_seconds=1, replica=replica)


def test_two_replicas_send_one_heartbeat_per_period(sqs: Any, queues: dict[str, str]) -> None:
    metrics_a, metrics_b = Metrics(), Metrics()
    a, b = sender(sqs, queues, "watcher-a", metrics_a), sender(sqs, queues, "watcher-b", metrics_b)
    started = time.time()
    a.start()
    b.start()
    try:
        # Each replica sends once per 1 s period; the FIFO deduplication collapses the pair of each period.
        wait_until(lambda: sent(metrics_a) >= 3, timeout=10)
    finally:
        a.stop(1)
        b.stop(1)
    periods = int(time.time()) - int(started) + 1
    beats = [parse_delta(m["Body"]) for m in receive_all(sqs, queues["Service"])]
    assert beats and all((d.kind, d.type, d.key) == ("Watcher", HEARTBEAT, "watcher/heartbeat") for d in beats)
    versions = [d.resource_version for d in beats]
    assert len(versions) == len(set(versions)), "two heartbeats for one period were not deduplicated"
    assert 3 <= len(beats) <= periods
    assert sent(metrics_a) + sent(metrics_b) > len(beats)  # SQS accepted both replicas' beats, delivered one
    assert {d.object["replica"] for d in beats} <= {"watcher-a", "watcher-b"}
    assert receive_all(sqs, queues["Node"]) == []  # heartbeats go to the services queue only


def test_watcher_sends_heartbeats_with_its_pod_name(
    emulator: Emulator, tmp_path: Path, sqs: Any, queues: dict[str, str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("POD_NAME", "ccm-watcher-0")
    config = Config(
        services_queue_url=queues["Service"],
        nodes_queue_url=queues["Node"],
        kubeconfig=emulator.write_kubeconfig(str(tmp_path / "kubeconfig")),
        health_host="127.0.0.1",
        health_port=0,
        heartbeat_seconds=1,
    )
    watcher = Watcher(config, sqs=sqs)
    watcher.start()
    try:
        received = receive_all(sqs, queues["Service"], expect=1)
    finally:
        watcher.stop(flush_timeout=1)
    message = received[0]  # one per second: a second one may already be there
    assert all(parse_delta(m["Body"]).type == HEARTBEAT for m in received)
    beat = parse_delta(message["Body"])
    assert beat.type == HEARTBEAT and beat.object == {"replica": "ccm-watcher-0"}
    assert message["Attributes"]["MessageGroupId"] == "watcher/heartbeat"
    assert message["Attributes"]["MessageDeduplicationId"] == beat.deduplication_id
    assert abs(beat.observed_at - time.time()) < 10


def test_heartbeat_defaults_to_a_minute_and_can_be_turned_off() -> None:
    required = ["--services-queue-url", "s", "--nodes-queue-url", "n"]
    assert parse_args(required, environ={}).heartbeat_seconds == 60
    assert parse_args(required, environ={"WATCHER_HEARTBEAT_SECONDS": "0"}).heartbeat_seconds == 0


class SendOnlySqs:
    """SQS as the watcher's role sees it: SendMessage allowed, every read AccessDenied (AWS JSON protocol)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                target = self.headers["X-Amz-Target"]
                if target == "AmazonSQS.SendMessage":
                    fake.sent.append(request)
                    digest = hashlib.md5(request["MessageBody"].encode()).hexdigest()
                    status, body, headers = 200, {"MessageId": "m-1", "MD5OfMessageBody": digest}, {}
                else:
                    status, headers = 400, {"x-amzn-query-error": "AccessDenied;Sender"}
                    body = {"__type": "com.amazon.coral.service#AccessDeniedException", "message": "denied"}
                data = json.dumps(body).encode()
                self.send_response(status)
                for key, value in {"Content-Type": "application/x-amz-json-1.0", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def test_send_only_role_is_ready_and_heartbeats() -> None:
    fake = SendOnlySqs()
    try:
        urls = {"Service": f"{fake.url}/123456789012/services.fifo", "Node": f"{fake.url}/123456789012/nodes.fifo"}
        metrics = Metrics()
        beats = Sender(
            sqs_client(fake.url), urls, DeltaBuffer(10), metrics, probe_seconds=0.1, heartbeat_seconds=1, replica="r"
        )
        beats.start()
        try:
            wait_until(lambda: sent(metrics) >= 1, timeout=10)
            # Every probe's GetQueueAttributes is denied, yet SQS answered: reachable all along (the pod stays ready).
            for _ in range(8):
                time.sleep(0.1)
                assert beats.reachable
        finally:
            beats.stop(1)
    finally:
        fake.server.shutdown()
    assert parse_delta(fake.sent[0]["MessageBody"]).type == HEARTBEAT
    assert fake.sent[0]["QueueUrl"] == urls["Service"]
