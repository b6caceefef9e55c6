"""Monthly AWS cost of running the CCM for a stated cluster and churn, from counted figures.

Counted / measured inputs (from this bench's other scenarios, same results file): AWS calls per Service
operation and the membership table's DynamoDB calls (`aws_calls.nlb`), per-record overhead outside AWS calls, the
records our own writes echo back (`latency_ms`), the log bytes a record of each kind prints at the template's INFO
level (cost_inputs.log_sizes: the Powertools lines, the library's standard-library lines as Lambda's runtime writes
them, the EMF blobs; plus the Lambda context keys on each line), the custom metrics the four functions' runtimes
really print, per situation (bench/scenarios/cost_inputs.py: the runtimes driven through one record of each kind
against moto and the emulator, their EMF collected), the membership items' sizes as the store writes them, and the
alarms and dashboards the template declares. Assumed (stated in `assumptions`): the churn, the watcher settings,
the ESM's idle polling, the resync's checkpoint read.

Custom metrics are billed per metric-hour (0.30 USD a month = 730 hours): a metric costs for the hours in which it
is published, so a counter published only when non-zero costs the hours its situation occurs in. Periodic
situations (resync, heartbeat, passes, sweeps) fill every hour; churn is spread at random over the day (Poisson:
an hour holds at least one of r events a day with probability 1 - exp(-r/24)); failures are assumed to occur in
`failure_hours_per_month` hours. DynamoDB: a strongly consistent read is 1 RRU per 4 KB, an eventually consistent
one 0.5, a Query sums the sizes of the items it reads before rounding up to 4 KB; a write is 1 WRU per 1 KB.
An AWS call is costed at the bench's injected 50 ms, a stand-in for real API latency. Free tiers are ignored. The
watcher runs in the cluster and its compute is not on this bill.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse

from bench.scenarios.cost_inputs import emitted_metrics, item_sizes, log_sizes
from ccm.batch import DEFAULT_GROUP_CONCURRENCY
from watcher.config import DEFAULT_RESYNC_SECONDS as WATCHER_RESYNC_SECONDS

REPO = Path(__file__).resolve().parents[2]
DAYS_PER_MONTH = 30.4
HOURS_PER_MONTH = 730  # CloudWatch prorates custom metrics by the hour over a 730-hour month
PRICES_DATE = "2026-11-22"


@dataclass(frozen=True, slots=True)
class Prices:
    """us-east-1 public list prices (first tier), USD; see bench/README.md for the date and sources."""

    lambda_arm_gb_s: float = 0.0000133334
    lambda_request: float = 0.20 / 1e6
    sqs_fifo_request: float = 0.50 / 1e6  # per 64 KB chunk of a request
    dynamodb_write_unit: float = 0.625 / 1e6  # on-demand WRU
    dynamodb_read_unit: float = 0.125 / 1e6  # on-demand RRU
    cw_custom_metric_month: float = 0.30
    cw_alarm_month: float = 0.10  # standard-resolution alarm metric
    cw_dashboard_month: float = 3.00
    cw_logs_ingest_gb: float = 0.50
    cw_logs_store_gb_month: float = 0.03
    cw_logs_insights_gb_scanned: float = 0.005  # the dashboard's log widgets run a Logs Insights query each view


@dataclass(frozen=True, slots=True)
class Assumptions:
    lb_services: int = 200
    nodes: int = 100
    service_changes_per_day: int = 20  # creates, spec/annotation edits, deletes
    node_changes_per_day: int = 10  # joins + leaves
    ec2_events_per_node_change: int = 2  # EventBridge EC2 state changes (e.g. pending->running)
    resync_seconds: float = WATCHER_RESYNC_SECONDS  # the watcher's default SYNC period (--resync-seconds)
    heartbeat_seconds: int = 60  # the watcher's heartbeat to the nodes queue
    node_safety_pass_minutes: int = 5  # EventBridge rule (template)
    # The template's defaults (EnableRoutes=false: VPC-native pod networks such as EKS's VPC CNI need no routes;
    # EnableNodes and EnableSweeper true). `model(..., Assumptions(routes_enabled=True))` costs the routes too.
    routes_enabled: bool = False  # EnableRoutes: the routes function, its queue and its 5-minute pass
    route_pass_minutes: int = 5
    sweeper_minutes: int = 15  # template.yaml: SweeperFunction Schedule rate(15 minutes)
    memory_mb: int = 512  # template Globals MemorySize
    batch_size: int = 10  # FIFO ESM maximum: bursts (resync, HOSTS fan-out) are processed 10 records a call
    # Records of different message groups in one invocation run on this many threads (ccm/batch.py): a burst's
    # invocation lasts (and is billed) about batch / threads records' time; lone records gain nothing.
    group_threads: int = DEFAULT_GROUP_CONCURRENCY
    # Idle long polls Lambda keeps open per SQS event source, 20 s each (ReceiveMessage WaitTimeSeconds=20): the
    # Lambda Developer Guide ("Scaling and processing" of SQS event sources) says Lambda starts with five
    # concurrent pollers (batches); we assume all five keep polling an idle queue. MaximumConcurrency bounds the
    # invocations, not these polls.
    esm_pollers_per_queue: int = 5
    # Queues with an event source: services and nodes, plus routes when routes_enabled (template.yaml).
    log_retention_months: float = 1.0
    # The dashboard's log widgets query the logs of their time range (3 hours by default) on every view or refresh.
    dashboard_views_per_day: int = 24
    dashboard_range_hours: float = 3.0
    failure_hours_per_month: float = 2.0  # hours in which some failure counter (malformed, failed, throttled) fires
    # The service reconciler's resync read: one strongly consistent GetItem of the Service's checkpoint item
    # (~1 KB) instead of the Query of the whole node partition; the Query stays on creates and host updates.
    resync_checkpoint_read: bool = True
    checkpoint_item_bytes: int = 1024


# AWS calls of the smaller invocations, counted by the tests named in bench/README.md ("Node and route figures").
NODE_DELTA_CALLS = 1 + 3  # DescribeInstances + membership GetItem/PutItem/Query
NODE_IDLE_CALLS = 1  # safety pass: one filtered DescribeInstances
ROUTE_PASS_CALLS = 2
SWEEPER_CALLS = 6  # tagging GetResources + Describe of LBs/TGs/SGs; a clean cluster deletes nothing
# Used only when latency_ms is not in the results (it needs the devstack): the figures of its last full run.
ECHO_RECORDS = 1.0  # our own status/finalizer writes come back as one more delta per Service change
LOG_BYTES_PER_RECORD = 1060  # the last full run: 1.06 GB a month (docs/performance.md)
# The keys Powertools' inject_lambda_context adds to each line in Lambda (cost_inputs drives the runtimes without a
# Lambda context), at realistic lengths.
LAMBDA_CONTEXT_BYTES = len(
    json.dumps(
        {
            "cold_start": False,
            "function_name": "production-cluster-ccm-services",
            "function_memory_size": "512",
            "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:production-cluster-ccm-services",
            "function_request_id": "00000000-0000-0000-0000-000000000000",
            "xray_trace_id": "1-00000000-000000000000000000000000",
        }
    )
)
CALL_MS = 50.0  # the injected latency of an AWS call


def _lb_calls(nlb: dict[str, Any], op: str) -> tuple[int, int]:
    """(AWS calls, of which DynamoDB) per Service record of one kind. For add_node, the Service's own record only:
    aws_calls' `dynamodb.add_node` adds the nodes Lambda's membership calls, made once per node change (the
    "node deltas" row), not once per Service the change reaches."""
    by_operation = ((nlb.get("detail") or {}).get(op) or {}).get("by_operation")
    if op == "add_node" and by_operation is not None:
        ddb = sum(n for call, n in by_operation.items() if call.startswith("dynamodb:"))
    else:
        ddb = int((nlb.get("dynamodb") or {}).get(op, 0))
    return int(nlb[op]) + ddb, ddb


def model(measured: dict[str, Any], a: Assumptions | None = None, p: Prices | None = None) -> dict[str, Any]:
    """measured: calls (AWS calls incl. DynamoDB) and ddb_calls per record {create, noop, add_node, delete},
    base_ms {op: per-record work besides AWS latency}, call_ms, echo_records (extra records per Service change caused by
    our own writes), log_bytes_per_record, custom_metrics, alarms, dashboards, sweeper (bool)."""
    a, p = a or Assumptions(), p or Prices()
    day = 86400
    base_ms, call_ms = measured["base_ms"], float(measured["call_ms"])
    calls, ddb = measured["calls"], measured["ddb_calls"]
    ms = {op: float(base_ms[op]) + calls[op] * call_ms for op in calls}
    base = float(base_ms["noop"])  # for the smaller invocations

    # Records per day by kind, and the invocations they arrive in (bursts are batched, lone records are not).
    resyncs = day / a.resync_seconds
    services = {
        "resync (SYNC, no-op)": (resyncs * a.lb_services, resyncs * math.ceil(a.lb_services / a.batch_size), "noop",
                                 "resync"),
        "service changes": (a.service_changes_per_day * (1 + measured["echo_records"]),
                            a.service_changes_per_day * (1 + measured["echo_records"]), "create", "service_change"),
        "node change fan-out (HOSTS)": (a.node_changes_per_day * a.lb_services,
                                        a.node_changes_per_day * math.ceil(a.lb_services / a.batch_size), "add_node",
                                        "host_update"),
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    for what, (records, invocations, op, situation) in services.items():
        burst = invocations < records  # batched records of distinct Services: group_threads at a time
        rows.append(_row("services", what, records, invocations, ms[op], calls[op], ddb[op], a, situation,
                         threads=a.group_threads if burst else 1))  # fmt: skip
    heartbeats = day / a.heartbeat_seconds  # through the services queue: no Kubernetes or AWS call
    rows.append(_row("services", "watcher heartbeats", heartbeats, heartbeats, base, 0, 0, a, "heartbeat"))
    node_records = a.node_changes_per_day
    rows.append(_row("nodes", "node deltas", node_records, node_records,
                     base + NODE_DELTA_CALLS * call_ms, NODE_DELTA_CALLS, 3, a, "node_change"))  # fmt: skip
    ec2_events = a.node_changes_per_day * a.ec2_events_per_node_change
    rows.append(_row("nodes", "EC2 state-change events", ec2_events, ec2_events,
                     base + NODE_DELTA_CALLS * call_ms, NODE_DELTA_CALLS, 3, a, "ec2_event"))  # fmt: skip
    passes = day / (a.node_safety_pass_minutes * 60)
    rows.append(_row("nodes", "safety passes", passes, passes, base + NODE_IDLE_CALLS * call_ms,
                     NODE_IDLE_CALLS, 0, a, "safety_pass"))  # fmt: skip
    if a.routes_enabled:
        passes = day / (a.route_pass_minutes * 60) + a.node_changes_per_day
        rows.append(_row("routes", "scheduled + node-triggered passes", passes, passes,
                         base + ROUTE_PASS_CALLS * call_ms, ROUTE_PASS_CALLS, 0, a, "route_pass"))  # fmt: skip
    if measured.get("sweeper"):
        sweeps = day / (a.sweeper_minutes * 60)
        rows.append(_row("sweeper", "scheduled sweeps", sweeps, sweeps, base + SWEEPER_CALLS * call_ms,
                         SWEEPER_CALLS, 0, a, "sweep"))  # fmt: skip

    queues = 3 if a.routes_enabled else 2
    idle_polls = queues * a.esm_pollers_per_queue * day / 20
    units = dynamodb_units(measured["item_bytes"], a)
    per_day = {
        "lambda_requests": sum(r["invocations"] for r in rows) * p.lambda_request,
        "lambda_compute": sum(r["gb_s"] for r in rows) * p.lambda_arm_gb_s,
        # watcher/Lambda sends (batched by 10), ESM receives and deletes per invocation, plus idle long polls
        "sqs": (sum(r["records"] / a.batch_size + 2 * r["invocations"] for r in rows) + idle_polls)
        * p.sqs_fifo_request,
        "dynamodb": units["rru_per_day"] * p.dynamodb_read_unit + units["wru_per_day"] * p.dynamodb_write_unit,
    }
    log_gb_day = sum(r["records"] * _log_bytes(r["situation"], measured) for r in rows) / 1e9
    monthly = {k: v * DAYS_PER_MONTH for k, v in per_day.items()}
    monthly["cloudwatch_logs"] = (
        log_gb_day * DAYS_PER_MONTH * (p.cw_logs_ingest_gb + p.cw_logs_store_gb_month * a.log_retention_months)
    )
    # Each log widget scans the range's logs of its function; counted as scanning all functions' logs (an upper bound).
    scanned_gb = log_gb_day * a.dashboard_range_hours / 24 * measured.get("log_widgets", 0) * a.dashboard_views_per_day
    monthly["cloudwatch_logs_insights"] = scanned_gb * DAYS_PER_MONTH * p.cw_logs_insights_gb_scanned
    metric_hours = metric_hours_per_month(measured["metrics_by_situation"], a)
    monthly["cloudwatch_metrics"] = sum(metric_hours.values()) / HOURS_PER_MONTH * p.cw_custom_metric_month
    alarms = _deployed(measured["alarms"], a)
    monthly["cloudwatch_alarms"] = alarms * p.cw_alarm_month
    monthly["cloudwatch_dashboards"] = _deployed(measured["dashboards"], a) * p.cw_dashboard_month
    breakdown = {k: round(v, 2) for k, v in monthly.items()}
    return {
        "usd_per_month": round(sum(breakdown.values()), 2),  # the sum of the printed lines
        "breakdown_usd_per_month": breakdown,
        "per_day": [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
        "log_gb_per_month": round(log_gb_day * DAYS_PER_MONTH, 2),
        "custom_metrics": len(metric_hours),  # distinct (namespace, name, dimensions) published at all
        "custom_metric_hours_per_month": {k: round(v, 1) for k, v in sorted(metric_hours.items())},
        "dynamodb_units_per_day": {k: round(v, 1) for k, v in units.items()},
        "idle_polls_per_day": round(idle_polls),
        "alarms": alarms,
        "assumptions": asdict(a),
        "prices_usd": {**asdict(p), "date": PRICES_DATE, "region": "us-east-1", "free_tiers": "ignored"},
        "measured": measured,
    }


def _log_bytes(situation: str, measured: dict[str, Any]) -> float:
    """Log bytes a record of this situation ingests: what the runtimes printed for it (cost_inputs.log_sizes) plus
    the Lambda context keys on every line; without that measurement, the one figure for every record."""
    sizes = (measured.get("log_sizes") or {}).get(situation)
    if not sizes:
        return float(measured["log_bytes_per_record"])
    return float(sizes["bytes"]) + float(sizes["lines"]) * LAMBDA_CONTEXT_BYTES


def _row(fn: str, what: str, records: float, invocations: float, ms_per_record: float, calls: int, ddb: int,
         a: Assumptions, situation: str, threads: int = 1) -> dict[str, Any]:  # fmt: skip
    seconds = records * ms_per_record / 1000 / threads  # billed: the invocations' wall time
    return {
        "function": fn,
        "what": what,
        "situation": situation,
        "records": records,
        "invocations": invocations,
        "ms_per_record": ms_per_record,
        "aws_calls": records * calls,
        "ddb_calls": records * ddb,
        "gb_s": seconds * a.memory_mb / 1024,
    }


def situation_hours(a: Assumptions) -> dict[str, float]:
    """Hours a month in which each situation of cost_inputs.emitted_metrics occurs at least once."""

    def churn(per_day: float) -> float:
        return HOURS_PER_MONTH * (1 - math.exp(-per_day / 24))

    every_hour = float(HOURS_PER_MONTH)
    return {
        "resync": every_hour, "heartbeat": every_hour, "safety_pass": every_hour, "sweep": every_hour,
        "route_pass": every_hour if a.routes_enabled else 0.0,
        "service_change": churn(a.service_changes_per_day),
        "node_change": churn(a.node_changes_per_day),
        "host_update": churn(a.node_changes_per_day),
        "route_change": churn(a.node_changes_per_day) if a.routes_enabled else 0.0,
        "ec2_event": churn(a.node_changes_per_day * a.ec2_events_per_node_change),
        "failure": a.failure_hours_per_month,
    }  # fmt: skip


def metric_hours_per_month(by_situation: dict[str, list[str]], a: Assumptions) -> dict[str, float]:
    """Metric -> hours a month it is published: the hours of any situation that publishes it (independent)."""
    hours = situation_hours(a)
    quiet: dict[str, float] = {}  # metric -> probability that an hour publishes it not
    for situation, metrics in by_situation.items():
        share = hours[situation] / HOURS_PER_MONTH
        for metric in metrics:
            quiet[metric] = quiet.get(metric, 1.0) * (1 - share)
    return {metric: HOURS_PER_MONTH * (1 - q) for metric, q in quiet.items() if q < 1}


def read_units(item_bytes: float, consistent: bool = True) -> float:
    """RRU of one read of `item_bytes` (a Query: the sum of the items it reads): 4 KB blocks, half if eventual."""
    blocks = max(1, math.ceil(item_bytes / 4096))
    return blocks if consistent else blocks / 2


def dynamodb_units(item_bytes: dict[str, int], a: Assumptions) -> dict[str, float]:
    """Read and write units a day of the membership table at the stated size and churn."""
    nodes = a.nodes * item_bytes["node"] + item_bytes["seeded_marker"]  # one Query reads the node partition
    services = a.lb_services * item_bytes["service"]
    day = 86400
    resync_reads = day / a.resync_seconds * a.lb_services
    resync = read_units(a.checkpoint_item_bytes) if a.resync_checkpoint_read else read_units(nodes)
    rru = {
        "resync": resync_reads * resync,
        "service_changes": a.service_changes_per_day * read_units(nodes),
        "host_updates": a.node_changes_per_day * a.lb_services * read_units(nodes),
        # nodes Lambda per node change: GetItem (eventually consistent), the node and the Service registry Queries
        "node_changes": a.node_changes_per_day
        * (read_units(item_bytes["node"], False) + read_units(nodes) + read_units(services)),
        "safety_passes": day / (a.node_safety_pass_minutes * 60) * read_units(nodes),
    }
    wru = a.service_changes_per_day * math.ceil(item_bytes["service"] / 1024) + a.node_changes_per_day * math.ceil(
        item_bytes["node"] / 1024
    )
    return {**{f"rru_{k}": v for k, v in rru.items()}, "rru_per_day": sum(rru.values()), "wru_per_day": wru}


# observability.yaml's conditions on the features of Assumptions; a resource without a condition is always there.
FEATURE_CONDITIONS = {"NodesEnabled": "nodes", "RoutesEnabled": "routes", "SweeperEnabled": "sweeper"}


def template_counts() -> tuple[dict[str, int], dict[str, int]]:
    """Alarms and dashboards the templates declare, by the feature condition they need ("" = none). They are in
    observability.yaml (template.yaml's nested application); template.yaml itself is read too, should one move."""
    alarms: dict[str, int] = {}
    dashboards: dict[str, int] = {}
    billed = {"AWS::CloudWatch::Alarm": alarms, "AWS::CloudWatch::Dashboard": dashboards}
    for name in ("template.yaml", "observability.yaml"):
        resources = (yaml_parse((REPO / name).read_text()) or {}).get("Resources") or {}
        for resource in resources.values():
            into = billed.get(resource.get("Type"))
            if into is not None:
                condition = resource.get("Condition", "")
                if condition and condition not in FEATURE_CONDITIONS:
                    raise ValueError(f"{name}: condition {condition} of a billed resource is not modelled")
                into[condition] = into.get(condition, 0) + 1
    return alarms, dashboards


def log_widgets() -> int:
    """Logs Insights widgets of the dashboard (observability.yaml's DashboardBody, every feature on)."""
    return (REPO / "observability.yaml").read_text().count('"type":"log"')


def _deployed(by_condition: dict[str, int], a: Assumptions) -> int:
    """How many of them a stack with the assumed features deploys."""
    enabled = {"": True, "NodesEnabled": True, "RoutesEnabled": a.routes_enabled, "SweeperEnabled": True}
    return sum(n for condition, n in by_condition.items() if enabled[condition])


def run(results: dict[str, Any]) -> dict[str, Any]:
    nlb = (results.get("aws_calls") or {}).get("nlb")
    latency = results.get("latency_ms")
    if not nlb:
        raise RuntimeError("the cost model needs aws_calls in the results: run it first")
    ops = ("create", "noop", "add_node", "delete")
    calls_per_record = {op: _lb_calls(nlb, op)[0] for op in ops}
    call_ms = float(latency["injected_latency_ms"]) if latency else CALL_MS
    # Per-record work besides AWS's latency (Kubernetes reads/writes, parsing, planning, and moto's own time, so
    # an overestimate): the single-threaded run of aws_calls. The latency scenario's durations are not used: there
    # moto and the emulator serve every environment from one process (GIL), which AWS does not.
    base_ms = nlb["duration_ms"]
    alarms, dashboards = template_counts()
    echo = round(latency["records"] / latency["services"] - 1, 2) if latency else ECHO_RECORDS
    measured = {
        "calls": calls_per_record,
        "ddb_calls": {op: _lb_calls(nlb, op)[1] for op in ops},
        "base_ms": base_ms,
        "call_ms": call_ms,
        "echo_records": echo,
        "log_bytes_per_record": latency["log_bytes_per_record"] if latency else LOG_BYTES_PER_RECORD,
        "log_sizes": log_sizes(),
        "from_latency_scenario": bool(latency),
        "metrics_by_situation": emitted_metrics(),
        "item_bytes": item_sizes(),
        "alarms": alarms,
        "dashboards": dashboards,
        "log_widgets": log_widgets(),
        "sweeper": (REPO / "functions" / "sweeper" / "app.py").is_file(),
    }
    result = model(measured)
    with_routes = model(measured, Assumptions(routes_enabled=True))
    result["usd_per_month_with_routes"] = with_routes["usd_per_month"]
    return result
