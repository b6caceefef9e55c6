"""Monthly AWS cost of running the CCM for a stated cluster and churn, from counted figures.

Counted / measured inputs (from this bench's other scenarios, same results file): AWS calls per Service
operation and the membership table's DynamoDB calls (`aws_calls.nlb`), per-record overhead outside AWS calls, the
records our own writes echo back and the log bytes per record (`latency_ms`, measured at the template's INFO log
level), the EMF metric names the code emits and the alarms and dashboards the template declares. Assumed (stated
in `assumptions`): the churn, the watcher settings, the ESM's idle polling. An AWS call is costed at the bench's
injected 50 ms, a stand-in for real API latency. Free tiers are ignored. The watcher runs in the cluster and its
compute is not on this bill.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DAYS_PER_MONTH = 30.4
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


@dataclass(frozen=True, slots=True)
class Assumptions:
    lb_services: int = 200
    nodes: int = 100
    service_changes_per_day: int = 20  # creates, spec/annotation edits, deletes
    node_changes_per_day: int = 10  # joins + leaves
    ec2_events_per_node_change: int = 2  # EventBridge EC2 state changes (e.g. pending->running)
    resync_seconds: int = 600  # the watcher's default SYNC period (--resync-seconds)
    heartbeat_seconds: int = 60  # the watcher's heartbeat to the nodes queue
    node_safety_pass_minutes: int = 5  # EventBridge rule (template)
    routes_enabled: bool = True  # EnableRoutes: the routes function and its 5-minute pass
    route_pass_minutes: int = 5
    sweeper_minutes: int = 60
    memory_mb: int = 512  # template Globals MemorySize
    batch_size: int = 10  # FIFO ESM maximum: bursts (resync, HOSTS fan-out) are processed 10 records a call
    esm_pollers_per_queue: int = 5  # idle long polls Lambda keeps open per SQS event source (20 s each)
    log_retention_months: float = 1.0


# AWS calls of the smaller invocations, counted by the tests named in bench/README.md ("Node and route figures").
NODE_DELTA_CALLS = 1 + 3  # DescribeInstances + membership GetItem/PutItem/Query
NODE_IDLE_CALLS = 1  # safety pass: one filtered DescribeInstances; heartbeat: none, counted as one to be safe
ROUTE_PASS_CALLS = 2
SWEEPER_CALLS = 6  # tagging GetResources + Describe of LBs/TGs/SGs; a clean cluster deletes nothing


def _lb_calls(nlb: dict[str, Any], op: str) -> tuple[int, int]:
    """(AWS calls, of which DynamoDB) per Service record of one kind."""
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
        "resync (SYNC, no-op)": (resyncs * a.lb_services, resyncs * math.ceil(a.lb_services / a.batch_size), "noop"),
        "service changes": (a.service_changes_per_day * (1 + measured["echo_records"]),
                            a.service_changes_per_day * (1 + measured["echo_records"]), "create"),
        "node change fan-out (HOSTS)": (a.node_changes_per_day * a.lb_services,
                                        a.node_changes_per_day * math.ceil(a.lb_services / a.batch_size), "add_node"),
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    for what, (records, invocations, op) in services.items():
        rows.append(_row("services", what, records, invocations, ms[op], calls[op], ddb[op], a))
    node_records = a.node_changes_per_day * (1 + a.ec2_events_per_node_change)
    rows.append(_row("nodes", "node deltas + EC2 events", node_records, node_records,
                     base + NODE_DELTA_CALLS * call_ms, NODE_DELTA_CALLS, 3, a))  # fmt: skip
    idle = day / a.heartbeat_seconds + day / (a.node_safety_pass_minutes * 60)
    rows.append(_row("nodes", "heartbeats + safety passes", idle, idle, base + NODE_IDLE_CALLS * call_ms,
                     NODE_IDLE_CALLS, 0, a))  # fmt: skip
    if a.routes_enabled:
        passes = day / (a.route_pass_minutes * 60) + a.node_changes_per_day
        rows.append(_row("routes", "scheduled + node-triggered passes", passes, passes,
                         base + ROUTE_PASS_CALLS * call_ms, ROUTE_PASS_CALLS, 0, a))  # fmt: skip
    if measured.get("sweeper"):
        sweeps = day / (a.sweeper_minutes * 60)
        rows.append(_row("sweeper", "scheduled sweeps", sweeps, sweeps, base + SWEEPER_CALLS * call_ms,
                         SWEEPER_CALLS, 0, a))  # fmt: skip

    queues = 3 if a.routes_enabled else 2
    idle_polls = queues * a.esm_pollers_per_queue * day / 20
    per_day = {
        "lambda_requests": sum(r["invocations"] for r in rows) * p.lambda_request,
        "lambda_compute": sum(r["gb_s"] for r in rows) * p.lambda_arm_gb_s,
        # watcher/Lambda sends (batched by 10), ESM receives and deletes per invocation, plus idle long polls
        "sqs": (sum(r["records"] / a.batch_size + 2 * r["invocations"] for r in rows) + idle_polls)
        * p.sqs_fifo_request,
        "dynamodb": sum(r["ddb_calls"] for r in rows) * (p.dynamodb_read_unit + p.dynamodb_write_unit) / 2,
    }
    log_gb_day = sum(r["records"] for r in rows) * float(measured["log_bytes_per_record"]) / 1e9
    monthly = {k: v * DAYS_PER_MONTH for k, v in per_day.items()}
    monthly["cloudwatch_logs"] = (
        log_gb_day * DAYS_PER_MONTH * (p.cw_logs_ingest_gb + p.cw_logs_store_gb_month * a.log_retention_months)
    )
    monthly["cloudwatch_metrics"] = measured["custom_metrics"] * p.cw_custom_metric_month
    monthly["cloudwatch_alarms"] = measured["alarms"] * p.cw_alarm_month
    monthly["cloudwatch_dashboards"] = measured["dashboards"] * p.cw_dashboard_month
    breakdown = {k: round(v, 2) for k, v in monthly.items()}
    return {
        "usd_per_month": round(sum(breakdown.values()), 2),  # the sum of the printed lines
        "breakdown_usd_per_month": breakdown,
        "per_day": [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
        "log_gb_per_month": round(log_gb_day * DAYS_PER_MONTH, 2),
        "assumptions": asdict(a),
        "prices_usd": {**asdict(p), "date": PRICES_DATE, "region": "us-east-1", "free_tiers": "ignored"},
        "measured": measured,
    }


def _row(fn: str, what: str, records: float, invocations: float, ms_per_record: float, calls: int, ddb: int,
         a: Assumptions) -> dict[str, Any]:  # fmt: skip
    seconds = records * ms_per_record / 1000
    return {
        "function": fn,
        "what": what,
        "records": records,
        "invocations": invocations,
        "ms_per_record": ms_per_record,
        "aws_calls": records * calls,
        "ddb_calls": records * ddb,
        "gb_s": seconds * a.memory_mb / 1024,
    }


def custom_metrics() -> int:
    """Distinct (function, metric name) pairs the code emits with add_metric, plus ColdStart per function: each is
    one CloudWatch custom metric (Powertools adds one `service` dimension per function)."""
    names: set[tuple[str, str]] = set()
    for path in (REPO / "layers" / "ccm" / "ccm").rglob("runtime.py"):
        for name in re.findall(r'add_metric\(\s*name="([A-Za-z]+)"', path.read_text()):
            names.add((path.parent.name, name))
    functions = len(list((REPO / "functions").glob("*/app.py")))
    return len(names) + functions


def template_counts() -> tuple[int, int]:
    # The alarms and the dashboard are in observability.yaml, template.yaml's nested application.
    text = "".join((REPO / name).read_text() for name in ("template.yaml", "observability.yaml"))
    return text.count("Type: AWS::CloudWatch::Alarm"), text.count("Type: AWS::CloudWatch::Dashboard")


def run(results: dict[str, Any]) -> dict[str, Any]:
    nlb = (results.get("aws_calls") or {}).get("nlb")
    latency = results.get("latency_ms")
    if not nlb or not latency:
        raise RuntimeError("the cost model needs aws_calls and latency_ms in the results: run them first")
    ops = ("create", "noop", "add_node", "delete")
    calls_per_record = {op: _lb_calls(nlb, op)[0] for op in ops}
    call_ms = float(latency["injected_latency_ms"])
    # Per-record work besides AWS's latency (Kubernetes reads/writes, parsing, planning, and moto's own time, so
    # an overestimate): the single-threaded run of aws_calls. The latency scenario's durations are not used: there
    # moto and the emulator serve every environment from one process (GIL), which AWS does not.
    base_ms = nlb["duration_ms"]
    alarms, dashboards = template_counts()
    measured = {
        "calls": calls_per_record,
        "ddb_calls": {op: _lb_calls(nlb, op)[1] for op in ops},
        "base_ms": base_ms,
        "call_ms": call_ms,
        "echo_records": round(latency["records"] / latency["services"] - 1, 2),
        "log_bytes_per_record": latency["log_bytes_per_record"],
        "custom_metrics": custom_metrics(),
        "alarms": alarms,
        "dashboards": dashboards,
        "sweeper": (REPO / "functions" / "sweeper" / "app.py").is_file(),
    }
    return model(measured)
