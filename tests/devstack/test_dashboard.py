"""`python -m devstack dashboard`: the template's dashboard drawn from the devstack's own metrics, opened in a real
headless browser (Debian's chromium; scripts/install-browser.sh, which CI runs). Without chromium the test fails:
the page is only proven by a browser running its script."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from devstack.dashboard import Metric, Point, Widget, emf_points, panels, series, statistic, widgets
from devstack.dashboard_demo import dashboard
from devstack.dashboard_page import render
from devstack.logs_insights import parse
from devstack.stack import Stack, StackConfig

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
)  # fmt: skip
_SECTION = re.compile(r'<section class="widget" data-state="([a-z-]+)"><h2>(.*?)</h2>(.*?)</section>', re.S)


def browse(page: Path, tmp_path: Path) -> str:
    """The DOM after the page's script ran in headless chromium."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not on PATH: run scripts/install-browser.sh (CI does)")
    profile = tmp_path / "chromium-profile"
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_the_demo_fills_every_widget_of_the_template_dashboard_in_a_browser(tmp_path: Path) -> None:
    config = StackConfig(nodes=2, state_dir=tmp_path, concurrency=3, resync_seconds=3600)
    out = tmp_path / "dashboard.html"
    with Stack(config) as stack:
        assert stack.facts is not None
        defined = widgets(stack.facts)
        missing = dashboard(stack, out, period=5, timeout=60)
    assert missing == []
    assert len(defined) >= 12  # the template's widgets for the devstack's parameters (routes off)

    dom = browse(out, tmp_path)
    assert f'data-rendered="{len(defined)}"' in dom
    sections = _SECTION.findall(dom)
    assert [title.split(" <small>")[0] for _, title, _ in sections] == [w.title.replace(">", "&gt;") for w in defined]
    for state, title, body in sections:
        assert state == "data" and "<polyline" in body, title
    # Logs Insights widgets, evaluated over the functions' log lines: each percentile of the query has points.
    (reconcile,) = [body for _, title, body in sections if title.startswith("Service: reconcile duration")]
    for stat in ("p50", "p90", "p99"):
        assert re.search(rf'data-points="[1-9]\d*"><i [^>]*></i>{stat} \(pct\)', reconcile), stat
    assert any(w.query is not None for w in defined) and any(w.metrics for w in defined)


def test_a_widget_without_datapoints_says_no_data_in_the_browser(tmp_path: Path) -> None:
    drawn = [
        {"title": "empty", "period": 60, "lines": [{"label": "x", "stat": "Sum", "metric": "N x", "points": []}]},
        {"title": "full", "period": 60, "lines": [{"label": "y", "stat": "Sum", "metric": "N y", "points": [[0, 2]]}]},
    ]
    page = tmp_path / "page.html"
    page.write_text(render(drawn, "t"))
    (empty, full) = _SECTION.findall(browse(page, tmp_path))
    assert empty[0] == "no-data" and "no data" in empty[2] and "<polyline" not in empty[2]
    assert full[0] == "data" and "<polyline" in full[2]


def test_statistics_are_cloudwatchs_over_raw_values() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [statistic(values, s) for s in ("p50", "p90", "p99", "Maximum", "Sum", "Average", "SampleCount")] == [
        50.0, 90.0, 99.0, 100.0, 5050.0, 50.5, 100.0,
    ]  # fmt: skip
    assert statistic([7.0], "p99") == 7.0


def test_emf_documents_become_points_and_points_series_per_period() -> None:
    # What Powertools prints: several values of one metric in a list, one dimension set.
    doc = {
        "_aws": {
            "Timestamp": 1_000_000,
            "CloudWatchMetrics": [
                {"Namespace": "N", "Dimensions": [["service"]], "Metrics": [{"Name": "D", "Unit": "Milliseconds"}]}
            ],
        },
        "service": "svc",
        "D": [3.0, 1.0],
    }
    points = emf_points([doc, {"message": "not EMF"}])
    assert points == [
        Point("N", "D", (("service", "svc"),), 1000.0, 3.0),
        Point("N", "D", (("service", "svc"),), 1000.0, 1.0),
    ]
    late = Point("N", "D", (("service", "svc"),), 1065.0, 5.0)
    metric = Metric("N", "D", (("service", "svc"),), "Maximum", "d")
    assert series([*points, late], metric, 60) == [(960.0, 3.0), (1020.0, 5.0)]
    other = Metric("N", "D", (("service", "other"),), "Maximum", "d")
    assert series(points, other, 60) == []
    assert panels([], points) == []


def test_a_log_widget_is_its_query_over_the_functions_log_lines() -> None:
    query = parse(
        "SOURCE 'G' | filter message = \"reconciled\" | stats pct(duration_ms, 50) as p50, max(duration_ms) as max,"
        " count(*) as n by bin(1m)"
    )
    widget = Widget("durations", 60, (), query, ("Fn",))
    logs = {
        "Fn": [
            (1000.0, {"message": "reconciled", "duration_ms": 3.0}),
            (1010.0, {"message": "reconciled", "duration_ms": 9.0}),
            (1015.0, {"message": "waiting on AWS", "duration_ms": 500.0}),  # filtered out
            (1070.0, {"message": "reconciled", "duration_ms": "n/a"}),  # not a number: counted, not aggregated
        ],
        "Other": [(1000.0, {"message": "reconciled", "duration_ms": 1000.0})],  # another function's log group
    }
    (drawn,) = panels([widget], [], logs=logs)
    assert {line["label"]: line["points"] for line in drawn["lines"]} == {
        "p50": [(960.0, 3.0)],
        "max": [(960.0, 9.0)],
        "n": [(960.0, 2.0), (1020.0, 1.0)],
    }
