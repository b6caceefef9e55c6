"""devstack.logs_insights: the Logs Insights subset the dashboard's log widgets use, and nothing else."""

from __future__ import annotations

import pytest

from devstack.logs_insights import Filter, UnsupportedQuery, evaluate, parse


def test_the_subset_parses_into_sources_filters_aggregations_and_bin() -> None:
    query = parse(
        "SOURCE '/aws/lambda/a' | SOURCE '/aws/lambda/b' | filter message = \"route reconcile done\""
        " | filter ispresent(end_to_end_ms) | stats pct(end_to_end_ms, 99) as p99, avg(duration_ms),"
        " sum(routes_created) as created, max(x) as m, count(*) as n by bin(15m)"
    )
    assert query.sources == ("/aws/lambda/a", "/aws/lambda/b")
    assert query.filters == (Filter("message", "route reconcile done"), Filter("end_to_end_ms", None))
    assert [(a.function, a.field, a.name) for a in query.aggregates] == [
        ("pct", "end_to_end_ms", "p99"),
        ("avg", "duration_ms", "avg(duration_ms)"),
        ("sum", "routes_created", "created"),
        ("max", "x", "m"),
        ("count", None, "n"),
    ]
    assert query.bin_seconds == 900
    assert query.fields == {"message", "end_to_end_ms", "duration_ms", "routes_created", "x"}


@pytest.mark.parametrize(
    "query",
    [
        "SOURCE 'g' | fields @timestamp, @message | sort @timestamp desc",  # another command
        "SOURCE 'g' | filter duration_ms > 100 | stats count(*) by bin(1m)",  # another comparison
        "SOURCE 'g' | filter message like /x/ | stats count(*) by bin(1m)",
        "SOURCE 'g' | stats median(duration_ms) by bin(1m)",  # another function
        "SOURCE 'g' | stats pct(duration_ms) by bin(1m)",  # pct without its percentile
        "SOURCE 'g' | stats count(*) by service",  # grouped by a field, not a time bin
        "SOURCE 'g' | stats count(*) by bin(1m) | sort n",  # anything after stats
        "filter ispresent(x) | stats count(*) by bin(1m)",  # no SOURCE
        "SOURCE 'g' | filter ispresent(x)",  # no stats
    ],
)
def test_anything_outside_the_subset_is_refused(query: str) -> None:
    with pytest.raises(UnsupportedQuery):
        parse(query)


def test_evaluation_bins_filters_and_ignores_missing_or_non_numeric_values() -> None:
    query = parse("SOURCE 'g' | filter ispresent(v) | stats pct(v, 50) as p50, sum(v) as s, count(*) as n by bin(1m)")
    lines = [
        (0.0, {"v": 4}),
        (30.0, {"v": 2.0}),
        (59.0, {"v": True}),  # a boolean is not a number
        (61.0, {"w": 1}),  # no v: filtered out
        (125.0, {"v": "slow"}),
    ]
    assert evaluate(query, lines) == {"p50": [(0.0, 2.0)], "s": [(0.0, 6.0)], "n": [(0.0, 3.0), (120.0, 1.0)]}
    assert evaluate(query, lines, bin_seconds=10)["p50"] == [(0.0, 4.0), (30.0, 2.0)]
