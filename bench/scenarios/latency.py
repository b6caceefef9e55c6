"""End-to-end latency: N LoadBalancer Services (2 TCP ports, NLB) created at once on the devstack, every AWS call
of our functions slowed by an injected delay (ccm.aws.clients CCM_AWS_INJECT_LATENCY_MS, bench-only).

Path measured: the emulator stores the Service -> the real watcher process observes it and sends a delta to the
moto SQS FIFO queue -> the devstack runner invokes the real service handler (ESM MaximumConcurrency as given) ->
the load balancer is created in moto -> status is written to the emulator. `latency_ms` is the handler's own
`end_to_end_ms` (watcher observed -> status written), read back from its "reconciled" log lines (what the
dashboard's Logs Insights widget plots); `create_to_status_ms` cross-checks it from the emulator's request log
(Service created -> status PATCH received).

The runner gives every execution environment its own process (as Lambda does); the moto server and the emulator
share this one (one GIL), the watcher is its own process. The log lines are read from the service function's log
stream (runner.logs), what CloudWatch would ingest.

AWS's API rate limits are on (devstack.aws_faithful token buckets with the documented ELB and EC2 figures): a burst
of creations is throttled as it would be in a real account, and the throttled attempts are reported.

Beside the measured hostname times: the floor (no controller can publish every hostname faster than AWS's token
buckets let each Service's calls up to CreateLoadBalancer through; bench.lambda_model.floor_s), the same for complete
creates (`floor_complete_s`), and the discrete-event model of the same burst on real Lambda (bench.lambda_model), fed
with the calls this run's records made.

Why the hostname floor is not the complete create's: the hostname is known when CreateLoadBalancer answers (the
controller writes it then), so for "every hostname written" only the calls before that answer count. The ELB user
guide's "Request throttling for the ELB API" puts every ELB action in a token bucket (Describe* 40 / 10 per s,
Register/DeregisterTargets 20 / 4; devstack.aws_throttling assumes 20 / 5 for the other actions, CreateLoadBalancer,
CreateTargetGroup and CreateListener among them). A complete NLB create draws 5 tokens from that bucket (1 LB, 2
target groups, 2 listeners): (200 x 5 - 20) / 5 = 196 s; its hostname needs 1: (200 - 20) / 5 = 36 s.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import lambda_model
from bench.anchors import CLOUD_PROVIDER_AWS
from bench.emf import EmfCapture, percentile
from ccm.aws.clients import INJECT_LATENCY_ENV
from ccm.retry import CONTINUATION_DELAY_SECONDS
from devstack import aws_faithful
from devstack.aws_faithful import FaithfulSettings
from devstack.stack import Stack, StackConfig

CONVERGE_TIMEOUT_S = 900.0
DRAIN_TIMEOUT_S = 600.0  # after the hostnames: the continuations and their retries
FUNCTION = "ServiceReconcilerFunction"  # template logical id
SEED = "lat-seed"  # the Service the cluster already had
WARM_PROBE = Path(__file__).resolve().parents[1] / "warm_environment.py"
# What an NLB or Classic ELB create calls after CreateLoadBalancer answered (the hostname is out by then).
AFTER_HOSTNAME = frozenset({
    "elbv2:CreateTargetGroup", "elbv2:CreateListener", "elbv2:RegisterTargets", "elbv2:ModifyTargetGroupAttributes",
    "elbv2:ModifyLoadBalancerAttributes", "elb:ConfigureHealthCheck", "elb:RegisterInstancesWithLoadBalancer",
    "elb:ModifyLoadBalancerAttributes", "dynamodb:PutItem",
})  # fmt: skip
# One NLB create (2 TCP ports, no annotation, warm environment) as counted by aws_calls (`create`); used only when the
# run's own log lines give no complete create (they normally do: the handler logs each record's calls).
FALLBACK_CREATE_CALLS = {
    "dynamodb:GetItem": 1, "elbv2:DescribeLoadBalancers": 1, "dynamodb:PutItem": 2, "dynamodb:Query": 1,
    "elbv2:CreateLoadBalancer": 1, "elbv2:CreateTargetGroup": 2, "elbv2:CreateListener": 2,
    "elbv2:RegisterTargets": 2,
}  # fmt: skip


def _service(name: str) -> dict[str, Any]:
    """The Service of aws_calls and scale: 2 TCP ports, no annotations (the cluster's shared groups)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "https", "port": 443}],
        },
    }


