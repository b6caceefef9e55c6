"""EventSourceRunner invokes a real handler file like the Lambda SQS ESM does, against moto over HTTP.

The handler (written to tmp_path, loaded by path) is steered by each message body:
  {"g": group, "i": index, "fail": "once"|"always", "raise": "once", "bogus": "once", "sleep": seconds}
and appends one JSON line per record it sees to $TEST_LOG. It follows the FIFO partial-failure rule: after the
first failure in a group it reports that record and every later record of the group.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack.queues import create_queues
from devstack.runner import EventSourceRunner
from devstack.template import load_template

from .conftest import REGION

VISIBILITY = 1  # seconds; redeliveries in these tests wait this long

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  ClusterName: {Type: String}
  Concurrency: {Type: Number, Default: 2}
  BatchSize: {Type: Number, Default: 10}
  LogLevel: {Type: String, Default: INFO}
Globals:
  Function:
    Runtime: python3.13
    Timeout: 1
    MemorySize: 256
    Environment:
      Variables:
        CLUSTER_NAME: !Ref ClusterName
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: !Sub ${ClusterName}-work.fifo
      FifoQueue: true
      VisibilityTimeout: @VISIBILITY@
      RedrivePolicy: {deadLetterTargetArn: !GetAtt WorkDLQ.Arn, maxReceiveCount: 2}
  WorkDLQ:
    Type: AWS::SQS::Queue
    Properties: {QueueName: !Sub "${ClusterName}-work-dlq.fifo", FifoQueue: true}
  Plain:
    Type: AWS::SQS::Queue
    Properties: {QueueName: !Sub "${ClusterName}-plain.fifo", FifoQueue: true, VisibilityTimeout: @VISIBILITY@}
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: worker/
      Handler: app.handler
      LoggingConfig: {LogFormat: JSON, ApplicationLogLevel: !Ref LogLevel}
      Environment: {Variables: {WORK_QUEUE_URL: !Ref Work}}
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: !Ref BatchSize
            FunctionResponseTypes: [ReportBatchItemFailures]
            ScalingConfig: {MaximumConcurrency: !Ref Concurrency}
  NoReport:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: noreport/
      Handler: app.handler
      Events:
        Plain:
          Type: SQS
          Properties: {Queue: !GetAtt Plain.Arn, BatchSize: 10, ScalingConfig: {MaximumConcurrency: 2}}
""".replace("@VISIBILITY@", str(VISIBILITY))

HANDLER = """\
import json, logging, os, threading, time

_lock = threading.Lock()
NAME = "@NAME@"
INVOCATIONS = []  # module state: one list per execution environment


def handler(event, context):
    started = time.time()
    records = event["Records"]
    INVOCATIONS.append(context.aws_request_id)
    logging.getLogger("fn").debug("debug line of %s", context.aws_request_id)
    logging.getLogger("fn").info("info line", extra={"request": context.aws_request_id})
    failed, failed_groups, lines, pause, explode, bogus = [], set(), [], 0.0, False, False
    for pos, rec in enumerate(records):
        body = json.loads(rec["body"])
        group = rec["attributes"]["MessageGroupId"]
        receive = int(rec["attributes"]["ApproximateReceiveCount"])
        pause = max(pause, body.get("sleep", 0), body.get("sleep_once", 0) if receive == 1 else 0)
        explode = explode or (body.get("raise") == "once" and receive == 1)
        bogus = bogus or (body.get("bogus") == "once" and receive == 1)
        fails = body.get("fail") == "always" or (body.get("fail") == "once" and receive == 1)
        if group in failed_groups or fails:
            failed_groups.add(group)
            failed.append(rec["messageId"])
        lines.append({
            "fn": NAME, "request": context.aws_request_id, "group": group, "i": body["i"], "receive": receive,
            "batch": len(records), "pos": pos, "failed": rec["messageId"] in failed, "record": rec,
            "remaining_ms": context.get_remaining_time_in_millis(), "function_name": context.function_name,
            "memory": context.memory_limit_in_mb, "arn": context.invoked_function_arn,
            "env": {k: os.environ.get(k) for k in ("CLUSTER_NAME", "WORK_QUEUE_URL", "EXTRA", "PARENT_ONLY",
                    "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_LOG_LEVEL", "AWS_LAMBDA_LOG_FORMAT")},
            "pid": os.getpid(), "root_level": logging.getLevelName(logging.getLogger().level),
            "invocations_here": len(INVOCATIONS),
        })
    with _lock, open(os.environ["TEST_LOG"] + ".started", "a") as out:  # before the sleep: a killed run shows too
        out.writelines(json.dumps({**line, "start": started}) + "\\n" for line in lines)
    time.sleep(pause)
    for line in lines:
        line.update(start=started, end=time.time(), remaining_end_ms=context.get_remaining_time_in_millis())
    with _lock, open(os.environ["TEST_LOG"], "a") as out:
        out.writelines(json.dumps(line) + "\\n" for line in lines)
    print("tail without newline", end="")  # the runtime's stdout is unbuffered: this still reaches the log
    if explode:
        raise RuntimeError("boom")
    if bogus:
        return {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}]}
    return {"batchItemFailures": [{"itemIdentifier": i} for i in failed]}
"""


