"""The AWS call metrics every reconciler emits for one record or pass, from the thread's exact counts."""

from __future__ import annotations

import time
from collections import Counter

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit

from ccm.contracts.cloud import CallCounting


def add_call_metrics(metrics: Metrics, counter: CallCounting, duration_metric: str, started: float) -> Counter[str]:
    """AwsCalls, AwsMutatingCalls, AwsThrottles and the duration since `started`; returns the calls by operation."""
    calls = counter.thread_calls()
    metrics.add_metric(name="AwsCalls", unit=MetricUnit.Count, value=sum(calls.values()))
    metrics.add_metric(name="AwsMutatingCalls", unit=MetricUnit.Count, value=counter.mutating(calls))
    metrics.add_metric(name="AwsThrottles", unit=MetricUnit.Count, value=counter.thread_throttles())
    metrics.add_metric(
        name=duration_metric,
        unit=MetricUnit.Milliseconds,
        value=(time.time() - started) * 1000,
        resolution=MetricResolution.High,
    )
    return calls
