"""The template's CloudWatch dashboard, rendered locally from the devstack's own metrics.

The widget definitions are the template's own DashboardBody (observability.yaml, the nested application), evaluated
for the devstack's parameters as template.yaml passes them (so a widget added to the template shows up here).
Datapoints come from where CloudWatch would get them:

- `ServerlessCCM` metrics: the EMF documents the functions print (Powertools Metrics), as CloudWatch Logs
  extracts them;
- `AWS/Lambda` Invocations, Errors, Throttles, Duration: the runner's invocation records (Lambda publishes
  Errors and Throttles as 0 for minutes with invocations);
- `AWS/SQS` queue depth and age of the oldest message: sampled from moto while the stack runs (QueueSampler);
  NumberOfMessagesDeleted: the records the runner deleted after each invocation (deleted_points);
- log widgets (Logs Insights queries): the functions' JSON log lines, evaluated by devstack.logs_insights, which
  refuses any query outside the subset it implements. A SOURCE is a function's log group (its LoggingConfig).

Statistics (Sum, Average, Minimum, Maximum, SampleCount, pNN) are computed per period as CloudWatch does over the
raw values; the page (devstack.dashboard_page) draws one panel per widget. Pure except QueueSampler.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devstack.esm import Invocation
from devstack.logs_insights import Query, evaluate, parse
from devstack.template import TemplateFacts

Dims = tuple[tuple[str, str], ...]
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z]+)?\}")
_FAILED = ("error", "timeout", "invalid-response")


@dataclass(frozen=True, slots=True)
class Point:
    namespace: str
    name: str
    dims: Dims
    at: float  # seconds since the epoch
    value: float


@dataclass(frozen=True, slots=True)
class Metric:
    namespace: str
    name: str
    dims: Dims  # resource names are logical ids (FunctionName=ServiceReconcilerFunction)
    stat: str
    label: str


@dataclass(frozen=True, slots=True)
class Widget:
    title: str
    period: int
    metrics: tuple[Metric, ...]
    query: Query | None = None  # a log widget: its Logs Insights query (metrics empty)
    functions: tuple[str, ...] = ()  # a log widget: the functions whose log groups it reads (logical ids)


TimedRecords = Sequence[tuple[float, Mapping[str, Any]]]


def log_group_functions(facts: TemplateFacts) -> dict[str, str]:
    """Log group (logical id) -> the function (logical id) that writes there (its LoggingConfig.LogGroup)."""
    out = {}
    for fn in facts.functions:
        with contextlib.suppress(KeyError):
            group = (facts.resource_property(fn, "LoggingConfig") or {}).get("LogGroup")
            if isinstance(group, str):
                out[_PLACEHOLDER.sub(r"\1", group)] = fn
    return out


# -- the widgets ------------------------------------------------------------------------------------------------
def widgets(
    facts: TemplateFacts, dashboard: str = "Dashboard", application: str | None = "Observability"
) -> list[Widget]:
    """The template's dashboard for these parameters; `${Function}` / `${Queue.QueueName}` become logical ids.
    The dashboard is in the nested application `application` (observability.yaml), given the parent's names;
    application=None: in `facts`' own template."""
    source = facts if application is None else facts.nested(application)
    body = json.loads(_PLACEHOLDER.sub(r"\1", source.resource_property(dashboard, "DashboardBody")))
    groups = log_group_functions(facts)
    out = []
    for widget in body["widgets"]:
        props = widget["properties"]
        if widget["type"] == "log":
            query = parse(props["query"])  # UnsupportedQuery: outside the subset this page can draw
            unknown = [g for g in query.sources if g not in groups]
            if unknown:
                raise ValueError(f"{props['title']!r}: SOURCE {unknown} is no function's log group")
            functions = tuple(groups[g] for g in query.sources)
            out.append(Widget(props["title"], query.bin_seconds, (), query, functions))
            continue
        metrics = []
        for entry in props["metrics"]:
            options = entry[-1] if isinstance(entry[-1], dict) else {}
            namespace, name, *dims = entry[:-1] if options else entry
            metrics.append(
                Metric(
                    namespace,
                    name,
                    tuple(sorted(zip(dims[::2], dims[1::2], strict=True))),
                    options.get("stat", props.get("stat", "Average")),
                    options.get("label", name),
                )
            )
        out.append(Widget(props["title"], int(props.get("period", 300)), tuple(metrics)))
    return out


# -- the datapoints ---------------------------------------------------------------------------------------------
def emf_points(records: Iterable[Mapping[str, Any]]) -> list[Point]:
    """The metrics of EMF documents (CloudWatch embedded metric format): one point per value (Powertools puts
    several values of one metric in a list)."""
    out = []
    for doc in records:
        aws = doc.get("_aws")
        if not isinstance(aws, dict):
            continue
        at = float(aws.get("Timestamp", 0)) / 1000
        for directive in aws.get("CloudWatchMetrics") or ():
            for dim_set in directive.get("Dimensions") or [[]]:
                dims = tuple(sorted((k, str(doc.get(k, ""))) for k in dim_set))
                for metric in directive.get("Metrics") or ():
                    raw = doc.get(metric["Name"])
                    for value in raw if isinstance(raw, list) else [raw]:
                        if isinstance(value, int | float):
                            out.append(Point(directive["Namespace"], metric["Name"], dims, at, float(value)))
    return out


