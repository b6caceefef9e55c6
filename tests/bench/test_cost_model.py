"""The cost model is a pure function of counted figures, stated churn and prices."""

from __future__ import annotations

from dataclasses import replace

from bench.scenarios.cost import REPO, Assumptions, Prices, custom_metrics, model, template_counts

MEASURED = {
    "calls": {"create": 15, "noop": 6, "add_node": 3, "delete": 12},
    "ddb_calls": {"create": 2, "noop": 1, "add_node": 1, "delete": 1},
    "base_ms": {"create": 90.0, "noop": 40.0, "add_node": 30.0, "delete": 80.0},
    "call_ms": 50.0,
    "echo_records": 1.0,
    "log_bytes_per_record": 2000,
    "custom_metrics": 30,
    "alarms": 10,
    "dashboards": 1,
    "sweeper": True,
}


def test_breakdown_adds_up_and_counts_every_resync_record():
    result = model(MEASURED)
    assert result["usd_per_month"] == round(sum(result["breakdown_usd_per_month"].values()), 2)
    resync = next(r for r in result["per_day"] if r["what"].startswith("resync"))
    assert resync["records"] == 200 * 144  # 200 LB Services every 10 minutes
    assert resync["invocations"] == 20 * 144  # batches of 10
    assert resync["ms_per_record"] == 40 + 6 * 50
    fixed = result["breakdown_usd_per_month"]
    assert (
        fixed["cloudwatch_metrics"] == 9.0
        and fixed["cloudwatch_alarms"] == 1.0
        and fixed["cloudwatch_dashboards"] == 3.0
    )


def test_cost_follows_the_stated_churn_and_prices():
    base = model(MEASURED)["usd_per_month"]
    assert model(MEASURED, replace(Assumptions(), resync_seconds=3600))["usd_per_month"] < base
    assert model(MEASURED, replace(Assumptions(), lb_services=400))["usd_per_month"] > base
    free_lambda = replace(Prices(), lambda_arm_gb_s=0.0, lambda_request=0.0)
    assert model(MEASURED, p=free_lambda)["breakdown_usd_per_month"]["lambda_compute"] == 0


def test_custom_metrics_are_counted_from_the_code():
    # every runtime emits at least its reconcile outcome metrics; each function adds its ColdStart metric
    assert custom_metrics() > 10


def test_alarms_and_dashboards_are_counted_in_both_templates():
    """The alarms and the dashboard are in observability.yaml (template.yaml's nested application)."""
    nested = (REPO / "observability.yaml").read_text()
    assert template_counts() == (nested.count("Type: AWS::CloudWatch::Alarm"), 1)
    assert template_counts()[0] >= 15  # DLQ, queue age and function alarms, watcher silence, sweeper
