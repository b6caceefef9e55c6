"""The figures every reconciler reports for one record or pass, from the thread's exact counts.

Each distinct custom metric costs 0.30 USD a month, prorated by the hours in which it is published; the log line
is already paid for. So (docs/operations.md, "Custom metrics"):

| figure | where | why |
|---|---|---|
| duration (ReconcileDuration, NodeRecordDuration) | metric, every record | the dashboard's p50/p90/p99 per function |
| AwsMutatingCalls | metric, only when non-zero | 0 on a converged pass: a quiet hour stays free, writes stand out |
| AwsThrottles | metric, only when non-zero | the throttling signal (runbook); absent = none |
| AwsCalls, calls by operation | log line only (`aws_calls`, `calls`) | non-zero on every record: bills every hour |
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit

from ccm.contracts.cloud import CallCounting


def add_if_nonzero(metrics: Metrics, name: str, value: float) -> None:
    """A counter published only when it counted something: CloudWatch bills a metric for every hour it appears."""
    if value:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def add_call_metrics(metrics: Metrics, counter: CallCounting, duration_metric: str, started: float) -> dict[str, Any]:
    """The duration since `started`, AwsMutatingCalls and AwsThrottles when non-zero; returns the fields for the
    record's log line (calls by operation, their total, mutating calls, throttles, duration)."""
    calls: Counter[str] = counter.thread_calls()
    mutating, throttles = counter.mutating(calls), counter.thread_throttles()
    duration_ms = (time.time() - started) * 1000
    add_if_nonzero(metrics, "AwsMutatingCalls", mutating)
    add_if_nonzero(metrics, "AwsThrottles", throttles)
    metrics.add_metric(
        name=duration_metric, unit=MetricUnit.Milliseconds, value=duration_ms, resolution=MetricResolution.High
    )
    return {
        "calls": dict(calls),
        "aws_calls": sum(calls.values()),
        "mutating_calls": mutating,
        "throttles": throttles,
        "duration_ms": round(duration_ms, 1),
    }
