"""The cost model's custom metrics are what the runtimes print: counters only when they counted something."""

from __future__ import annotations

from bench.scenarios.cost_inputs import emitted_metrics


def test_the_runtimes_publish_few_metrics_and_no_zero_counters():
    emitted = emitted_metrics()
    every = {m for metrics in emitted.values() for m in metrics}
    service = "[service=service-reconciler]"
    # a converged resync publishes its duration only: no AwsCalls, no zero AwsThrottles/AwsMutatingCalls
    assert emitted["resync"] == [f"ServerlessCCM/ReconcileDuration{service}"]
    assert emitted["heartbeat"] == [f"ServerlessCCM/WatcherHeartbeat{service}", f"ServerlessCCM/WatcherLag{service}"]
    assert not any("AwsCalls" in m or "AwsThrottles" in m or "ColdStart" in m for m in every)
    assert f"ServerlessCCM/AwsMutatingCalls{service}" in emitted["service_change"]
    assert "ServerlessCCM/SweeperOrphansFound[service=sweeper]" in emitted["sweep"]
    assert not any("SweeperDeleted" in m or "RoutesCreated" in m for m in emitted["sweep"] + emitted["route_pass"])
    assert len(every) <= 16
