"""One static HTML page for devstack.dashboard's panels: no network, no CDN. The data is embedded as JSON and a
small script draws one SVG chart per widget, so what a browser shows is what the page's code made of the data:
each panel ends with data-state="data" (and one polyline per series with values) or data-state="no-data"."""

from __future__ import annotations

import html
import json
from typing import Any

_STYLE = """
body { font-family: sans-serif; margin: 1em; background: #fafafa; }
main { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 1em; }
section.widget { background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: 0.5em 1em; }
section.widget h2 { font-size: 0.95em; margin: 0.2em 0 0.5em; }
.no-data { color: #999; font-style: italic; }
.legend span { margin-right: 1em; font-size: 0.8em; white-space: nowrap; }
.legend i { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; }
svg text { font-size: 10px; fill: #555; }
"""

_SCRIPT = """
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const W = 540, H = 180, L = 50, B = 20;
function draw(panel, section) {
  const lines = panel.lines.filter(l => l.points.length > 0);
  if (lines.length === 0) {
    section.dataset.state = "no-data";
    section.insertAdjacentHTML("beforeend", '<p class="no-data">no data</p>');
    return;
  }
  const all = lines.flatMap(l => l.points);
  const t0 = Math.min(...all.map(p => p[0])), t1 = Math.max(...all.map(p => p[0])) + panel.period;
  const vmax = Math.max(1e-9, ...all.map(p => p[1]));
  const x = t => L + (W - L - 5) * (t - t0) / (t1 - t0), y = v => H - B - (H - B - 5) * v / vmax;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  const axis = document.createElementNS(ns, "path");
  axis.setAttribute("d", `M${L},5 V${H - B} H${W - 5}`);
  axis.setAttribute("stroke", "#999");
  axis.setAttribute("fill", "none");
  svg.appendChild(axis);
  for (const [v, label] of [[vmax, vmax.toPrecision(3)], [0, "0"]]) {
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", 2);
    text.setAttribute("y", y(v) + 4);
    text.textContent = label;
    svg.appendChild(text);
  }
  const legend = document.createElement("div");
  legend.className = "legend";
  panel.lines.forEach((line, i) => {
    const color = COLORS[i % COLORS.length];
    const last = line.points.length ? line.points[line.points.length - 1][1].toPrecision(4) : "no data";
    legend.insertAdjacentHTML("beforeend",
      `<span class="series" data-points="${line.points.length}"><i style="background:${color}"></i>` +
      `${line.label} (${line.stat}): ${last}</span>`);
    if (!line.points.length) return;
    const poly = document.createElementNS(ns, "polyline");
    const mid = panel.period / 2;
    const pts = line.points.length === 1
      ? [[line.points[0][0], line.points[0][1]], [line.points[0][0] + panel.period, line.points[0][1]]]
      : line.points.map(p => [p[0] + mid, p[1]]);
    poly.setAttribute("points", pts.map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "));
    poly.setAttribute("stroke", color);
    poly.setAttribute("fill", "none");
    poly.setAttribute("stroke-width", "1.5");
    svg.appendChild(poly);
  });
  section.appendChild(svg);
  section.appendChild(legend);
  section.dataset.state = "data";
}
const PANELS = JSON.parse(document.getElementById("panels").textContent);
document.querySelectorAll("section.widget").forEach((section, i) => draw(PANELS[i], section));
document.body.dataset.rendered = String(PANELS.length);
"""


def render(panels: list[dict[str, Any]], title: str) -> str:
    sections = "\n".join(
        f'<section class="widget" data-state="pending"><h2>{html.escape(p["title"])}'
        f" <small>(per {p['period']} s)</small></h2></section>"
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
