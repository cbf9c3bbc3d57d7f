"""report.html: one self-contained page (styles, scripts and Plotly inlined; nothing fetched) with the summary,
breakdowns, comparison, efficiency, Lite and contamination links, and the samples browser."""

from __future__ import annotations

import html
import json
from importlib.resources import files
from typing import Any

from fastmmeval.report.tables import comparison_table, efficiency_table, runs_table, summary_table


def script_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `</` or `<!--` can end or comment it."""
    text = json.dumps(data, ensure_ascii=False, default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _static(name: str) -> str:
    return (files("fastmmeval.report") / "static" / name).read_text(encoding="utf-8")


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def page(views: list[dict[str, Any]], comparison: dict[str, Any] | None, lite: list[dict[str, Any]] | None,
         contam: dict[str, dict[str, Any]] | None, samples_html: str) -> str:
    """The whole report page for the run views (`summary.run_view`), their comparison, links and samples."""
    title = "fastmmeval report: " + ", ".join(v["run_id"] for v in views)
    charts = {"breakdowns": [dict(c, run=v["run_id"]) for v in views for c in v["breakdowns"]],
              "efficiency": [{"run": v["run_id"], "task": t["task"], **t["timing"]} for v in views for t in v["tasks"]
                             if t["timing"]],
              "lite": lite or [], "contam": contam or {}}
    sections = [
        "<section id='summary'><h2>Summary</h2>", runs_table(views),
        *(summary_table(v, contam or {}) for v in views), "</section>",
    ]
    if charts["breakdowns"]:
        sections.append("<section id='breakdowns'><h2>Breakdowns</h2><div id='breakdown-charts'></div></section>")
    if comparison is not None:
        sections += ["<section id='comparison'><h2>Comparison of runs</h2>", comparison_table(comparison), "</section>"]
    sections += ["<section id='efficiency'><h2>Efficiency</h2>", *(efficiency_table(v) for v in views),
                 "<div id='efficiency-chart' class='chart'></div></section>"]
    if lite:
        sections.append("<section id='lite'><h2>Lite validation</h2><div id='lite-charts'></div></section>")
    if contam:
        sections.append("<section id='contam'><h2>Contamination</h2><div id='contam-chart' class='chart'></div>"
                        "</section>")
    sections.append(samples_html)
    return "\n".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_static('page.css')}</style></head><body>",
        f"<header><h1>{html.escape(title)}</h1></header><main>", *sections, "</main>",
        f"<script type='application/json' id='report-data'>{script_json(charts)}</script>",
        f"<script>{_plotly_js()}</script>", f"<script>{_static('page.js')}</script>", "</body></html>",
    ])
