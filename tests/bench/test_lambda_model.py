"""bench.lambda_model: deterministic, converges at once with no limits and no latency, and never beats the floor
its binding token bucket sets."""

from __future__ import annotations

import math

from bench import lambda_model
from bench.lambda_model import Assumptions, Burst, floor_s, simulate

NLB_CREATE = [
    "elbv2:DescribeLoadBalancers", "elbv2:DescribeTargetGroups", "elbv2:DescribeListeners", "ec2:DescribeSubnets",
    "elbv2:CreateLoadBalancer", "elbv2:CreateTargetGroup", "elbv2:CreateTargetGroup", "elbv2:CreateListener",
    "elbv2:CreateListener", "elbv2:RegisterTargets", "elbv2:RegisterTargets", "dynamodb:PutItem",
]  # fmt: skip
INSTANT = Assumptions(
    k8s_calls=0, cold_start_ms=0, lambda_init_overhead_ms=0, watcher_send_ms=0, esm_pickup_ms=0, esm_initial=1000
)


def test_no_limits_and_no_latency_converge_at_once():
    result = simulate(Burst(200, NLB_CREATE, rate_scale=math.inf, latency_scale=0), INSTANT)
    assert result["hostname_all_s"] == result["p99_s"] == 0
    assert result["throttled_attempts"] == {} and result["records_failed_and_retried"] == 0


def test_the_floor_is_the_binding_bucket():
    seconds, bucket, actions = floor_s(200, NLB_CREATE)
    # 5 calls per create in ELB's 20-token bucket refilled at 5 per s (devstack.aws_throttling)
    assert bucket == "elbv2:other" and seconds == (200 * 5 - 20) / 5
    assert actions == ["elbv2:CreateListener", "elbv2:CreateLoadBalancer", "elbv2:CreateTargetGroup"]
    assert floor_s(3, NLB_CREATE)[0] == 0  # a small burst fits in the buckets


def test_one_binding_bucket_is_never_beaten_even_with_instant_calls():
    for concurrency, threads in ((10, 8), (2, 1), (50, 10)):
        result = simulate(Burst(200, NLB_CREATE, max_concurrency=concurrency, group_threads=threads), INSTANT)
        assert result["complete_s"] >= floor_s(200, NLB_CREATE)[0], (concurrency, threads)
        # The hostnames need only the calls up to CreateLoadBalancer (model and floor since hostname-first passes).
        upto = NLB_CREATE[: NLB_CREATE.index("elbv2:CreateLoadBalancer") + 1]
        assert result["hostname_all_s"] >= floor_s(200, upto)[0], (concurrency, threads)


def test_latency_bounds_a_serial_controller():
    """One invocation, one thread, no limits: the records run one after the other, each its calls' latencies."""
    fixed = Assumptions(**{**INSTANT.__dict__, "latency_ms": {"": (100.0, 100.0)}})
    result = simulate(Burst(10, NLB_CREATE, max_concurrency=1, group_threads=1, rate_scale=math.inf), fixed)
    assert math.isclose(result["complete_s"], 10 * len(NLB_CREATE) * 0.1, abs_tol=0.01)
    # The hostname is out when CreateLoadBalancer answers (the controller publishes it then), not at the record's
    # end: the last Service's comes after the 9 records before it and its own calls up to CreateLoadBalancer.
    upto = NLB_CREATE.index("elbv2:CreateLoadBalancer") + 1
    assert math.isclose(result["hostname_all_s"], (9 * len(NLB_CREATE) + upto) * 0.1, abs_tol=0.01)


def test_deterministic_with_a_seed_and_assumptions_printable():
    one, two = (simulate(Burst(50, NLB_CREATE, seed=7)) for _ in range(2))
    assert one == two
    printed = lambda_model.describe(Assumptions())
    assert printed["latency_ms"]["elbv2:CreateLoadBalancer"] == [300, 800] and "aws_buckets" in printed


def test_hostname_first_passes_publish_near_the_hostname_floor_and_complete_later():
    """The controller's hostname-first passes (ccm.retry.CONTINUATION_DELAY_SECONDS): every CreateLoadBalancer of
    the burst goes before the continuations' creates, so the hostnames follow the hostname floor (1 token of the
    20 / 5 bucket each) instead of the complete creates' (5 tokens each); the complete creates still take theirs."""
    calls = [c for c in NLB_CREATE if c not in ("elbv2:DescribeTargetGroups", "elbv2:DescribeListeners")]
    hostname_floor, bucket, actions = floor_s(200, calls[: calls.index("elbv2:CreateLoadBalancer") + 1])
    assert (hostname_floor, bucket, actions) == ((200 - 20) / 5, "elbv2:other", ["elbv2:CreateLoadBalancer"])
    one_pass = simulate(Burst(200, calls, group_threads=2), INSTANT)
    split = simulate(Burst(200, calls, group_threads=2, continuation_s=45.0), INSTANT)
    assert split["continuations"] == 200 and one_pass["continuations"] == 0
    assert hostname_floor <= split["hostname_all_s"] < hostname_floor + 10 < 100 < one_pass["hostname_all_s"]
    assert split["complete_s"] >= floor_s(200, calls)[0]


def test_waiting_out_throttling_keeps_records_from_failing_and_the_bucket_busy():
    """ccm.aws.clients keeps a throttled call trying after botocore's attempts: in a burst no record fails back to
    the queue, and the hostnames come closer to the floor than with botocore's attempts alone."""
    calls = [c for c in NLB_CREATE if c not in ("elbv2:DescribeTargetGroups", "elbv2:DescribeListeners")]
    burst = Burst(200, calls, group_threads=2, continuation_s=45.0)
    botocore_alone = simulate(burst, Assumptions(throttle_wait_s=0))
    waiting = simulate(burst, Assumptions())
    assert botocore_alone["records_failed_and_retried"] > 0 and waiting["records_failed_and_retried"] == 0
    assert waiting["p99_s"] < botocore_alone["p99_s"]


def test_a_new_environment_first_passes_make_the_cold_reads():
    """The first record on each thread of a new environment makes `cold_calls` first (empty caches), all at once
    (ccm.aws.parallel); later ones and warm environments do not."""
    fixed = Assumptions(**{**INSTANT.__dict__, "latency_ms": {"": (100.0, 100.0)}})
    cold = ("ec2:DescribeSubnets", "ec2:DescribeRouteTables")
    plain = simulate(Burst(4, NLB_CREATE, max_concurrency=1, group_threads=2, rate_scale=math.inf), fixed)
    with_cold = simulate(
        Burst(4, NLB_CREATE, max_concurrency=1, group_threads=2, rate_scale=math.inf, cold_calls=cold), fixed
    )
    # One invocation of 4 records on 2 threads: each thread's first record adds 2 calls of 100 ms made together
    # (100 ms), once.
    assert math.isclose(with_cold["complete_s"] - plain["complete_s"], 0.1, abs_tol=0.01)
