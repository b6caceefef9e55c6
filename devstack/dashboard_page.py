"""One static HTML page for devstack.dashboard's panels: no network, no CDN. The data is embedded as JSON and a
small script draws one SVG chart per widget, so what a browser shows is what the page's code made of the data:
each panel ends with data-state="data" (and one polyline per series with values) or data-state="no-data"."""

from __future__ import annotations

import html
import json
import re
from typing import Any

# A period the template names in a title: "per 15 min", "per minute", "per 5 min", "per 10 s".
_PER = re.compile(r"\bper (?:\d+ )?(?:s|sec|seconds?|min|minutes?|h|hours?)\b")

_STYLE = """
body { font-family: sans-serif; margin: 1em; background: #fafafa; }
main { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 1em; }
section.widget { background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: 0.5em 1em; }
section.widget h2 { font-size: 0.95em; margin: 0.2em 0 0.5em; }
.no-data { color: #999; font-style: italic; }
.legend span { margin-right: 1em; font-size: 0.8em; white-space: nowrap; }
.legend i { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; }
svg text { font-size: 10px; fill: #555; }
svg text.x-caption { fill: #888; }
"""

_SCRIPT = """
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const W = 540, H = 190, L = 46, B = 32, T = 8, R = 10;
const ns = "http://www.w3.org/2000/svg";
// The smallest 1, 2 or 5 x 10^n at or above v: an axis a person reads (all zeros still get 0..1).
function niceMax(v) {
  if (!(v > 0)) return 1;
  const step = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * step >= v) return m * step;
  return 10 * step;
}
// Plain numbers: 1.5k, 250, 0.25, never 1.00e-9.
function fmt(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e6) return +(v / 1e6).toPrecision(3) + "M";
  if (a >= 1e3) return +(v / 1e3).toPrecision(3) + "k";
  if (a >= 0.01) return String(+v.toPrecision(3));
  return v.toFixed(4);
}
const clock = t => new Date(t * 1000).toISOString().slice(11, 19);  // HH:MM:SS, UTC
function el(name, attrs, text) {
  const node = document.createElementNS(ns, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function draw(panel, section) {
  const lines = panel.lines.filter(l => l.points.length > 0);
  if (lines.length === 0) {
    section.dataset.state = "no-data";
    section.insertAdjacentHTML("beforeend", '<p class="no-data">no data</p>');
    return;
  }
  const all = lines.flatMap(l => l.points);
  const [t0, t1] = SPAN;
  const vmax = niceMax(Math.max(...all.map(p => p[1])));
  const x = t => L + (W - L - R) * (t - t0) / (t1 - t0), y = v => H - B - (H - B - T) * v / vmax;
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H});
  svg.appendChild(el("path", {d: `M${L},${T} V${H - B} H${W - R}`, stroke: "#999", fill: "none"}));
  for (const v of [0, vmax / 2, vmax]) {
    svg.appendChild(el("path", {d: `M${L},${y(v)} H${W - R}`, stroke: "#eee", fill: "none"}));
    svg.appendChild(el("text", {x: L - 4, y: y(v) + 3, "text-anchor": "end", class: "y-tick"}, fmt(v)));
  }
  [t0, (t0 + t1) / 2, t1].forEach((t, i) => {
    svg.appendChild(el("path", {d: `M${x(t)},${H - B} v4`, stroke: "#999"}));
    const anchor = ["start", "middle", "end"][i];
    svg.appendChild(el("text", {x: x(t), y: H - B + 14, "text-anchor": anchor, class: "x-tick"}, clock(t)));
  });
  svg.appendChild(el("text", {x: (L + W - R) / 2, y: H - 3, "text-anchor": "middle", class: "x-caption"},
    "time (UTC)"));
  const legend = document.createElement("div");
  legend.className = "legend";
  panel.lines.forEach((line, i) => {
    const color = COLORS[i % COLORS.length];
    const last = line.points.length ? fmt(line.points[line.points.length - 1][1]) : "no data";
    legend.insertAdjacentHTML("beforeend",
      `<span class="series" data-points="${line.points.length}"><i style="background:${color}"></i>` +
      `${line.label} (${line.stat}): ${last}</span>`);
    if (!line.points.length) return;
    // Each value at the middle of its period; markers keep series that share values (percentiles) visible.
    const pts = line.points.map(p => [x(p[0] + panel.period / 2), y(p[1])]);
    svg.appendChild(el("polyline", {points: pts.map(p => `${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(" "),
      stroke: color, fill: "none", "stroke-width": "1.5"}));
    pts.forEach(p => svg.appendChild(el("circle", {cx: p[0].toFixed(1), cy: p[1].toFixed(1), r: 2.5 + (i % 3),
      stroke: color, fill: "none"})));
  });
  section.appendChild(svg);
  section.appendChild(legend);
  section.dataset.state = "data";
}
const PANELS = JSON.parse(document.getElementById("panels").textContent);
// One time range for every panel, as a CloudWatch dashboard has: panels line up in time.
const STARTS = PANELS.flatMap(p => p.lines.flatMap(l => l.points.map(pt => pt[0])));
const ENDS = PANELS.flatMap(p => p.lines.flatMap(l => l.points.map(pt => pt[0] + p.period)));
const SPAN = STARTS.length ? [Math.min(...STARTS), Math.max(...ENDS)] : [0, 1];
document.querySelectorAll("section.widget").forEach((section, i) => draw(PANELS[i], section));
document.body.dataset.rendered = String(PANELS.length);
"""


def period_text(seconds: int) -> str:
    if seconds % 3600 == 0:
        return "hour" if seconds == 3600 else f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return "minute" if seconds == 60 else f"{seconds // 60} min"
    return f"{seconds} s"


def display_title(title: str, period: int) -> str:
    """The template's title with the period the page drew: its own "per 15 min" becomes "per 10 s" when the demo
    draws 10-second periods, once; a title naming no period gets it appended."""
    per = f"per {period_text(period)}"
    cleaned, found = _PER.subn(per, title, count=1)
    return cleaned if found else f"{title} ({per})"


def render(panels: list[dict[str, Any]], title: str) -> str:
    sections = "\n".join(
        f'<section class="widget" data-state="pending" data-title="{html.escape(p["title"])}">'
        f"<h2>{html.escape(display_title(p['title'], p['period']))}</h2></section>"
        for p in panels
    )
    # "</" inside JSON would end the script element early.
    data = json.dumps(panels).replace("</", "<\\/")
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n<main>\n{sections}\n</main>\n"
        f'<script type="application/json" id="panels">{data}</script>\n<script>{_SCRIPT}</script>\n'
        "</body></html>\n"
    )
