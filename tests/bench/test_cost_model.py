"""The cost model is a pure function of counted figures, stated churn and prices."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.scenarios.cost import REPO, Assumptions, Prices, metric_hours_per_month, model, read_units, template_counts
from bench.scenarios.cost_inputs import item_size, item_sizes

MEASURED = {
    "calls": {"create": 15, "noop": 6, "add_node": 3, "delete": 12},
    "ddb_calls": {"create": 2, "noop": 1, "add_node": 1, "delete": 1},
    "base_ms": {"create": 90.0, "noop": 40.0, "add_node": 30.0, "delete": 80.0},
    "call_ms": 50.0,
    "echo_records": 1.0,
    "log_bytes_per_record": 2000,
    "metrics_by_situation": {
        "resync": ["ServerlessCCM/ReconcileDuration[service=s]"],
        "failure": ["ServerlessCCM/ReconcileFailed[service=s]"],
    },
    "item_bytes": {"node": 800, "service": 100, "seeded_marker": 23},
    "alarms": {"": 8, "RoutesEnabled": 2},  # by feature condition, as template_counts returns them
    "dashboards": {"": 1},
    "sweeper": True,
}


def test_breakdown_adds_up_and_counts_every_resync_record():
    result = model(MEASURED)
    assert result["usd_per_month"] == round(sum(result["breakdown_usd_per_month"].values()), 2)
    resync = next(r for r in result["per_day"] if r["what"].startswith("resync"))
    assert resync["records"] == 200 * 24  # 200 LB Services every hour (the watcher's default)
    assert resync["invocations"] == 20 * 24  # batches of 10
    assert resync["ms_per_record"] == 40 + 6 * 50
    # a batch's records run on the group threads: billed is the invocations' wall time, half the records' time
    assert resync["gb_s"] == round(200 * 24 * 0.340 / 2 * 0.5, 1)
    lone = next(r for r in result["per_day"] if r["what"] == "service changes")
    assert lone["gb_s"] == round(lone["records"] * lone["ms_per_record"] / 1000 * 0.5, 1)  # one record a call
    fixed = result["breakdown_usd_per_month"]
    # one metric every hour + one published in 2 hours a month
    assert fixed["cloudwatch_metrics"] == round(0.30 * (1 + 2 / 730), 2)
    # the template's defaults deploy no routes alarms (EnableRoutes=false); with routes they are billed too
    assert fixed["cloudwatch_alarms"] == 0.8 and fixed["cloudwatch_dashboards"] == 3.0
    routed = model(MEASURED, replace(Assumptions(), routes_enabled=True))
    assert routed["breakdown_usd_per_month"]["cloudwatch_alarms"] == 1.0
    assert routed["idle_polls_per_day"] == 3 * 5 * 86400 / 20 and result["idle_polls_per_day"] == 2 * 5 * 86400 / 20


def test_cost_follows_the_stated_churn_and_prices():
    base = model(MEASURED)["usd_per_month"]
    assert model(MEASURED, replace(Assumptions(), resync_seconds=600))["usd_per_month"] > base
    assert model(MEASURED, replace(Assumptions(), lb_services=400))["usd_per_month"] > base
    free_lambda = replace(Prices(), lambda_arm_gb_s=0.0, lambda_request=0.0)
    assert model(MEASURED, p=free_lambda)["breakdown_usd_per_month"]["lambda_compute"] == 0


def test_metrics_are_prorated_by_the_hours_they_are_published():
    hours = metric_hours_per_month(
        {"resync": ["always"], "failure": ["rare"], "service_change": ["churn", "rare"]}, Assumptions()
    )
    assert hours["always"] == 730 and hours["rare"] > hours["churn"] - 1
    assert 400 < hours["churn"] < 420  # 20 changes a day: an hour holds one with probability 1 - exp(-20/24)
    assert round(metric_hours_per_month({"failure": ["rare"]}, Assumptions())["rare"], 6) == 2  # failure hours


def test_read_units_follow_item_size_and_consistency():
    assert read_units(1024) == 1 and read_units(4097) == 2 and read_units(4097, consistent=False) == 1
    # a Query sums its items before rounding: 100 nodes of 834 bytes = 21 units, not 100
    assert read_units(100 * 834) == 21
    assert item_size({"pk": {"S": "node"}, "member": {"BOOL": True}}) == 2 + 4 + 6 + 1
    assert item_size({"m": {"M": {"a": {"S": "xy"}}}}) == 1 + 3 + 1 + 2 + 1
    sizes = item_sizes()  # as ccm.aws.table_views writes them
    assert 500 < sizes["node"] < 1200 and sizes["service"] < 200


def test_resync_reads_one_checkpoint_item_instead_of_the_node_partition():
    checkpoint = model(MEASURED)["dynamodb_units_per_day"]["rru_resync"]
    query = model(MEASURED, replace(Assumptions(), resync_checkpoint_read=False))["dynamodb_units_per_day"]
    assert checkpoint == 24 * 200 and query["rru_resync"] == 24 * 200 * 20  # 100 x 800 B + marker: 20 x 4 KB


def test_alarms_and_dashboards_are_counted_by_the_features_they_need():
    """The alarms and the dashboard are in observability.yaml (template.yaml's nested application); each is
    counted under its feature condition, so the model bills what a stack with the assumed features deploys."""
    alarms, dashboards = template_counts()
    nested = (REPO / "observability.yaml").read_text()
    assert sum(alarms.values()) == nested.count("Type: AWS::CloudWatch::Alarm") and dashboards == {"": 1}
    assert set(alarms) <= {"", "NodesEnabled", "RoutesEnabled", "SweeperEnabled"} and alarms["RoutesEnabled"] >= 1


def test_log_widgets_bill_the_logs_they_scan_per_view():
    busy = replace(Assumptions(), dashboard_views_per_day=100_000)
    none = model(MEASURED, busy)["breakdown_usd_per_month"]["cloudwatch_logs_insights"]
    result = model({**MEASURED, "log_widgets": 4}, busy)
    gb = result["log_gb_per_month"] * 3 / 24 * 4 * 100_000  # 3 hours of each day's logs, 4 widgets, each view
    assert none == 0  # no log widget, no query
    assert result["breakdown_usd_per_month"]["cloudwatch_logs_insights"] == pytest.approx(gb * 0.005, rel=0.01)


def test_a_host_update_record_is_charged_its_own_dynamodb_calls_not_the_nodes_lambdas():
    from bench.scenarios.cost import _lb_calls

    nlb = {
        "add_node": 2,
        "dynamodb": {"add_node": 7},  # 3 by the Service's record + 4 by the nodes Lambda, once per node change
        "detail": {"add_node": {"by_operation": {"dynamodb:Query": 1, "dynamodb:GetItem": 1,
                                                 "dynamodb:UpdateItem": 1, "elbv2:RegisterTargets": 2}}},
    }  # fmt: skip
    assert _lb_calls(nlb, "add_node") == (5, 3)


def test_log_bytes_follow_what_each_kind_of_record_prints():
    from bench.scenarios.cost import LAMBDA_CONTEXT_BYTES

    sizes = {s: {"bytes": 500.0, "lines": 1.0} for s in ("resync", "host_update", "heartbeat", "safety_pass", "sweep",
                                                         "node_change", "ec2_event", "route_pass")}  # fmt: skip
    small = model({**MEASURED, "log_sizes": {**sizes, "service_change": {"bytes": 500.0, "lines": 1.0}}})
    chatty = model({**MEASURED, "log_sizes": {**sizes, "service_change": {"bytes": 50_500.0, "lines": 1.0}}})
    changes = next(r for r in small["per_day"] if r["what"] == "service changes")["records"]
    assert (chatty["log_gb_per_month"] - small["log_gb_per_month"]) == pytest.approx(
        changes * 50_000 * 30.4 / 1e9, abs=0.01
    )  # only the changes' records grew
    every = sum(r["records"] for r in small["per_day"]) * (500 + LAMBDA_CONTEXT_BYTES) * 30.4 / 1e9
    assert small["log_gb_per_month"] == pytest.approx(every, abs=0.01)
    assert 200 < LAMBDA_CONTEXT_BYTES < 400
