"""No dead widgets: every metric the dashboard plots or an alarm watches is one our code emits (name, namespace,
dimensions) or an AWS metric of a resource that exists, and every Logs Insights widget reads the log group of a
function of this deployment and fields its log lines really carry, for every combination of features. The dashboard
and the alarms live in observability.yaml, evaluated with what template.yaml passes it (the nested stack
`Observability`)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from bench.scenarios.cost_inputs import logged_lines
from devstack.logs_insights import parse
from tests.template.cfn import ROOT, SCENARIOS, Stack

NESTED = "Observability"  # template.yaml's nested application of observability.yaml

CODE = ROOT / "layers" / "ccm" / "ccm"
AWS_METRICS = {
    "AWS/SQS": ("QueueName", {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible",
                              "ApproximateNumberOfMessagesNotVisible", "NumberOfMessagesDeleted"}),
    "AWS/Lambda": ("FunctionName", {"Errors", "Throttles"}),
}  # fmt: skip
AWS_RESOURCE_TYPE = {"AWS/SQS": "AWS::SQS::Queue", "AWS/Lambda": "AWS::Lambda::Function"}


@cache
def emitted_names(module: Path) -> frozenset[str]:
    """Metric names a module passes to add_metric or add_if_nonzero (ccm/call_metrics.py): literals, or the
    literals a for-loop feeds to `name`."""
    tree = ast.parse(module.read_text())
    names: set[str] = set()
    loop_values: dict[str, set[str]] = {}
    parameters = {arg.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for arg in node.args.args}
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) and isinstance(node.iter, ast.Tuple):
            for i, target in enumerate(node.target.elts):
                if isinstance(target, ast.Name):
                    loop_values.setdefault(target.id, set()).update(
                        item.elts[i].value
                        for item in node.iter.elts
                        if isinstance(item, ast.Tuple) and isinstance(item.elts[i], ast.Constant)
                    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "add_call_metrics":
            names.update(emitted_names(ROOT / "layers" / "ccm" / "ccm" / "call_metrics.py"))  # the shared ones
        nonzero = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "add_if_nonzero"
        if nonzero or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_metric"
        ):
            assert isinstance(node, ast.Call)
            (arg,) = [node.args[1]] if nonzero else [kw.value for kw in node.keywords if kw.arg == "name"]
            if isinstance(arg, ast.Constant):
                names.add(arg.value)
            elif isinstance(arg, ast.Name) and arg.id in parameters:
                continue  # named by the caller (add_if_nonzero's own `name`): collected at the call site
            else:
                assert isinstance(arg, ast.Name) and loop_values.get(arg.id), f"{module}: metric name not found"
                names.update(loop_values[arg.id])
    return frozenset(names)


@cache
def handler_metrics_module(code_uri: str) -> Path:
    """The runtime module whose `metrics` the function's handler flushes (functions/<x>/app.py imports it)."""
    app = ROOT / code_uri.removeprefix("s3://artifacts/").removesuffix(".zip") / "app.py"
    for node in ast.walk(ast.parse(app.read_text())):
        if isinstance(node, ast.ImportFrom) and any(a.name == "metrics" for a in node.names):
            return ROOT / "layers" / "ccm" / Path(*str(node.module).split(".")).with_suffix(".py")
    raise AssertionError(f"{app} flushes no metrics object")


def emitted(stack: Stack) -> dict[tuple[str, str, tuple[tuple[str, str], ...]], str]:
    """(namespace, name, dimensions) -> function, for every function of this deployment."""
    out: dict[tuple[str, str, tuple[tuple[str, str], ...]], str] = {}
    for logical_id, fn in stack.of_type("AWS::Lambda::Function").items():
        env = stack.value(fn["Properties"]["Environment"]["Variables"])
        code = fn["Properties"]["Code"]
        module = handler_metrics_module(f"s3://artifacts/{code['S3Key']}")
        # Powertools adds the one dimension service=POWERTOOLS_SERVICE_NAME (checked for real in test_emf_shape...)
        dims = (("service", env["POWERTOOLS_SERVICE_NAME"]),)
        for name in emitted_names(module):
            out[(env["POWERTOOLS_METRICS_NAMESPACE"], name, dims)] = logical_id
    return out


