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
_SECTION = re.compile(
    r'<section class="widget" data-state="([a-z-]+)" data-title="([^"]*)"><h2>(.*?)</h2>(.*?)</section>', re.S
)
_CLOCK = re.compile(r'<text [^>]*class="x-tick"[^>]*>(\d\d:\d\d:\d\d)</text>')
_Y = re.compile(r'<text [^>]*class="y-tick"[^>]*>([^<]*)</text>')


def what_a_person_sees(body: str) -> tuple[list[str], list[str], list[int]]:
    """The time labels under the x axis, the value labels of the y axis, the points of each legend entry."""
    return _CLOCK.findall(body), _Y.findall(body), [int(n) for n in re.findall(r'data-points="(\d+)"', body)]


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
    assert [title for _, title, _, _ in sections] == [w.title.replace(">", "&gt;") for w in defined]
    for state, _, heading, body in sections:
        assert state == "data" and "<polyline" in body, heading
        # One period, named once: the drawn one (5 s), not the template's beside it.
        assert len(re.findall(r"\bper ", heading)) == 1 and "per 5 s" in heading, heading
        clocks, values, points = what_a_person_sees(body)
        assert len(clocks) == 3 and clocks == sorted(clocks) and clocks[0] < clocks[-1], (heading, clocks)
        assert values[0] == "0" and all("e" not in v for v in values), (heading, values)
        assert float(values[-1].rstrip("kM")) > 0 and "time (UTC)" in body, heading
        assert points and max(points) >= 1, heading
    # Logs Insights widgets, evaluated over the functions' log lines: each percentile has points over several
    # periods (a workload in waves, not one burst).
    (reconcile,) = [body for _, title, _, body in sections if title.startswith("Service: reconcile duration")]
    for stat in ("p50", "p90", "p99"):
        found = re.search(rf'data-points="(\d+)"><i [^>]*></i>{stat} \(pct\)', reconcile)
        assert found and int(found.group(1)) >= 2, stat
    assert any(w.query is not None for w in defined) and any(w.metrics for w in defined)


def test_a_widget_without_datapoints_says_no_data_in_the_browser(tmp_path: Path) -> None:
    drawn = [
        {"title": "empty", "period": 60, "lines": [{"label": "x", "stat": "Sum", "metric": "N x", "points": []}]},
        {"title": "full", "period": 60, "lines": [{"label": "y", "stat": "Sum", "metric": "N y", "points": [[0, 2]]}]},
    ]
    page = tmp_path / "page.html"
    page.write_text(render(drawn, "t"))
    (empty, full) = _SECTION.findall(browse(page, tmp_path))
    assert empty[0] == "no-data" and "no data" in empty[3] and "<polyline" not in empty[3]
    assert full[0] == "data" and "<polyline" in full[3]


def test_all_zero_and_large_series_get_axes_a_person_reads(tmp_path: Path) -> None:
    zeros = [[1_800_000_000, 0], [1_800_000_060, 0], [1_800_000_120, 0]]
    drawn = [
        {"title": "Errors (per 15 min)", "period": 60, "lines": [{"label": "e", "stat": "Sum", "metric": "N e",
                                                                  "points": zeros}]},
        {"title": "Calls", "period": 60, "lines": [{"label": "c", "stat": "Sum", "metric": "N c",
                                                    "points": [[1_800_000_000, 1234.0], [1_800_000_060, 17.0]]}]},
    ]  # fmt: skip
    page = tmp_path / "page.html"
    page.write_text(render(drawn, "t"))
    (errors, calls) = _SECTION.findall(browse(page, tmp_path))
    assert errors[2] == "Errors (per minute)" and calls[2] == "Calls (per minute)"
    clocks, values, points = what_a_person_sees(errors[3])
    assert values == ["0", "0.5", "1"] and points == [3]  # not 1.00e-9
    assert clocks == ["08:00:00", "08:01:30", "08:03:00"]  # 1_800_000_000 is 2027-01-15T08:00:00Z
    _, values, _ = what_a_person_sees(calls[3])
    assert values == ["0", "1k", "2k"]


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
