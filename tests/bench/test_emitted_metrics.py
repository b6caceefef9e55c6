"""The cost model's custom metrics are what the runtimes print: counters only when they counted something, and
nothing at all in steady state (durations, latencies and the heartbeat lag are log fields)."""

from __future__ import annotations

from bench.scenarios.cost_inputs import emitted_metrics, logged_lines


def test_the_runtimes_publish_no_metric_in_steady_state_and_only_failures_otherwise():
    emitted = emitted_metrics()
    every = {m for metrics in emitted.values() for m in metrics}
    # the situations of a healthy cluster, changes included, publish nothing: each metric-hour is billed
    for situation in ("service_change", "resync", "heartbeat", "node_change", "host_update", "ec2_event",
                      "safety_pass", "route_change", "route_pass", "sweep"):  # fmt: skip
        assert emitted[situation] == [], situation
    assert "ServerlessCCM/MalformedMessages[service=service-reconciler]" in emitted["failure"]
    gone = ("Duration", "Latency", "WatcherHeartbeat", "WatcherLag", "AwsMutatingCalls", "AwsCalls", "RoutesCreated",
            "SweeperOrphansFound", "ColdStart")  # fmt: skip
    assert not any(name in m for m in every for name in gone)


def test_what_the_metrics_were_is_on_the_records_log_lines():
    lines = logged_lines()

    def fields(service: str, message: str) -> set[str]:
        return {k for line in lines[service] if line.get("message") == message for k in line}

    assert {"duration_ms", "end_to_end_ms", "mutating_calls"} <= fields("service-reconciler", "reconciled")
    assert "watcher_lag_ms" in fields("service-reconciler", "watcher heartbeat")
    assert {"duration_ms", "end_to_end_ms", "mutating_calls"} <= fields("node-reconciler", "processed")
    assert {"duration_ms", "end_to_end_ms", "routes_created"} <= fields("route-reconciler", "route reconcile done")
    assert {"orphans", "mutating_calls"} <= fields("sweeper", "sweep done")