def _has_ingress(svc: dict[str, Any]) -> bool:
    return bool(((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress"))


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(percentile(ordered, 50), 1),
        "p90": round(percentile(ordered, 90), 1),
        "p99": round(percentile(ordered, 99), 1),
        "max": round(ordered[-1], 1),
    }


def anchor_model_s(services: int, latency_ms: float, calls: int = CLOUD_PROVIDER_AWS["nlb"]["create"]) -> float:
    """cloud-provider-aws: one service worker (ConcurrentServiceSyncs=1) making `calls` sequential AWS calls per
    Service, each taking the injected latency; nothing else counted (its Kubernetes calls would add to it)."""
    return round(services * calls * latency_ms / 1000, 1)


def our_model_s(services: int, latency_ms: float, calls: float, concurrency: int) -> float:
    """Ours on the same terms: `concurrency` invocations in parallel, each Service `calls` sequential calls."""
    return round(math.ceil(services / concurrency) * calls * latency_ms / 1000, 1)


def create_calls(log_records: list[dict[str, Any]]) -> tuple[list[str], list[str], str]:
    """One complete create's AWS calls and those before its hostname, each in call order (reads, then writes; the
    log gives counts by operation). Complete: a Service's passes summed (a hostname-first pass and its continuation),
    the median of the Services that wrote a status. Before the hostname: a hostname-first pass (`continued`) when the
    run made them, else the complete create without AFTER_HOSTNAME. (complete, hostname, where they came from)."""
    passes = [r for r in log_records if r.get("message") == "reconciled" and isinstance(r.get("calls"), dict)]
    by_service: dict[str, list[dict[str, Any]]] = {}
    for r in passes:
        by_service.setdefault(str(r.get("correlation_id")), []).append(r)
    totals = [
        sum((Counter(r["calls"]) for r in rs), Counter())
        for rs in by_service.values()
        if any(r.get("status_written") for r in rs)
    ]
    if totals:
        complete, source = dict(_median(totals)), "this run's log"
    else:
        complete, source = FALLBACK_CREATE_CALLS, "bench/scenarios/latency.py FALLBACK_CREATE_CALLS"
    firsts = [Counter(r["calls"]) for r in passes if r.get("continued")]
    hostname = dict(_median(firsts)) if firsts else {op: n for op, n in complete.items() if op not in AFTER_HOSTNAME}
    return _in_order(complete), _in_order(hostname), source


def cold_calls(log_records: list[dict[str, Any]], hostname: list[str]) -> list[str]:
    """What a hostname-first pass that fills a new environment's caches (subnets, shared groups) made beyond a warm
    one's: the median of the run's passes in a first invocation (Powertools' `cold_start`, on every record of it)
    that made more calls than `hostname`; only the first record on each thread does."""
    filling = [
        Counter(r["calls"])
        for r in log_records
        if r.get("message") == "reconciled"
        and r.get("cold_start")
        and r.get("continued")
        and isinstance(r.get("calls"), dict)
        and sum(r["calls"].values()) > len(hostname)
    ]
    if not filling:
        return []
    return _in_order(dict(_median(filling) - Counter(hostname)))


def model_calls(hostname: list[str], complete: list[str]) -> list[str]:
    """One record's calls for the model: the hostname-first pass (CreateLoadBalancer last), then what the rest of
    the complete create adds (the continuation's reads again, then its writes)."""
    first = [c for c in hostname if not c.endswith(":CreateLoadBalancer")] + [
        c for c in hostname if c.endswith(":CreateLoadBalancer")
    ]
    rest = Counter(complete) - Counter(hostname)
    return first + _in_order(dict(rest))


def _median(counts: list[Counter[str]]) -> Counter[str]:
    return sorted(counts, key=lambda c: sum(c.values()))[len(counts) // 2]


def _in_order(counts: dict[str, int]) -> list[str]:
    calls = [op for op, n in counts.items() for _ in range(n)]
    return sorted(calls, key=lambda c: not c.split(":", 1)[1].startswith(("Describe", "Get", "List")))


def model(
    services: int, calls: list[str], concurrency: int, cold_start_ms: float | None, cold: Sequence[str] = ()
) -> dict[str, Any]:
    """bench.lambda_model on this burst: the same Services and calls on real Lambda, under stated assumptions."""
    defaults = lambda_model.Assumptions()
    assumptions = replace(defaults, cold_start_ms=cold_start_ms) if cold_start_ms else defaults
    burst = lambda_model.Burst(
        services=services,
        calls=calls,
        max_concurrency=concurrency,
        group_threads=group_threads(),
        continuation_s=float(CONTINUATION_DELAY_SECONDS),  # the controller's hostname-first passes in a burst
        cold_calls=tuple(cold),
    )
    figures = lambda_model.simulate(burst, assumptions)
    return {**figures, "assumptions": lambda_model.describe(assumptions)}


def group_threads() -> int:
    from ccm.batch import group_concurrency

    return group_concurrency()


def cold_path_ms(results: dict[str, Any] | None) -> float | None:
    """The service function's measured cold path (bench cold_start), if that scenario ran."""
    entry = ((results or {}).get("cold_start") or {}).get("services") or {}
    value = entry.get("cold_path_ms") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def run(
    services: int = 200, latency_ms: int = 50, concurrency: int = 10, results: dict[str, Any] | None = None
) -> dict[str, Any]:
    capture = EmfCapture()
    names = [f"lat-{i:04d}" for i in range(services)]
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as state:
        config = StackConfig(
            nodes=3,
            state_dir=Path(state),
            concurrency=concurrency,
            resync_seconds=3600,
            extra_env={INJECT_LATENCY_ENV: str(latency_ms)},
            # ASSUMPTION (as bench/scenarios/scale.py): the per-Region NLB quota (default 50) raised to the burst's
            # size, as a real account does through Service Quotas; at 50 the 51st create is refused and never
            # converges (the full-size run stopped at 50 statuses until this).
            aws=FaithfulSettings(rate_limits=True, max_nlbs_per_region=max(50, services + 1)),
        )
        with Stack(config) as stack:
            emulator, runner = stack.emulator, stack.runner
            assert emulator is not None and runner is not None
            runner.drain(120)  # the initial Node deltas of the watcher's first list
            # Environments through their cold path before the burst (ASSUMPTION, in the notes; bench.warm_environment
            # says why); their caches stay empty. The model charges the cold starts.
            # A cluster that already serves a LoadBalancer Service (ASSUMPTION, in the notes): its shared frontend
            # and backend groups and their node rule exist. The first LB of a new cluster makes them once; in the
            # burst, 10 environments raced to do it and its first hostnames came 7 to 11 s late.
            emulator.create(_service(SEED))
            stack.wait_for(
                lambda: _has_ingress(emulator.get("services", "default", SEED) or {}), timeout=120, what="seed"
            )
            runner.drain(120)
            prewarmed = runner.prewarm(FUNCTION, concurrency)
            warm_ms = [r["cold_path_ms"] for r in runner.probe(FUNCTION, WARM_PROBE, "build_cold_path")]
            emulator.clear_log()
            first_invocation, first_line = len(runner.log), len(runner.logs(FUNCTION))
            created: dict[str, float] = {}
            started = time.time()
            for name in names:
                created[name] = time.time()
                emulator.create(_service(name))

            def converged() -> bool:
                ready = sum(
                    _has_ingress(s) for s in emulator.list("services", "default") if s["metadata"]["name"] in created
                )
                return ready >= services

            stack.wait_for(converged, timeout=CONVERGE_TIMEOUT_S, interval=0.1, what=f"{services} LB statuses")
            converge_s = time.time() - started
            # The continuations (listeners, targets) and the follow-up deltas (our own writes) settle.
            complete_s: float | None = None
            try:
                runner.drain(DRAIN_TIMEOUT_S)
                complete_s = time.time() - started
            except TimeoutError:  # reported as None: the hostnames were measured all the same
                pass
            requests = emulator.request_log.snapshot()
            invocations = [i for i in runner.log[first_invocation:] if i.function == FUNCTION]
            peak = runner.peak_concurrency.get(FUNCTION, 0)
            throttled = dict(sorted(aws_faithful.throttled.items()))
            for line in runner.logs(FUNCTION)[first_line:]:
                capture.write(line + "\n")
            log_records = runner.log_records(FUNCTION)
    status_at: dict[str, float] = {}
    for entry in requests:
        parts = entry["path"].rstrip("/").split("/")
        if (
            entry["method"] in ("PATCH", "PUT")
            and parts[-1] == "status"
            and entry["status"] < 300
            and parts[-2] in created
        ):
            status_at.setdefault(parts[-2], entry["time"])
    create_to_status = [(status_at[n] - created[n]) * 1000 for n in names if n in status_at]
    hostname_s = sorted(v / 1000 for v in create_to_status)
    calls_one, calls_hostname, calls_source = create_calls(log_records)
    calls_cold = cold_calls(log_records, calls_hostname)
    floor, floor_bucket, floor_actions = lambda_model.floor_s(services, calls_hostname)
    floor_complete, complete_bucket, complete_actions = lambda_model.floor_s(services, calls_one)
    p99_s = percentile(hostname_s, 99) if hostname_s else None
    e2e = capture.values.get("end_to_end_ms", [])
    calls = capture.values.get("AwsCalls", [])
    durations = capture.values.get("duration_ms", [])
    records = sum(i.batch_size for i in invocations)
    calls_per_create = max(calls) if calls else 0.0
    return {
        **_summary(e2e),
        "samples": [round(v, 1) for v in sorted(e2e)],  # one per status written (node deltas: none in the window)
        "services": services,
        "ports": 2,
        "injected_latency_ms": latency_ms,
        "concurrency": concurrency,
        "peak_concurrency": peak,
        "converge_s": round(converge_s, 1),
        # Until the queue drained (every LB with its listeners and targets); None: not within DRAIN_TIMEOUT_S.
        "complete_s": round(complete_s, 1) if complete_s is not None else None,
        "create_to_status_ms": _summary(create_to_status),
        # Service created -> its status (the LB hostname) written, from the emulator's request log.
        "hostname_all_s": round(max(status_at.values()) - started, 1) if status_at else None,
        "hostname_s": {k: round(v / 1000, 2) for k, v in _summary(create_to_status).items()},
        "floor_s": round(floor, 1),
        "floor_api": f"{floor_bucket} ({', '.join(floor_actions)})",
        "floor_calls_per_service": len(calls_hostname),
        "floor_calls": calls_hostname,
        "floor_calls_source": calls_source,
        "floor_complete_s": round(floor_complete, 1),
        "floor_complete_api": f"{complete_bucket} ({', '.join(complete_actions)})",
        "floor_complete_calls": calls_one,
        "p99_over_floor_s": round(p99_s - floor, 1) if p99_s is not None else None,
        "group_threads": group_threads(),
        "prewarmed_environments": prewarmed,
        "prewarm_cold_path_ms": sorted(warm_ms),
        "model": model(
            services, model_calls(calls_hostname, calls_one), concurrency, cold_path_ms(results), calls_cold
        ),
        "cold_pass_extra_calls": calls_cold,
        "status_writes_seen": len(status_at),
        "invocations": len(invocations),
        "records": records,
        "invocation_ms_mean": round(sum(i.duration for i in invocations) * 1000 / max(1, len(invocations)), 1),
        "reconcile_ms": _summary(durations) if durations else None,
        "reconcile_ms_mean": round(sum(durations) / len(durations), 1) if durations else None,
        "aws_calls_per_reconcile_mean": round(sum(calls) / len(calls), 2) if calls else None,
        "rate_limits": config.aws.rate_limits,  # AWS's API rate limits on in the devstack's moto
        "throttled_requests": throttled,  # answered Throttling / RequestLimitExceeded, per api:Action
        "log_bytes_per_record": round(capture.bytes / max(1, records)),
        "emf_metrics": sorted(f"{ns}/{name}[{','.join(dims)}]" for ns, name, dims in capture.metric_keys),
        "anchor_model_s": anchor_model_s(services, latency_ms),
        "our_model_s": our_model_s(services, latency_ms, calls_per_create, concurrency),
        "notes": f"one run on this machine; {services} Services x 2 TCP ports (NLB) created at once, every AWS call "
        f"of our functions +{latency_ms} ms (injected before send), ESM MaximumConcurrency {concurrency}. The runner "
        "runs each execution environment as its own process; moto and the emulator share one (one GIL); the watcher "
        "is its own process. ASSUMPTIONS: the cluster already serves one LoadBalancer Service (its shared security "
        "groups exist); the function's environments went through their cold path (import, runtime, clients) before "
        "the burst, as Lambda runs each on its own CPU (bench/warm_environment.py), their caches empty; the model "
        "charges cold starts and the cache-filling reads (made at once, as ccm.aws.parallel makes them). "
        f"anchor_model_s = 1 worker x {CLOUD_PROVIDER_AWS['nlb']['create']} calls x {latency_ms} "
        f"ms x {services}; our_model_s = ceil({services}/{concurrency}) x our max calls per create x {latency_ms} ms. "
        f"The per-Region NLB quota raised from 50 to {max(50, services)} (a Service Quotas request in a real account). "
        "The Services carry no annotation: every NLB uses the cluster's shared frontend and backend groups (one node "
        "rule in all). "
        "AWS API rate limits on (token buckets with AWS's documented figures; throttled_requests counts the answers). "
        "hostname_* = Service created -> status written (emulator request log). floor_s = the least time any "
        "controller needs to write every hostname at AWS's rates: per token bucket (devstack.aws_throttling), "
        "(services x the calls one create makes up to CreateLoadBalancer from it - bucket size) / refill per s; "
        "floor_api names the largest; floor_complete_s the same for complete creates (complete_s measured). The "
        "ELB bucket of "
        "CreateLoadBalancer / CreateTargetGroup / CreateListener is 20 / 5 per s by assumption (no published figure "
        "found). model = bench.lambda_model on the same burst (its assumptions printed beside it).",
    }
