"""The report's tables as escaped HTML: runs, per-task summary, comparison and efficiency."""

from __future__ import annotations

from html import escape
from typing import Any


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _table(cls: str, head: list[str], rows: list[list[Any]], row_classes: list[str] | None = None) -> str:
    out = [f"<table class='{cls}'><thead><tr>", *(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        rc = f" class='{row_classes[i]}'" if row_classes and row_classes[i] else ""
        out.append(f"<tr{rc}>" + "".join(f"<td>{escape(_fmt(c))}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def runs_table(views: list[dict[str, Any]]) -> str:
    """One row per run: model, model args, overall 0-100, times and the command."""
    rows = [[v["run_id"], v["model"], v["model_args"] or "", v["model_fingerprint"],
             None if v["overall"] is None else round(v["overall"], 2),
             None if v["overall_stderr"] is None else round(v["overall_stderr"], 2),
             v["started"], v["finished"], v["command"]] for v in views]
    return _table("runs", ["run", "model", "model args", "model fingerprint", "overall (0-100)", "± stderr",
                           "started", "finished", "command"], rows)


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def summary_table(view: dict[str, Any], contam: dict[str, dict[str, Any]]) -> str:
    """Per task of one run: headline metric, value, 95% CI, 0-100, counts, failures, judging, overlap, time."""
    rows = []
    for t in view["tasks"]:
        ci = "n/a" if t["ci"] is None else f"[{t['ci'][0]:.4f}, {t['ci'][1]:.4f}]"
        share = (contam.get(t["task"]) or {}).get("any_overlap_share")
        overlap = "" if share is None else f"{100 * share:.1f}% overlapped"
        rows.append([t["task"], t["version"], t["metric"] or "not scored", t["value"], ci,
                     None if t["score_100"] is None else round(t["score_100"], 2), t["n"], t["n_scored"],
                     f"{t['n_failed']}" + (f" ({_kinds(t['failures'])})" if t["failures"] else ""),
                     t["n_judged"], t["judge_failures"] or 0, _kinds(t["extract_rules"]), overlap,
                     t["timing"].get("wall_s"), t["fingerprint"]])
    head = ["task", "ver", "metric", "value", "95% CI", "0-100", "n", "scored", "failed", "judged",
            "judge failures", "extraction rules", "contamination", "wall s", "fingerprint"]
    return f"<h3>{escape(view['run_id'])}</h3>" + _table("summary", head, rows)


def comparison_table(comparison: dict[str, Any]) -> str:
    """Per other run and task: both values, the difference with its CI, the paired test and its verdict."""
    rows, classes = [], []
    for e in comparison["comparisons"]:
        ci = e.get("ci")
        rows.append([e["task"], e["baseline"], e["other"], e.get("value_a"), e.get("value_b"), e.get("diff"),
                     "n/a" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]", e.get("test"), e.get("p_value"),
                     e.get("verdict"), e.get("n_shared"), (e.get("mismatch") or {}).get("reason") or e.get("reason")])
        classes.append("significant" if e.get("verdict") == "significant" else "")
    head = ["task", "baseline", "other", "baseline value", "other value", "diff (other - baseline)", "95% CI",
            "test", "p", "verdict", "shared units", "note"]
    notes = "".join(f"<p class='warning'>{escape(w)}</p>" for w in comparison.get("warnings", []))
    return notes + _table("comparison", head, rows, classes)


def efficiency_table(view: dict[str, Any]) -> str:
    """Per task of one run: docs/s, tokens and tokens/s, seconds per stage; then API usage."""
    rows = []
    for t in view["tasks"]:
        tm, tk = t["timing"], t["tokens"]
        rows.append([t["task"], tm.get("docs_per_s"), tk.get("prompt"), tk.get("generated"), tk.get("prompt_per_s"),
                     tk.get("generated_per_s"), tm.get("prepare_s"), tm.get("model_s"), tm.get("judge_s"),
                     tm.get("score_s"), tm.get("wall_s")])
    head = ["task", "docs/s", "prompt tokens", "generated tokens", "prompt tok/s", "generated tok/s", "prepare s",
            "model s", "judge s", "score s", "wall s"]
    usage = "".join(f"<p class='usage'>{escape(k)}: {escape(str(v))}</p>"
                    for k, v in (("model usage", view["usage"]), ("judge usage", view["judge_usage"])) if v)
    return f"<h3>{escape(view['run_id'])}</h3>" + _table("efficiency", head, rows) + usage
