"""The figures every reconciler reports for one record or pass, from the thread's exact counts.

Each distinct custom metric costs 0.30 USD a month, prorated by the hours in which it is published; the log line
is already paid for, and the dashboard's Logs Insights widgets read it (observability.yaml). So (docs/operations.md,
"Custom metrics"):

| figure | where | why |
|---|---|---|
| duration (`duration_ms`) | log line only | the dashboard's p50/p90/p99 per function: a Logs Insights widget |
| mutating calls (`mutating_calls`) | log line only | 0 on a converged pass; the dashboard sums the log field |
| AwsThrottles | metric, only when non-zero | the throttling signal (runbook); absent = none |
| AWS calls, calls by operation | log line only (`aws_calls`, `calls`) | non-zero on every record: bills every hour |
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from ccm.contracts.cloud import CallCounting


def add_if_nonzero(metrics: Metrics, name: str, value: float) -> None:
    """A counter published only when it counted something: CloudWatch bills a metric for every hour it appears."""
    if value:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def add_call_metrics(metrics: Metrics, counter: CallCounting, started: float) -> dict[str, Any]:
    """AwsThrottles when non-zero; returns the fields for the record's log line (calls by operation, their total,
    mutating calls, throttles, the duration since `started`)."""
    calls: Counter[str] = counter.thread_calls()
    mutating, throttles = counter.mutating(calls), counter.thread_throttles()
    add_if_nonzero(metrics, "AwsThrottles", throttles)
    return {
        "calls": dict(calls),
        "aws_calls": sum(calls.values()),
        "mutating_calls": mutating,
        "throttles": throttles,
        "duration_ms": round((time.time() - started) * 1000, 1),
    }