def dashboard_widgets(stack: Stack) -> list[dict[str, Any]]:
    assert not stack.of_type("AWS::CloudWatch::Dashboard"), "the dashboard belongs in observability.yaml"
    obs = stack.nested[NESTED]
    (dash,) = obs.of_type("AWS::CloudWatch::Dashboard").values()
    widgets: list[dict[str, Any]] = json.loads(obs.value(dash["Properties"]["DashboardBody"]))["widgets"]
    for widget in widgets:
        assert widget["type"] in ("metric", "log"), widget
        assert widget["properties"]["region"] == "us-east-1"
    return widgets


def dashboard_metrics(stack: Stack) -> list[tuple[str, list[Any]]]:
    out = []
    for widget in dashboard_widgets(stack):
        props = widget["properties"]
        if widget["type"] == "metric":
            assert props["metrics"], f"widget {props['title']!r} plots nothing"
            out.extend((props["title"], entry) for entry in props["metrics"])
    return out


def dashboard_queries(stack: Stack) -> list[tuple[str, str]]:
    """(title, Logs Insights query) of every log widget; as the console draws it (view timeSeries, a line each)."""
    out = []
    for widget in dashboard_widgets(stack):
        props = widget["properties"]
        if widget["type"] == "log":
            assert props["view"] == "timeSeries" and props["stacked"] is False, props["title"]
            out.append((props["title"], props["query"]))
    return out


def log_group_writers(stack: Stack) -> dict[str, str]:
    """Log group ("<LogicalId>", as a Ref reaches the nested stack) -> the function that logs there."""
    out = {}
    for logical_id, fn in stack.of_type("AWS::Lambda::Function").items():
        group = stack.value(fn["Properties"]["LoggingConfig"]["LogGroup"])
        assert group.strip("<>") in stack.of_type("AWS::Logs::LogGroup"), (logical_id, group)
        out[group] = logical_id
    return out


