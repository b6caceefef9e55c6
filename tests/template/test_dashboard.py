"""No dead widgets: every metric the dashboard plots or an alarm watches is one our code emits (name, namespace,
dimensions) or an AWS metric of a resource that exists, for every combination of features. The dashboard and the
alarms live in observability.yaml, evaluated with what template.yaml passes it (the nested stack `Observability`)."""

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

from tests.template.cfn import ROOT, SCENARIOS, Stack

NESTED = "Observability"  # template.yaml's nested application of observability.yaml

CODE = ROOT / "layers" / "ccm" / "ccm"
AWS_METRICS = {
    "AWS/SQS": ("QueueName", {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible",
                              "ApproximateNumberOfMessagesNotVisible"}),
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
            # The shared call metrics (ccm/call_metrics.py) plus the duration name the caller passes.
            names.update(emitted_names(ROOT / "layers" / "ccm" / "ccm" / "call_metrics.py"))
            duration = node.args[2]
            assert isinstance(duration, ast.Constant), f"{module}: duration metric name not found"
            names.add(duration.value)
        nonzero = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "add_if_nonzero"
        if nonzero or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_metric"
        ):
            assert isinstance(node, ast.Call)
            (arg,) = [node.args[1]] if nonzero else [kw.value for kw in node.keywords if kw.arg == "name"]
            if isinstance(arg, ast.Constant):
                names.add(arg.value)
            elif isinstance(arg, ast.Name) and arg.id in parameters:
                continue  # named by the caller (add_call_metrics' duration): collected at the call site
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


def dashboard_metrics(stack: Stack) -> list[tuple[str, list[Any]]]:
    assert not stack.of_type("AWS::CloudWatch::Dashboard"), "the dashboard belongs in observability.yaml"
    obs = stack.nested[NESTED]
    (dash,) = obs.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.loads(obs.value(dash["Properties"]["DashboardBody"]))
    out = []
    for widget in body["widgets"]:
        assert widget["type"] == "metric"
        props = widget["properties"]
        assert props["metrics"], f"widget {props['title']!r} plots nothing"
        assert props["region"] == "us-east-1"
        out.extend((props["title"], entry) for entry in props["metrics"])
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
        assert ("AWS/Lambda", "Errors", (("FunctionName", f"<{fn}>"),)) in names, fn
    for queue in stack.of_type("AWS::SQS::Queue").values():
        name = stack.value(queue["Properties"]["QueueName"])
        assert ("AWS/SQS", "ApproximateNumberOfMessagesVisible", (("QueueName", name),)) in names, name


def test_dashboard_has_what_operators_need() -> None:
    stack = Stack(SCENARIOS["routes"])
    plotted = {(split(e)[1], dict(split(e)[2]).get("service"), (e[-1] if isinstance(e[-1], dict) else {}).get("stat"))
               for _, e in dashboard_metrics(stack)}  # fmt: skip
    for service, duration in (("service-reconciler", "ReconcileDuration"), ("node-reconciler", "NodeRecordDuration"),
                              ("route-reconciler", "ReconcileDuration")):  # fmt: skip
        assert {(duration, service, p) for p in ("p50", "p90", "p99")} <= plotted, service
        assert ("AwsMutatingCalls", service, None) in plotted and ("AwsThrottles", service, None) in plotted, service
    assert {("EndToEndLatency", "service-reconciler", p) for p in ("p50", "p90", "p99")} <= plotted
    assert {("RouteEndToEndLatency", "route-reconciler", p) for p in ("p50", "p90", "p99")} <= plotted
    assert ("WatcherLag", "service-reconciler", "p50") in plotted
    assert {m for m, _, _ in plotted} >= {"ApproximateAgeOfOldestMessage", "Errors", "Throttles"}


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
        metric = "ApproximateNumberOfMessagesVisible" if queue.endswith("DLQ") else "ApproximateAgeOfOldestMessage"
        if queue.startswith("Nodes") and "NodeReconcilerFunction" not in stack.resources:
            continue  # nobody consumes the nodes queue, so its age says nothing and nothing reaches its DLQ
        assert (metric, (("QueueName", stack.value(spec["Properties"]["QueueName"])),)) in watched, (queue, metric)
    for fn in stack.of_type("AWS::Lambda::Function"):
        assert ("Errors", (("FunctionName", f"<{fn}>"),)) in watched, fn
        # Throttles are plotted, not alarmed: a throttled batch stays queued and the queue age alarm catches
        # throttling that lasts (observability.yaml says why; docs/operations.md lists the alarms).
        assert ("Throttles", (("FunctionName", f"<{fn}>"),)) not in watched, fn
    silence = alarms["WatcherSilenceAlarm"]["Properties"]
    assert (silence["MetricName"], silence["TreatMissingData"], silence["ComparisonOperator"]) == (
        "WatcherHeartbeat",
        "breaching",
        "LessThanThreshold",
    )


_EMF_PROBE = """
import json, sys, time
from ccm.contracts.messages import heartbeat_for
from ccm.service.runtime import ServiceRuntime, metrics
ServiceRuntime.on_heartbeat(heartbeat_for("probe", time.time(), 60), time.time())
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
    assert {m["Name"] for m in directive["Metrics"]} == {"WatcherHeartbeat", "WatcherLag"}


def test_metric_name_scan_sees_loop_fed_names() -> None:
    names = emitted_names(CODE / "route" / "runtime.py")
    assert {"RoutesCreated", "RouteProblems", "AwsThrottles", "RouteEndToEndLatency"} <= names
