"""The benchmark keeps working and its headline claims keep holding (counts, not timings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.__main__ import main


@pytest.fixture(scope="module")
def aws_calls_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One aws_calls run shared by the tests (the cost model reads it)."""
    out = tmp_path_factory.mktemp("bench") / "latest.json"
    assert main(["--only", "aws_calls", "--out", str(out), "--no-plots"]) == 0
    return out


def test_aws_calls_scenario_writes_json_and_beats_the_anchor(aws_calls_results: Path):
    results = json.loads(aws_calls_results.read_text())
    nlb, anchor = results["aws_calls"]["nlb"], results["aws_calls"]["anchor"]["nlb"]
    assert nlb["mutating_noop"] == 0
    for op in ("create", "noop", "add_node"):
        assert nlb[op] < anchor[op], op
    clb, clb_anchor = results["aws_calls"]["clb"], results["aws_calls"]["anchor"]["clb"]
    assert clb["mutating_noop"] == 0
    assert clb["create"] < clb_anchor["create"] and clb["add_node"] < clb_anchor["add_node"]
    assert results.get("latency_ms") is None  # a scenario that did not run has no figures, never made-up ones
    # cloud-provider-aws lists every instance of the region on creation; we never need instances for an NLB
    # (tests/integration/test_security_groups.py checks that every security-group read is filtered).
    create_ops = results["aws_calls"]["nlb"]["detail"]["create"]["by_operation"]
    assert "ec2:DescribeInstances" not in create_ops


# A devstack with one process per execution environment, rate limits on and every delete waiting out the held
# group: about 60-120 s on a busy 2-core machine, over the suite's 120 s default.
@pytest.mark.timeout(360)
def test_latency_and_cost_at_small_scale_write_figures_and_plots(aws_calls_results: Path, tmp_path: Path):
    """latency_ms (10 Services on the devstack) then the cost model over it and aws_calls, plus the PNGs."""
    out = tmp_path / "latest.json"
    shutil.copy(aws_calls_results, out)
    assert main(["--only", "latency_ms", "--only", "cost", "--scale", "small", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["_scale"]["latency_ms"] == "small"

    lat = results["latency_ms"]
    assert lat["services"] == 10 and lat["concurrency"] == 10 and lat["injected_latency_ms"] == 50
    # one end_to_end_ms figure per Service whose status the reconciler wrote, read from the handler's log lines
    assert len(lat["samples"]) == lat["status_writes_seen"] == 10
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    # every AWS call was slowed by 50 ms: no reconcile can be faster than its calls x 50 ms
    assert lat["reconcile_ms"]["max"] >= lat["aws_calls_per_reconcile_mean"] * 50
    assert lat["anchor_model_s"] == 10 * 19 * 50 / 1000
    assert lat["converge_s"] * 1000 >= lat["max"] * 0.9
    # measured with AWS's API rate limits on, and what they refused is reported (per api:Action, maybe none)
    assert lat["rate_limits"] is True
    throttled = lat["throttled_requests"]
    assert isinstance(throttled, dict) and all(":" in k and isinstance(n, int) and n > 0 for k, n in throttled.items())
    # hostname times beside the floor AWS's buckets set, and the model of the same burst on real Lambda
    assert 0 < lat["hostname_s"]["p50"] <= lat["hostname_s"]["p99"] <= lat["hostname_all_s"] + 0.1
    assert lat["floor_s"] >= 0 and lat["floor_api"].startswith(("elbv2:", "ec2:", "none"))
    assert abs(lat["p99_over_floor_s"] - (lat["hostname_s"]["p99"] - lat["floor_s"])) < 0.2  # rounding only
    model = lat["model"]
    assert model["hostname_all_s"] >= lat["floor_s"] and model["p50_s"] <= model["p99_s"]
    assert model["assumptions"]["latency_ms"]["elbv2:CreateLoadBalancer"] == [300, 800]

    cost = results["cost"]
    assert cost["usd_per_month"] == round(sum(cost["breakdown_usd_per_month"].values()), 2) > 0
    nlb = results["aws_calls"]["nlb"]
    assert cost["measured"]["calls"]["noop"] == nlb["noop"] + nlb["dynamodb"]["noop"]

    for png in ("latency_cdf.png", "calls_per_operation.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_watcher_scenario_at_small_scale(tmp_path: Path):
    """The real watcher process lists 300 objects, then works through 400 updates."""
    out = tmp_path / "latest.json"
    assert main(["--only", "watcher", "--scale", "small", "--out", str(out), "--no-plots"]) == 0
    watcher = json.loads(out.read_text())["watcher"]
    assert watcher["rss_mb"] > 10 and watcher["events_per_s"] > 0 and watcher["cpu_ms_per_event"] > 0
    # 200 Services (every tenth LoadBalancer) got one update each: only the 20 LoadBalancer ones reach SQS; the
    # 180 ClusterIP label changes and the 200 Node heartbeats are dropped.
    assert watcher["forwarded_after_updates"] == 20
    assert watcher["dropped_irrelevant_after_updates"]["Service"] == 180


@pytest.mark.timeout(300)
def test_scale_scenario_at_small_scale_passes_the_previous_ceiling(tmp_path: Path):
    """60 NLB Services (past the ~55 the per-LB node rules allowed) converge with one rule on the node group."""
    out = tmp_path / "latest.json"
    assert main(["--only", "scale", "--scale", "small", "--out", str(out), "--no-plots"]) == 0
    scale = json.loads(out.read_text())["scale"]["services"]
    assert scale["services"] == scale["converged"] == 60
    assert scale["node_group_inbound_rules"] == 1 and scale["per_lb_security_groups"] == 0
    assert scale["security_group_calls"]["warm_create"] == {}
    assert scale["previous_ceiling_rules"] == 60 and scale["assumptions"]