def split(entry: list[Any]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    fields = entry[:-1] if isinstance(entry[-1], dict) else entry
    namespace, name, *dims = fields
    assert len(dims) % 2 == 0 and "..." not in dims, entry
    return namespace, name, tuple(sorted(zip(dims[::2], dims[1::2], strict=True)))


def check_metric(stack: Stack, metric: tuple[str, str, tuple[tuple[str, str], ...]], where: str) -> None:
    namespace, name, dims = metric
    if namespace in AWS_METRICS:
        dim_name, names = AWS_METRICS[namespace]
        assert name in names, (where, metric)
        ((key, value),) = dims
        assert key == dim_name, (where, metric)
        rtype = AWS_RESOURCE_TYPE[namespace]
        if namespace == "AWS/SQS":
            queues = {stack.value(q["Properties"]["QueueName"]) for q in stack.of_type(rtype).values()}
            assert value in queues, (where, metric, queues)
        else:
            assert value.strip("<>") in stack.of_type(rtype), (where, metric)
        return
    assert metric in emitted(stack), f"{where}: {metric} is not emitted by any function of this deployment"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_plotted_metric_is_emitted_or_exists(scenario: str) -> None:
    stack = Stack(SCENARIOS[scenario])
    plotted = dashboard_metrics(stack)
    for title, entry in plotted:
        check_metric(stack, split(entry), title)
    # Each existing function and queue is on the dashboard (nothing left unwatched).
    names = {split(e) for _, e in plotted}
    for fn in stack.of_type("AWS::Lambda::Function"):
        if fn == "TeardownFunction":
            continue  # runs once, while the stack and its dashboard are deleted: CloudFormation shows its outcome
        assert ("AWS/Lambda", "Errors", (("FunctionName", f"<{fn}>"),)) in names, fn
    for queue in stack.of_type("AWS::SQS::Queue").values():
        name = stack.value(queue["Properties"]["QueueName"])
        assert ("AWS/SQS", "ApproximateNumberOfMessagesVisible", (("QueueName", name),)) in names, name


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_log_widget_reads_its_functions_log_group_and_fields_its_lines_carry(scenario: str) -> None:
    """Each SOURCE is the log group of a function of this deployment (its LoggingConfig.LogGroup in template.yaml);
    the query is in the subset the devstack evaluates (parse raises otherwise); and among the lines that function's
    runtime really prints at INFO (bench.scenarios.cost_inputs.logged_lines: every situation of the cost model)
    some pass the filters with a number in every aggregated field."""
    stack = Stack(SCENARIOS[scenario])
    writers = log_group_writers(stack)
    lines = logged_lines()
    queries = dashboard_queries(stack)
    assert queries
    for title, text in queries:
        query = parse(text)
        for group in query.sources:
            assert group in writers, (title, group, writers)
            fn = stack.resources[writers[group]]["Properties"]
            service = stack.value(fn["Environment"]["Variables"])["POWERTOOLS_SERVICE_NAME"]
            passing = [line for line in lines[service] if all(f.matches(line) for f in query.filters)]
            assert passing, (title, group, query.filters)
            for agg in query.aggregates:
                if agg.field is not None:
                    values = [line[agg.field] for line in passing if agg.field in line]
                    assert any(isinstance(v, int | float) and not isinstance(v, bool) for v in values), (
                        title, service, agg.field)  # fmt: skip


def percentiles(queries: list[tuple[str, str]], source: str, field: str) -> set[float]:
    found = set()
    for _, text in queries:
        query = parse(text)
        if source in query.sources:
            found |= {a.percentile for a in query.aggregates if a.function == "pct" and a.field == field}
    return {p for p in found if p is not None}


def test_dashboard_has_what_operators_need() -> None:
    stack = Stack(SCENARIOS["routes"])
    plotted = {(split(e)[1], dict(split(e)[2]).get("service")) for _, e in dashboard_metrics(stack)}
    queries = dashboard_queries(stack)
    groups = {fn: group for group, fn in log_group_writers(stack).items()}
    for fn in ("ServiceReconcilerFunction", "NodeReconcilerFunction", "RouteReconcilerFunction"):
        # durations and end to end latencies: p50/p90/p99 per function, from the record's log line
        assert percentiles(queries, groups[fn], "duration_ms") == {50, 90, 99}, fn
        assert percentiles(queries, groups[fn], "end_to_end_ms") == {50, 90, 99}, fn
        assert any(groups[fn] in q and "sum(mutating_calls)" in q for _, q in queries), fn
    for service in ("service-reconciler", "node-reconciler", "route-reconciler", "sweeper"):
        assert ("AwsThrottles", service) in plotted, service  # a failure counter: a metric, only when non-zero
    assert percentiles(queries, groups["ServiceReconcilerFunction"], "watcher_lag_ms") == {50}
    names = {m for m, _ in plotted}
    assert names >= {"ApproximateAgeOfOldestMessage", "Errors", "Throttles", "NumberOfMessagesDeleted"}
    assert names >= {"ReconcileFailed", "MalformedMessages", "NodeRecordFailed", "RouteReconcileFailed"}
    # Nothing the runtimes stopped publishing is still plotted.
    assert not names & {"ReconcileDuration", "EndToEndLatency", "WatcherHeartbeat", "WatcherLag"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_alarm_watches_a_live_metric_and_notifies_when_asked(scenario: str) -> None:
    stack = Stack(SCENARIOS[scenario])
    assert not stack.of_type("AWS::CloudWatch::Alarm"), "the alarms belong in observability.yaml"
    obs = stack.nested[NESTED]
    alarms = obs.of_type("AWS::CloudWatch::Alarm")
    topic = stack.params["AlarmEmail"] != ""
    assert ("AlarmTopic" in obs.resources) is topic
    watched = set()
    for logical_id, alarm in alarms.items():
        props = obs.value(alarm["Properties"])
        dims = tuple(sorted((d["Name"], d["Value"]) for d in props["Dimensions"]))
        check_metric(stack, (props["Namespace"], props["MetricName"], dims), logical_id)
        assert props.get("AlarmActions") == (["<AlarmTopic>"] if topic else None), logical_id
        watched.add((props["MetricName"], dims))
    for queue, spec in stack.of_type("AWS::SQS::Queue").items():
        # A DLQ by its visible messages; the services queue by its deletions (the heartbeats: WatcherSilenceAlarm
        # is the faster stuck-pipeline alarm there); every other consumed queue by the age of its oldest message.
        metric = {"ServicesQueue": "NumberOfMessagesDeleted"}.get(queue, "ApproximateAgeOfOldestMessage")
        metric = "ApproximateNumberOfMessagesVisible" if queue.endswith("DLQ") else metric
        if queue.startswith("Nodes") and "NodeReconcilerFunction" not in stack.resources:
            continue  # nobody consumes the nodes queue, so its age says nothing and nothing reaches its DLQ
        assert (metric, (("QueueName", stack.value(spec["Properties"]["QueueName"])),)) in watched, (queue, metric)
    mappings = stack.of_type("AWS::Lambda::EventSourceMapping").values()
    fed = {stack.value(m["Properties"]["FunctionName"]).strip("<>") for m in mappings}
    assert "ServiceReconcilerFunction" in fed and "SweeperFunction" not in fed
    for fn in stack.of_type("AWS::Lambda::Function"):
        if fn == "TeardownFunction":
            assert ("Errors", (("FunctionName", f"<{fn}>"),)) not in watched  # stack deletion reports it
            continue
        # A queue-fed function is watched through its queue (a failing handler leaves its messages undeleted); only
        # the scheduled sweeper has an Errors alarm. Throttles are plotted, not alarmed (observability.yaml says why;
        # docs/operations.md lists the alarms).
        assert (("Errors", (("FunctionName", f"<{fn}>"),)) in watched) is (fn not in fed), fn
        assert ("Throttles", (("FunctionName", f"<{fn}>"),)) not in watched, fn
    # The watcher's heartbeats are deleted from the services queue once processed: the free SQS metric stands in
    # for a custom heartbeat metric; missing data (no message at all) breaches.
    silence = obs.value(alarms["WatcherSilenceAlarm"]["Properties"])
    services_queue = stack.value(stack.resources["ServicesQueue"]["Properties"]["QueueName"])
    assert (silence["Namespace"], silence["MetricName"], silence["Dimensions"]) == (
        "AWS/SQS", "NumberOfMessagesDeleted", [{"Name": "QueueName", "Value": services_queue}])  # fmt: skip
    assert (silence["Statistic"], silence["Period"], silence["EvaluationPeriods"], silence["Threshold"]) == (
        "Sum", 300, 2, 1)  # fmt: skip
    assert (silence["TreatMissingData"], silence["ComparisonOperator"]) == ("breaching", "LessThanThreshold")
    assert not [a for a in alarms.values() if obs.value(a["Properties"])["Namespace"] == "ServerlessCCM"]


_EMF_PROBE = """
import contextlib
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from ccm.config import Settings
from ccm.service.runtime import ServiceBatch, ServiceRuntime, metrics
runtime = ServiceRuntime(Settings("probe", "vpc-1"), None, None, None)  # a malformed body needs no client
with contextlib.suppress(Exception):
    runtime.handle_record(SQSRecord({"messageId": "m", "body": "not a delta", "attributes": {
        "ApproximateReceiveCount": "1", "SentTimestamp": "0", "SenderId": "probe"}}), ServiceBatch(creations=1))
metrics.flush_metrics()
"""


def test_emf_shape_matches_what_the_dashboard_assumes() -> None:
    """Run the real emitting code with the function's environment from the template and read its EMF line."""
    stack = Stack({})
    fn = stack.resources["ServiceReconcilerFunction"]["Properties"]
    env = {k: v for k, v in stack.value(fn["Environment"]["Variables"]).items() if k.startswith("POWERTOOLS_")}
    run_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "ccm"), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", _EMF_PROBE], env=run_env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    (doc,) = [json.loads(line) for line in out.splitlines() if line.startswith("{") and "_aws" in line]
    (directive,) = doc["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == env["POWERTOOLS_METRICS_NAMESPACE"]
    assert directive["Dimensions"] == [["service"]] and doc["service"] == env["POWERTOOLS_SERVICE_NAME"]
    for metric in directive["Metrics"]:
        key = (directive["Namespace"], metric["Name"], (("service", doc["service"]),))
        assert key in emitted(stack), key
    assert {m["Name"] for m in directive["Metrics"]} == {"MalformedMessages"}


def test_metric_name_scan_sees_loop_fed_names() -> None:
    names = emitted_names(CODE / "route" / "runtime.py")
    assert {"RouteProblems", "RouteCallsFailed", "AwsThrottles", "RouteReconcileFailed"} <= names
    assert "RoutesCreated" not in names and "RouteEndToEndLatency" not in names
