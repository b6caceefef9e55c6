"""The real template + the real service reconciler handler under the runner: malformed deltas end in the DLQ.

Malformed bodies never reach Kubernetes, so a kubeconfig pointing nowhere is enough; the handler's own
ChangeMessageVisibility(0) (through AWS_ENDPOINT_URL) makes each retry immediate, so ten receives take no time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devstack.aws import client, seed_world
from devstack.queues import create_queues, create_tables
from devstack.runner import EventSourceRunner
from devstack.sqs_sender import ROLE_IDS
from devstack.template import load_template

from .conftest import REGION

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: none, user: {token: unused}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def test_malformed_deltas_reach_the_dlq(endpoint: str, sqs: Any, tmp_path: Path) -> None:
    world = seed_world(endpoint, REGION, "realfn", nodes=1)
    facts = load_template(ROOT / "template.yaml", {"ClusterName": "realfn", "VpcId": world.vpc_id}, region=REGION)
    urls = create_queues(sqs, facts, "realfn")
    facts = facts.with_resources({**create_tables(client("dynamodb", endpoint, REGION), facts), **ROLE_IDS})
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    runner = EventSourceRunner(
        facts,
        urls,
        endpoint_url=endpoint,
        env_overrides={
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "KUBE_AUTH_MODE": "kubeconfig",
            "KUBECONFIG": str(tmp_path / "kubeconfig"),
        },
    )
    # Every execution environment is a new process: the layer's packages are imported afresh in the function env
    # (module-level Powertools Metrics/Logger and the cached runtime), whatever this test session imported.
    assert runner.fresh_modules == ("ccm",)
    records = json.loads((ROOT / "events" / "malformed.json").read_text())["Records"]
    for rec in records:
        sqs.send_message(
            QueueUrl=urls["ServicesQueue"],
            MessageBody=rec["body"],
            MessageGroupId=rec["attributes"]["MessageGroupId"],
            MessageDeduplicationId=rec["attributes"]["MessageDeduplicationId"],
        )
    with runner:
        runner.drain(30)

    assert runner.invocations == 10  # maxReceiveCount 10, then moto moves them on the next receive
    assert all(inv.outcome == "partial" for inv in runner.log)
    # The function's log stream holds each rejection once (Powertools' logger does not also reach the root logger
    # the runtime set up), with the reason as a field: one per invocation (both records share a group, so the
    # second is reported failed unread behind the first, the FIFO rule).
    rejected = [
        r for r in runner.log_records("ServiceReconcilerFunction") if r.get("message") == "rejecting malformed message"
    ]
    assert len(rejected) == runner.invocations and all(r["level"] == "ERROR" and r["reason"] for r in rejected)
    dlq = sqs.receive_message(QueueUrl=urls["ServicesDLQ"], MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in dlq) == sorted(r["body"] for r in records)