def deleted_points(invocations: Iterable[Invocation], facts: TemplateFacts) -> list[Point]:
    """AWS/SQS NumberOfMessagesDeleted: the records of each invocation the runner deleted (not reported failed)."""
    queues = {(fn.logical_id, e.name): e.queue_logical_id for fn in facts.functions.values() for e in fn.sqs_events}
    out = []
    for inv in invocations:
        queue = queues.get((inv.function, inv.event_source))
        if queue is not None:
            deleted = float(inv.batch_size - len(inv.failed_ids))
            out.append(Point("AWS/SQS", "NumberOfMessagesDeleted", (("QueueName", queue),), inv.started_at, deleted))
    return out


def lambda_points(invocations: Iterable[Invocation]) -> list[Point]:
    out = []
    for inv in invocations:
        dims = (("FunctionName", inv.function),)
        at = inv.started_at
        out += [
            Point("AWS/Lambda", "Invocations", dims, at, 1.0),
            Point("AWS/Lambda", "Errors", dims, at, 1.0 if inv.outcome in _FAILED else 0.0),
            Point("AWS/Lambda", "Throttles", dims, at, 0.0),  # the runner never throttles: it waits
            Point("AWS/Lambda", "Duration", dims, at, inv.duration * 1000),
        ]
    return out


class QueueSampler:
    """Samples every queue's depth and oldest-message age (what CloudWatch publishes for SQS every minute) from
    moto's in-process backend, which the server answering the stack's SQS calls shares."""

    def __init__(self, queue_urls: Mapping[str, str], region: str, interval: float = 1.0) -> None:
        self.queue_urls = dict(queue_urls)
        self.region = region
        self.interval = interval
        self.points: list[Point] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="queue-sampler", daemon=True)

    def start(self) -> QueueSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.sqs.models import sqs_backends

        backend = sqs_backends[DEFAULT_ACCOUNT_ID][self.region]
        now = time.time()
        for logical_id, url in self.queue_urls.items():
            queue = backend.queues.get(url.rsplit("/", 1)[-1])
            if queue is None:
                continue
            dims = (("QueueName", logical_id),)
            stamps: list[Any] = [m.sent_timestamp for m in queue._messages]  # moto types it as None
            sent = [int(t) for t in stamps if t]
            age = (now - min(sent) / 1000) if sent else 0.0
            values = {
                "ApproximateNumberOfMessagesVisible": queue.approximate_number_of_messages,
                "ApproximateNumberOfMessagesNotVisible": queue.approximate_number_of_messages_not_visible,
                "ApproximateAgeOfOldestMessage": max(0.0, age),
            }
            self.points += [Point("AWS/SQS", name, dims, now, float(v)) for name, v in values.items()]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


# -- statistics -------------------------------------------------------------------------------------------------
def statistic(values: Sequence[float], stat: str) -> float:
    """CloudWatch's statistics over raw values; pNN is the nearest-rank percentile."""
    if stat == "Sum":
        return sum(values)
    if stat == "Average":
        return sum(values) / len(values)
    if stat == "Maximum":
        return max(values)
    if stat == "Minimum":
        return min(values)
    if stat == "SampleCount":
        return float(len(values))
    match = re.fullmatch(r"p(\d+(?:\.\d+)?)", stat)
    if match is None:
        raise ValueError(f"unsupported statistic {stat}")
    ordered = sorted(values)
    rank = math.ceil(float(match.group(1)) / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


def series(points: Iterable[Point], metric: Metric, period: int) -> list[tuple[float, float]]:
    """(period start, statistic) for every period that has at least one value, in time order."""
    buckets: dict[float, list[float]] = {}
    for pt in points:
        if (pt.namespace, pt.name, pt.dims) == (metric.namespace, metric.name, metric.dims):
            buckets.setdefault(pt.at - pt.at % period, []).append(pt.value)
    return [(start, statistic(vals, metric.stat)) for start, vals in sorted(buckets.items())]


def panels(
    defined: Sequence[Widget],
    points: Sequence[Point],
    period: int | None = None,
    logs: Mapping[str, TimedRecords] | None = None,
) -> list[dict[str, Any]]:
    """What the page draws: each widget with its series (period: override, e.g. 10 s for a short demo); a log
    widget's from `logs`, function (logical id) -> its (time, JSON line)s."""
    out = []
    for w in defined:
        p = period or w.period
        if w.query is not None:
            lines = [(at, line) for fn in w.functions for at, line in (logs or {}).get(fn, ())]
            found = evaluate(w.query, lines, p)
            source = f"logs {','.join(w.functions)}"
            drawn = [
                {"label": a.name, "stat": a.function, "metric": source, "points": found[a.name]}
                for a in w.query.aggregates
            ]
        else:
            drawn = [
                {"label": m.label, "stat": m.stat, "metric": f"{m.namespace} {m.name}", "points": series(points, m, p)}
                for m in w.metrics
            ]
        out.append({"title": w.title, "period": p, "lines": drawn})
    return out
