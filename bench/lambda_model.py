"""A discrete-event model of the burst on real Lambda: what the devstack cannot show (its moto, emulator and handler
processes share two cores here; Lambda gives each execution environment its own CPU and AWS answers in its own time).

Modelled, per Service (one FIFO message group, one message): the watcher's send -> the SQS FIFO event source hands
batches of up to BatchSize messages of distinct groups to at most MaximumConcurrency invocations, scaling up over
time -> a new execution environment pays a cold start -> the invocation runs its groups on min(groups,
group_threads) threads (ccm.batch) -> each record makes its measured AWS calls one after the other, each drawing a
token from AWS's bucket for its action class (the devstack's figures, devstack.aws_throttling) and taking an assumed
latency; a throttled attempt is retried after botocore's jittered backoff (standard mode, ccm.aws.clients attempts),
then every random() x 2 s for up to 30 s more (ccm.aws.clients THROTTLE_WAIT_SECONDS); after the last attempt the
record fails and comes back after ccm.retry's failure delay (5 s doubling), then makes its
reads again and the calls it had not made (a reconcile is idempotent: it finds what it created). The hostname is
out when CreateLoadBalancer answers (the status write follows at once). With `continuation_s` set (the controller's
hostname-first passes in a burst, ccm.retry.CONTINUATION_DELAY_SECONDS), the record ends there and comes back after
that delay for its reads again and the rest; otherwise the rest follows in the same pass.

Everything not measured is an assumption, listed in `Assumptions` and printed with the output. Deterministic: the
jitter comes from random.Random(seed).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.emf import percentile
from ccm.aws.clients import THROTTLE_BACKOFF_CAP_SECONDS, THROTTLE_WAIT_SECONDS
from devstack import aws_throttling

# Assumed real AWS answer times (ms, uniform between low and high), by action; the first matching prefix wins.
# Not measured: the moto answers here say nothing about AWS's. CreateLoadBalancer answers once the LB is recorded
# (it provisions afterwards); the hostname is known from that answer.
ASSUMED_LATENCY_MS: dict[str, tuple[float, float]] = {
    "elbv2:CreateLoadBalancer": (300, 800),
    "elbv2:CreateTargetGroup": (100, 300),
    "elbv2:CreateListener": (100, 300),
    "elbv2:RegisterTargets": (100, 300),
    "elbv2:Describe": (50, 150),
    "elbv2:": (100, 300),
    "ec2:Describe": (50, 200),
    "ec2:": (100, 300),
    "dynamodb:": (5, 20),
    "k8s:": (20, 60),
    "": (50, 150),
}


@dataclass(frozen=True)
class Assumptions:
    latency_ms: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(ASSUMED_LATENCY_MS))
    # Kubernetes requests per reconcile (read the Service, finalizer, status patch), ASSUMED_LATENCY_MS["k8s:"] each.
    k8s_calls: int = 3
    cold_start_ms: float = 800.0  # bench cold_start cold_path_ms when given (docs/performance.md: 750-805 ms here)
    lambda_init_overhead_ms: float = 150.0  # assumed: environment creation before the handler's import
    watcher_send_ms: float = 20.0  # assumed: one SendMessageBatch of up to 10 deltas, back to back
    esm_pickup_ms: float = 50.0  # assumed: a long-polling poller's receive after the message is visible
    # The ESM for SQS starts with 5 concurrent pollers and adds up to 300 per minute (Lambda developer guide, "scaling
    # behaviour" for standard queues); assumed the same for FIFO, where concurrency is also capped by the active
    # message groups and MaximumConcurrency.
    esm_initial: int = 5
    esm_scale_per_min: float = 300.0
    retry_attempts: int = 4  # ccm.aws.clients.MAX_ATTEMPTS (botocore standard mode)
    retry_base_s: float = 1.0  # botocore standard mode: sleep random() * base * 2**(attempt-1)
    # Then a throttled call keeps trying every random() * cap s for this long (ccm.aws.clients): 0 = botocore alone.
    throttle_wait_s: float = THROTTLE_WAIT_SECONDS
    throttle_backoff_cap_s: float = THROTTLE_BACKOFF_CAP_SECONDS
    failure_delay_s: float = 5.0  # ccm.retry.FAILURE_BASE_SECONDS, doubling per receive
    failure_cap_s: float = 300.0


@dataclass(frozen=True)
class Burst:
    services: int
    calls: Sequence[str]  # one record's AWS calls in order, "api:Action" (what the bench counted)
    batch_size: int = 10
    max_concurrency: int = 10
    group_threads: int = 8
    rate_scale: float = 1.0  # x AWS's refill rates; math.inf: no throttling
    continuation_s: float | None = None  # hostname-first passes: the rest comes back after this delay
    # What a new environment's first record on each thread reads before its own calls (its caches are empty:
    # subnets, the shared groups), as the run's cold-start passes made them. Made at once (ccm.aws.parallel): they
    # take the longest one's time, each drawing its token (EC2's describe bucket, 100 then 20 a second, is never
    # emptied by them: a throttled one is not retried here).
    cold_calls: Sequence[str] = ()
    latency_scale: float = 1.0  # x the assumed latencies; 0: instant calls
    seed: int = 1


class _Buckets:
    """AWS's token buckets with the devstack's sizes and rates (devstack.aws_throttling), refilled continuously."""

    def __init__(self, rate_scale: float) -> None:
        self.rate_scale = rate_scale
        self.state: dict[str, list[float]] = {}  # bucket -> [tokens, last refill]
        self.throttled: dict[str, int] = {}

    def take(self, call: str, now: float) -> bool:
        bucket = bucket_of(call)
        if bucket is None or math.isinf(self.rate_scale):
            return True
        size, rate = bucket[1]
        tokens = self.state.setdefault(bucket[0], [size, now])
        tokens[0] = min(size, tokens[0] + (now - tokens[1]) * rate * self.rate_scale)
        tokens[1] = now
        if tokens[0] < 1:
            self.throttled[call] = self.throttled.get(call, 0) + 1
            return False
        tokens[0] -= 1
        return True


def bucket_of(call: str) -> tuple[str, tuple[float, float]] | None:
    """(bucket name, (size, refill per s)) an "api:Action" draws from, as the devstack's moto throttles it (EC2
    describes counted as filtered: ours always are); None: not throttled."""
    api, action = call.split(":", 1)
    klass = aws_throttling.action_class(api, action)
    if klass is None:
        return None
    category = klass.split(":")[0]
    if category == "own":
        return f"{api}:{klass}", aws_throttling.EC2_OWN_BUCKETS[action]
    table = aws_throttling.EC2_BUCKETS if api == "ec2" else aws_throttling.ELB_BUCKETS
    return f"{api}:{klass}", table[category]


def floor_s(services: int, calls: Sequence[str]) -> tuple[float, str, list[str]]:
    """The least time any controller needs for the burst's calls at AWS's rates: per bucket, (demand - size) / refill;
    the largest wins. (seconds, binding bucket, the actions drawing from it)."""
    demand: dict[str, tuple[int, tuple[float, float], set[str]]] = {}
    for call in calls:
        bucket = bucket_of(call)
        if bucket is not None:
            count, _, actions = demand.get(bucket[0], (0, bucket[1], set()))
            demand[bucket[0]] = (count + services, bucket[1], actions | {call})
    best: tuple[float, str, list[str]] = (0.0, "none", [])
    for name, (count, (size, rate), actions) in demand.items():
        seconds = max(0.0, (count - size) / rate)
        if seconds > best[0]:
            best = (seconds, name, sorted(actions))
    return best


def _is_read(call: str) -> bool:
    return call.split(":", 1)[1].startswith(("Describe", "Get", "Query", "List", "request"))


def _latency_s(call: str, table: Mapping[str, tuple[float, float]], scale: float, rng: random.Random) -> float:
    low, high = next(v for k, v in table.items() if call.startswith(k))
    return scale * rng.uniform(low, high) / 1000


def simulate(burst: Burst, assumptions: Assumptions | None = None) -> dict[str, Any]:
    """Run the burst; times in seconds from the first Service's creation."""
    a = assumptions or Assumptions()
    rng = random.Random(burst.seed)
    buckets = _Buckets(burst.rate_scale)
    full = [*burst.calls, *["k8s:request"] * a.k8s_calls]
    events: list[tuple[float, int, Callable[[float], None]]] = []
    order = itertools.count()

    def at(t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(events, (t, next(order), fn))

    visible: list[tuple[float, int]] = []  # (visible at, service)
    receives = [0] * burst.services
    done: dict[int, float] = {}
    hostname: dict[int, float] = {}
    continued = [0]
    pollers_busy, warm_envs, cold_starts = [0], [0], [0]

    def concurrency(now: float) -> int:
        ramp = a.esm_initial + a.esm_scale_per_min * now / 60
        return max(1, min(burst.max_concurrency, int(ramp)))

    def poll(now: float) -> None:
        while pollers_busy[0] < concurrency(now):
            ready = sorted(m for m in visible if m[0] <= now)[: burst.batch_size]
            if not ready:
                later = [m[0] for m in visible if m[0] > now]
                if later:
                    at(min(later), poll)
                return
            for m in ready:
                visible.remove(m)
            pollers_busy[0] += 1
            start = now + a.esm_pickup_ms / 1000
            cold = warm_envs[0] == 0
            if cold:
                cold_starts[0] += 1
                start += (a.cold_start_ms + a.lambda_init_overhead_ms) / 1000
            else:
                warm_envs[0] -= 1
            invoke(start, [s for _, s in ready], cold)

    def tick(now: float) -> None:  # the scale-up adds pollers over time: look again every second
        poll(now)
        if len(done) < burst.services:
            at(now + 1.0, tick)

    def invoke(start: float, services: list[int], cold: bool) -> None:
        pending = list(services)
        running = [0]

        def next_group(t: float, first: bool = False) -> None:
            if not pending:
                running[0] -= 1
                if running[0] == 0:  # invocation over: the environment is warm, its poller free
                    warm_envs[0] += 1
                    pollers_busy[0] -= 1
                    at(t, poll)
                return
            run_record(t, pending.pop(0), next_group, burst.cold_calls if cold and first else ())

        for _ in range(min(len(services), burst.group_threads)):
            running[0] += 1
            at(start, lambda t: next_group(t, first=True))

    todo: dict[int, list[str]] = {}  # a retried record: its reads again, then the calls it had not made

    def run_record(t: float, service: int, then: Callable[[float], None], discovery: Sequence[str]) -> None:
        receives[service] += 1
        calls = list(todo.pop(service, full))
        if discovery:  # the cache-filling reads, at once (see Burst.cold_calls)
            for read in discovery:
                buckets.take(read, t)
            t += max(_latency_s(read, a.latency_ms, burst.latency_scale, rng) for read in discovery)

        def call(i: int, attempt: int, now: float, throttled_since: float | None = None) -> None:
            if i == len(calls):
                done[service] = now
                hostname.setdefault(service, now)
                then(now)
                return
            took = _latency_s(calls[i], a.latency_ms, burst.latency_scale, rng)
            if buckets.take(calls[i], now):
                if calls[i].endswith(":CreateLoadBalancer"):
                    hostname[service] = now + took
                    if burst.continuation_s is not None and i + 1 < len(calls):
                        continued[0] += 1
                        todo[service] = [c for c in calls[:i] if _is_read(c)] + list(calls[i + 1 :])
                        visible.append((now + took + burst.continuation_s, service))
                        then(now + took)
                        return
                at(now + took, lambda t2: call(i + 1, 1, t2))
            elif attempt < a.retry_attempts:
                sleep = rng.random() * a.retry_base_s * 2 ** (attempt - 1)
                at(now + took + sleep, lambda t2: call(i, attempt + 1, t2))
            elif now + took - (since := throttled_since or now + took) < a.throttle_wait_s:
                # botocore gave up: ccm.aws.clients keeps waiting, up to throttle_wait_s from here
                sleep = rng.random() * a.throttle_backoff_cap_s
                at(now + took + sleep, lambda t2: call(i, attempt + 1, t2, since))
            else:  # the record fails: back on the queue after the failure delay; the thread goes on
                todo[service] = [c for c in calls[:i] if _is_read(c)] + list(calls[i:])
                delay = min(a.failure_cap_s, a.failure_delay_s * 2 ** (receives[service] - 1))
                visible.append((now + took + delay, service))
                then(now + took)

        call(0, 1, t)

    send = a.watcher_send_ms / 1000
    for i in range(burst.services):
        visible.append((send * (1 + i // 10), i))
    at(0.0, tick)
    while events and len(done) < burst.services:
        t, _, fn = heapq.heappop(events)
        fn(t)
    times = sorted(hostname.values())
    return {
        "hostname_all_s": round(times[-1], 2) if times else None,
        "complete_s": round(max(done.values()), 2) if done else None,
        **{f"p{q}_s": round(percentile(times, q), 2) if times else None for q in (50, 90, 99)},
        "cold_starts": cold_starts[0],
        "throttled_attempts": dict(sorted(buckets.throttled.items())),
        "records_failed_and_retried": sum(r - 1 for r in receives) - continued[0],
        "continuations": continued[0],
    }


def describe(assumptions: Assumptions) -> dict[str, Any]:
    """The assumptions as JSON-ready values, to print beside the model's figures."""
    values = asdict(assumptions)
    values["latency_ms"] = {k or "other": list(v) for k, v in assumptions.latency_ms.items()}
    values["aws_buckets"] = "devstack.aws_throttling (ELB and EC2 documented figures; other ELB actions 20 / 5 assumed)"
    return values


def fifo_group(
    arrivals: Sequence[float],
    records: Sequence[Sequence[str]],
    assumptions: Assumptions | None = None,
    *,
    k8s_calls: int = 2,
    batch_size: int = 10,
    memory_mb: int = 512,
    seed: int = 1,
) -> dict[str, Any]:
    """One FIFO message group on real Lambda (a Service's ENDPOINTS hints during a rollout): message i becomes
    visible at arrivals[i] (seconds, sorted) and makes the AWS calls records[i] in order, then `k8s_calls` Kubernetes
    requests (read the Service, list its EndpointSlices). The group has at most one invocation in flight (SQS FIFO):
    when it is free, a poller picks up the group's visible messages, up to batch_size, after esm_pickup_ms, and runs
    them one after the other in one warm invocation (a Service's hints do not cold-start an environment of a busy
    function). A throttled call (AWS's buckets, devstack.aws_throttling) is retried after botocore's jittered backoff.
    Billed: each invocation's duration rounded up to the millisecond, at `memory_mb`; requests at Lambda's price are
    left to the caller (bench.scenarios.ip_targets costs them)."""
    a = assumptions or Assumptions()
    rng = random.Random(seed)
    buckets = _Buckets(1.0)
    pickup = a.esm_pickup_ms / 1000
    durations: list[float] = []
    done: list[float] = []
    free, i = 0.0, 0
    while i < len(arrivals):
        start = max(arrivals[i] + pickup, free)
        j = i + 1
        while j < len(arrivals) and j - i < batch_size and arrivals[j] + pickup <= start:
            j += 1
        t = start
        for calls in records[i:j]:
            for call in [*calls, *["k8s:request"] * k8s_calls]:
                attempt = 1
                while True:
                    t += _latency_s(call, a.latency_ms, 1.0, rng)
                    if buckets.take(call, t) or attempt >= a.retry_attempts:
                        break
                    t += rng.random() * a.retry_base_s * 2 ** (attempt - 1)
                    attempt += 1
            done.append(t)
        durations.append(t - start)
        free, i = t, j
    latency = sorted((d - s) * 1000 for d, s in zip(done, arrivals, strict=True))
    billed_ms = sum(math.ceil(d * 1000) for d in durations)
    return {
        "messages": len(arrivals),
        "invocations": len(durations),
        "billed_ms": billed_ms,
        "duration_ms_mean": round(billed_ms / len(durations), 1) if durations else None,
        "gb_s": round(billed_ms / 1000 * memory_mb / 1024, 3),
        "visible_to_done_ms": {f"p{q}": round(percentile(latency, q), 1) if latency else None for q in (50, 99)},
        "throttled_attempts": dict(sorted(buckets.throttled.items())),
    }