@dataclass
class Stack:
    runner: EventSourceRunner
    urls: dict[str, str]
    log_path: Path
    sqs: Any

    def send(self, queue: str, group: str, i: int, **extra: Any) -> None:
        self.sqs.send_message(
            QueueUrl=self.urls[queue],
            MessageBody=json.dumps({"g": group, "i": i, **extra}),
            MessageGroupId=group,
            MessageDeduplicationId=f"{group}-{i}",
            MessageAttributes={
                "origin": {"DataType": "String", "StringValue": "test"},
                "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
            },
        )

    def seen(self, fn: str = "Worker", path: Path | None = None) -> list[dict[str, Any]]:
        path = path or self.log_path
        if not path.exists():
            return []
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        return [x for x in lines if x["fn"] == fn]

    def started(self, fn: str = "Worker") -> list[dict[str, Any]]:
        """Records as the handler saw them before its sleep (also those of invocations killed at Timeout)."""
        return self.seen(fn, self.log_path.with_name(self.log_path.name + ".started"))


@pytest.fixture
def make_stack(tmp_path: Path, sqs: Any, endpoint: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    runners: list[EventSourceRunner] = []

    def make(echo_logs: Any = None, **parameters: Any) -> Stack:
        (tmp_path / "template.yaml").write_text(TEMPLATE)
        for fn in ("worker", "noreport"):
            (tmp_path / fn).mkdir(exist_ok=True)
            (tmp_path / fn / "app.py").write_text(HANDLER.replace("@NAME@", "Worker" if fn == "worker" else "NoReport"))
        cluster = f"t{abs(hash(request.node.name)) % 10**8}-{len(runners)}"
        facts = load_template(tmp_path / "template.yaml", {"ClusterName": cluster, **parameters}, region=REGION)
        urls = create_queues(sqs, facts, cluster)
        log_path = tmp_path / "seen.jsonl"
        runner = EventSourceRunner(
            facts,
            urls,
            endpoint_url=endpoint,
            env_overrides={"TEST_LOG": str(log_path), "EXTRA": "override"},
            echo_logs=echo_logs,
        )
        runners.append(runner)
        return Stack(runner, urls, log_path, sqs)

    yield make
    for runner in runners:
        runner.stop()


def _by_group(seen: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in sorted(seen, key=lambda x: (x["start"], x["pos"])):
        groups[line["group"]].append(line)
    return groups


def test_batches_records_context_and_env(make_stack: Any) -> None:
    stack = make_stack()
    for i in range(23):
        stack.send("Work", "default/web", i)
    stack.runner.start()
    stack.runner.drain(15)

    seen = stack.seen()
    assert sorted(x["i"] for x in seen) == list(range(23))
    assert all(x["batch"] <= 10 for x in seen)
    assert stack.runner.invocations >= 3 and stack.runner.records == 23 and stack.runner.failures == 0
    assert max(inv.batch_size for inv in stack.runner.log) <= 10
    queue_arn = stack.sqs.get_queue_attributes(QueueUrl=stack.urls["Work"], AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    for line in seen:
        rec = line["record"]
        assert set(rec) == {
            "messageId",
            "receiptHandle",
            "body",
            "attributes",
            "messageAttributes",
            "md5OfBody",
            "md5OfMessageAttributes",
            "eventSource",
            "eventSourceARN",
            "awsRegion",
        }
        assert rec["md5OfBody"] == hashlib.md5(rec["body"].encode()).hexdigest()
        assert set(rec["attributes"]) >= {
            "ApproximateReceiveCount",
            "SentTimestamp",
            "SequenceNumber",
            "MessageGroupId",
            "SenderId",
            "MessageDeduplicationId",
            "ApproximateFirstReceiveTimestamp",
        }
        assert rec["attributes"]["MessageGroupId"] == "default/web"
        assert rec["messageAttributes"]["origin"] == {
            "stringValue": "test",
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "String",
        }
        assert rec["messageAttributes"]["blob"]["dataType"] == "Binary"
        assert (rec["eventSource"], rec["eventSourceARN"], rec["awsRegion"]) == ("aws:sqs", queue_arn, REGION)
        assert 0 < line["remaining_ms"] <= 1000  # template Timeout: 1
        assert line["function_name"].endswith("-Worker") and line["arn"].endswith(":function:" + line["function_name"])
        assert line["memory"] == 256
        # Template env (with !Ref Work resolved to the queue URL) plus the runner's overrides.
        assert line["env"]["WORK_QUEUE_URL"] == stack.urls["Work"]
        assert line["env"]["CLUSTER_NAME"].startswith("t") and line["env"]["EXTRA"] == "override"


def test_fifo_order_within_group_across_batches(make_stack: Any) -> None:
    stack = make_stack()
    for i in range(14):
        for group in ("a/x", "b/y", "c/z"):
            stack.send("Work", group, i)
    stack.runner.start()
    stack.runner.drain(15)
    groups = _by_group(stack.seen())
    assert set(groups) == {"a/x", "b/y", "c/z"}
    for lines in groups.values():
        assert [x["i"] for x in lines] == list(range(14))
        assert len({x["request"] for x in lines}) >= 2  # the group spanned several batches


def test_groups_run_in_parallel_up_to_maximum_concurrency(make_stack: Any) -> None:
    stack = make_stack(Concurrency=2, BatchSize=1)
    for i in range(3):
        for group in ("a/x", "b/y", "c/z"):
            stack.send("Work", group, i, sleep=0.2)
    stack.runner.start()
    stack.runner.drain(20)
    seen = stack.seen()
    assert len(seen) == 9 and all(x["batch"] == 1 for x in seen)
    assert stack.runner.peak_concurrency["Worker"] == 2
    overlaps = [(a, b) for a in seen for b in seen if a is not b and a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlaps, "no two invocations ran at the same time"
    assert all(a["group"] != b["group"] for a, b in overlaps), "a group had two records in flight at once"
    for x in seen:  # never more than MaximumConcurrency at once
        assert sum(1 for y in seen if y["start"] <= x["start"] < y["end"]) <= 2
    for lines in _by_group(seen).values():
        assert [x["i"] for x in lines] == [0, 1, 2]


def test_report_batch_item_failures_deletes_only_successes(make_stack: Any) -> None:
    stack = make_stack(Concurrency=2)
    stack.send("Work", "a/x", 0)
    stack.send("Work", "a/x", 1, fail="once")
    stack.send("Work", "a/x", 2)  # fine itself, but after a1 in its group: reported too (FIFO rule)
    stack.send("Work", "b/y", 0)
    stack.send("Work", "b/y", 1)
    stack.runner.start()
    stack.runner.drain(15)

    groups = _by_group(stack.seen())
    a = [(x["i"], x["receive"], x["failed"]) for x in groups["a/x"]]
    assert a == [(0, 1, False), (1, 1, True), (2, 1, True), (1, 2, False), (2, 2, False)]
    assert [(x["i"], x["receive"]) for x in groups["b/y"]] == [(0, 1), (1, 1)]  # other group unaffected
    first, again = groups["a/x"][1], groups["a/x"][3]
    assert again["start"] - first["end"] >= VISIBILITY * 0.8  # came back after the visibility timeout
    assert stack.runner.failures == 2
    assert {inv.outcome for inv in stack.runner.log} >= {"partial", "success"}
    dlq = stack.sqs.get_queue_attributes(QueueUrl=stack.urls["WorkDLQ"], AttributeNames=["All"])["Attributes"]
    assert dlq["ApproximateNumberOfMessages"] == "0"


def test_poison_record_lands_in_dlq_after_max_receive_count(make_stack: Any) -> None:
    stack = make_stack()
    stack.send("Work", "p/q", 0, fail="always")
    stack.send("Work", "ok/1", 0)
    stack.runner.start()
    stack.runner.drain(15)
    poison = [x for x in stack.seen() if x["group"] == "p/q"]
    assert [x["receive"] for x in poison] == [1, 2]  # maxReceiveCount: 2
    assert [x["group"] for x in stack.seen() if not x["failed"]] == ["ok/1"]
    moved = stack.sqs.receive_message(
        QueueUrl=stack.urls["WorkDLQ"], MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert [json.loads(m["Body"]) for m in moved] == [{"g": "p/q", "i": 0, "fail": "always"}]
    assert moved[0]["Attributes"]["MessageGroupId"] == "p/q"


def test_handler_exception_retries_the_whole_batch(make_stack: Any) -> None:
    stack = make_stack(Concurrency=2)
    stack.send("Work", "e/x", 0)
    stack.send("Work", "e/x", 1, **{"raise": "once"})
    stack.send("Work", "e/x", 2)
    stack.runner.start()
    stack.runner.drain(15)
    lines = _by_group(stack.seen())["e/x"]
    assert [(x["i"], x["receive"]) for x in lines] == [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (2, 2)], (
        [(x["i"], x["receive"], x["start"], x["request"][:8]) for x in lines],
        stack.runner.log,
    )
    outcomes = [inv.outcome for inv in stack.runner.log]
    assert outcomes == ["error", "success"]
    assert stack.runner.errors == 1 and stack.runner.failures == 3


def test_invalid_batch_response_fails_the_whole_batch(make_stack: Any) -> None:
    stack = make_stack(Concurrency=2)
    stack.send("Work", "v/x", 0, bogus="once")
    stack.send("Work", "v/x", 1)
    stack.runner.start()
    stack.runner.drain(15)
    lines = _by_group(stack.seen())["v/x"]
    assert [(x["i"], x["receive"]) for x in lines] == [(0, 1), (1, 1), (0, 2), (1, 2)]
    assert [inv.outcome for inv in stack.runner.log] == ["invalid-response", "success"]


def test_without_report_batch_item_failures_success_deletes_all(make_stack: Any) -> None:
    stack = make_stack()
    stack.send("Plain", "n/x", 0, fail="once")  # its batchItemFailures are ignored: no ReportBatchItemFailures
    stack.send("Plain", "n/x", 1)
    stack.runner.start()
    stack.runner.drain(15)
    lines = stack.seen("NoReport")
    assert [(x["i"], x["receive"]) for x in lines] == [(0, 1), (1, 1)]
    assert stack.runner.failures == 0
    # Both functions have an app.py; each was loaded from its own file under its own module name.
    assert {inv.function for inv in stack.runner.log} == {"NoReport"}


def test_stop_waits_for_in_flight_invocations(make_stack: Any) -> None:
    stack = make_stack()
    stack.send("Work", "s/x", 0, sleep=0.5)
    stack.runner.start()
    deadline = time.monotonic() + 10
    while not stack.runner._in_flight() and time.monotonic() < deadline:
        time.sleep(0.02)
    stack.runner.stop()
    assert stack.runner.invocations == 1 and stack.runner.log[0].outcome == "success"
    attrs = stack.sqs.get_queue_attributes(QueueUrl=stack.urls["Work"], AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == attrs["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_each_execution_environment_is_its_own_process_with_only_the_function_env(
    make_stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARENT_ONLY", "leaked")  # the test session's environment is not the function's
    stack = make_stack(Concurrency=2, BatchSize=1)
    stack.runner.start()
    pair: list[dict[str, Any]] = []
    for i in range(5):  # on a busy machine the second poller may receive only after the first invocation ended
        for group in ("a/x", "b/y"):
            stack.send("Work", group, i, sleep=0.4)
        stack.runner.drain(20)
        # The first run of each (one past the 1 s Timeout on a loaded machine is killed and runs again).
        a, b = (_by_group([x for x in stack.seen() if x["i"] == i])[g][0] for g in ("a/x", "b/y"))
        if a["start"] < b["end"] and b["start"] < a["end"]:
            pair = [a, b]
            break
    assert pair, "no two invocations overlapped in 5 rounds"
    a, b = pair
    # Concurrent invocations ran in two environments: separate processes and separate module state (each
    # environment's list of invocations holds only its own).
    assert a["pid"] != b["pid"] and {a["pid"], b["pid"]} <= set(stack.runner.environments("Worker"))
    served: Counter[int] = Counter()
    for line in sorted(stack.seen(), key=lambda x: x["start"]):
        served[line["pid"]] += 1
        assert line["invocations_here"] == served[line["pid"]]
    assert a["env"]["PARENT_ONLY"] is None and a["env"]["EXTRA"] == "override"
    assert a["env"]["AWS_LAMBDA_FUNCTION_NAME"] == a["function_name"]


def test_root_logger_level_is_the_application_log_level(make_stack: Any) -> None:
    stack = make_stack(LogLevel="DEBUG")
    stack.send("Work", "l/x", 0)
    stack.send("Plain", "l/y", 0)
    stack.runner.start()
    stack.runner.drain(15)
    (worker,) = stack.seen()
    (plain,) = stack.seen("NoReport")
    # LogFormat JSON: Lambda sets AWS_LAMBDA_LOG_LEVEL and the runtime sets the root logger to it. Text (NoReport):
    # no level variable, the root logger keeps Python's default.
    assert worker["root_level"] == "DEBUG" and worker["env"]["AWS_LAMBDA_LOG_LEVEL"] == "DEBUG"
    assert worker["env"]["AWS_LAMBDA_LOG_FORMAT"] == "JSON"
    assert plain["root_level"] == "WARNING" and plain["env"]["AWS_LAMBDA_LOG_LEVEL"] is None
    records = stack.runner.log_records("Worker")
    debug = [r for r in records if r["message"] == f"debug line of {worker['request']}"]
    assert debug and debug[0]["level"] == "DEBUG" and debug[0]["requestId"] == worker["request"]
    info = [r for r in records if r["message"] == "info line"]
    assert info and info[0]["request"] == worker["request"] and info[0]["logger"] == "fn"  # extra= fields kept
    assert not [line for line in stack.runner.logs("NoReport") if "info line" in line]  # WARNING filters INFO


def test_root_logger_at_info_by_default_filters_debug(make_stack: Any) -> None:
    stack = make_stack()  # LogLevel INFO, the template default
    stack.send("Work", "i/x", 0)
    stack.runner.start()
    stack.runner.drain(15)
    (worker,) = stack.seen()
    assert worker["root_level"] == "INFO"
    messages = [r["message"] for r in stack.runner.log_records("Worker")]
    assert "info line" in messages and not [m for m in messages if m.startswith("debug line")]


def test_a_handler_past_its_timeout_is_killed_and_its_records_come_back(make_stack: Any) -> None:
    stack = make_stack(Concurrency=2)
    stack.send("Work", "t/x", 0, sleep_once=30)  # Timeout: 1
    stack.runner.start()
    stack.runner.drain(20)
    (killed,) = [x for x in stack.started() if x["receive"] == 1]
    (retried,) = stack.seen()  # the killed run never wrote its end line
    assert retried["receive"] == 2 and retried["i"] == 0
    assert retried["start"] - killed["start"] >= VISIBILITY * 0.8  # back once the visibility timeout expired
    assert retried["pid"] != killed["pid"]  # the killed environment was replaced (a cold start)
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)
    assert [inv.outcome for inv in stack.runner.log] == ["timeout", "success"]
    assert stack.runner.log[0].duration < 5  # killed at the Timeout, not after its 30 s sleep
    assert any("Task timed out after 1.00 seconds" in line for line in stack.runner.logs("Worker"))


def test_remaining_time_counts_down(make_stack: Any) -> None:
    stack = make_stack()
    stack.send("Work", "r/x", 0, sleep=0.4)
    stack.runner.start()
    stack.runner.drain(15)
    (line,) = stack.seen()
    assert 0 < line["remaining_ms"] <= 1000
    assert line["remaining_end_ms"] <= line["remaining_ms"] - 350  # Timeout 1 s, after a 0.4 s sleep


def test_a_direct_invocation_runs_in_an_execution_environment_of_the_function(make_stack: Any) -> None:
    echoed = io.StringIO()
    stack = make_stack(echo_logs=echoed)
    stack.runner.start()
    assert stack.runner.invoke("Worker", {"Records": []}) == {"response": {"batchItemFailures": []}}
    assert stack.runner.invocations == 0  # not an event source's invocation
    messages = [r.get("message") for r in stack.runner.log_records("Worker")]
    assert "info line" in messages  # the handler ran in the function's environment, its log stream kept
    assert [line for line in echoed.getvalue().splitlines() if line.startswith("Worker {") and "info line" in line]
    assert "tail without newline" in stack.runner.logs("Worker")
