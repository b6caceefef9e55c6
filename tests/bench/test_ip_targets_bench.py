"""bench ip_targets at a tiny scale: the keys exist and are sane (bounded, calls counted), not the timings' targets;
and the pieces it is made of (the FIFO group model, the endpoint states, the latency pairing), without a devstack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import lambda_model
from bench.__main__ import main
from bench.scenarios.ip_targets import Hint, _latencies, endpoint_states
from devstack.call_log import AwsCall


# A devstack (moto server, emulator, watcher process, one Lambda environment): about 40 s on a busy 2-core machine.
@pytest.mark.timeout(180)
def test_ip_targets_at_small_scale_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "latest.json"
    assert main(["--only", "ip_targets", "--scale", "small", "--out", str(out), "--no-plots"]) == 0
    results = json.loads(out.read_text())
    assert results["_scale"]["ip_targets"] == "small"
    ip = results["ip_targets"]
    detail = ip["detail"]
    assert detail["replicas"] == 10 and ip["injected_latency_ms"] == 50 and ip["rate_limits"] is True
    # Every new endpoint was registered and every old one deregistered, each by an accepted call that named it.
    assert detail["endpoints_became_ready"] == detail["endpoints_became_terminating"] == 10
    assert detail["never_registered"] == detail["never_deregistered"] == 0 and detail["converged"]
    for key in ("ready_to_registered_ms", "terminating_to_deregistered_ms"):
        figures = ip[key]
        assert figures["samples"] == 10
        # At least the injected 50 ms of the call itself; bounded by the run (generous: a loaded machine).
        assert 50 <= figures["p50"] <= figures["p99"] <= figures["max"] < 30_000
    # Calls counted on the group: each pass writes at most one Deregister and one Register; none without a hint.
    calls = ip["rolling_update_calls_per_tg"]
    assert calls == detail["calls"]["RegisterTargets"] + detail["calls"]["DeregisterTargets"]
    assert 2 <= calls <= 2 * ip["messages"]
    # The watcher coalesced: never more hints than the slice writes they carry; the writes that could change no
    # target (a terminating pod's removal) are in none.
    assert 1 <= ip["messages"] <= detail["slice_changes_in_messages"] < detail["slice_writes"]
    model = ip["lambda_model"]
    assert 1 <= model["invocations"] <= ip["messages"] and model["duration_ms_mean"] > 0 and model["cost_usd"] > 0
    assert ip["cost_rollouts_usd_month"] > 0 and ip["cost"]["rollouts_per_month"] == 200 * 10 * 30.4 // 1
    assert ip["cost_usd_month"] is None  # no `cost` scenario in these results: no made-up base


def test_endpoint_states_follow_the_registration_rules() -> None:
    def ep(ip: str, **conditions: bool) -> dict[str, object]:
        return {"addresses": [ip], "conditions": conditions}

    slices = [
        {"endpoints": [ep("10.0.0.1", ready=True), ep("10.0.0.2", ready=False), ep("10.0.0.3")]},
        {"endpoints": [ep("10.0.0.4", ready=False, serving=True, terminating=True), ep("10.0.0.2", ready=True)]},
    ]
    assert endpoint_states(slices) == ({"10.0.0.1", "10.0.0.2", "10.0.0.3"}, {"10.0.0.4"})


def test_latencies_start_at_the_watchers_sight_and_end_at_the_accepted_call_naming_it() -> None:
    def call(at: float, ips: list[str], status: int = 200) -> AwsCall:
        params = tuple((f"Targets.member.{i + 1}.Id", ip) for i, ip in enumerate(ips))
        return AwsCall("elbv2", "RegisterTargets", "k", params=params, at=at, status=status)

    hints = [Hint(sent_at=10.3, observed_at=10.05, changes=2), Hint(sent_at=20.3, observed_at=20.0, changes=1)]
    calls = [call(10.4, ["a"], status=400), call(10.9, ["a", "b"]), call(21.0, ["c"])]
    written = {"a": 10.0, "b": 10.1, "c": 20.05, "d": 30.0}
    values, missing = _latencies(written, hints, calls, "RegisterTargets")
    # a: seen at the hint's observedAt (10.05) -> the accepted call (the throttled one does not count)
    assert values == pytest.approx(sorted([850.0, 800.0, 950.0])) and missing == ["d"]


def test_a_fifo_group_runs_one_invocation_at_a_time_and_batches_what_waited() -> None:
    records = [["elbv2:DescribeTargetHealth", "elbv2:RegisterTargets"]] * 4
    spread = lambda_model.fifo_group([0.0, 5.0, 10.0, 15.0], records)
    assert spread["invocations"] == 4 and spread["messages"] == 4
    bunched = lambda_model.fifo_group([0.0, 0.01, 0.02, 0.03], records)
    # the first runs alone; the three arriving meanwhile wait for it and go in one invocation
    assert bunched["invocations"] == 2
    assert bunched["billed_ms"] >= spread["billed_ms"] * 0.5 and bunched["gb_s"] > 0
    assert lambda_model.fifo_group([0.0, 5.0, 10.0, 15.0], records) == spread  # seeded
