"""Does a lite set rank models like the full set? Correlations, score gaps and ordering checks.

Input: run folders of several models on the full tasks, and for the lite side either run folders
of the same models on the `<task>_lite` tasks or a selection folder (`fastmmeval lite select`
output), in which case lite scores are recomputed from the full runs' samples restricted to the
selected docs: no model is run again. Runs are read, models matched and scores recomputed by
`fastmmeval.runscores` (each task's headline metric on 0-100, from the samples).

Per task: Pearson, Spearman and Kendall correlations across models, the mean absolute score gap,
and whether every pair of models whose full-set gap lies outside its paired bootstrap 95% CI
(docs resampled, seeded; whole clusters for cluster metrics) keeps its order on the lite set.
A task is flagged "keep full" when Pearson is below `min_corr` (0.87, the paper's lowest accepted
value) or undefined, when such an ordering flips, when no pair of models differs significantly on
the full set (nothing to preserve: saturated scores or too few docs), or when its metric scores
clusters of docs (e.g. MME's image pairs) that the lite set splits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fastmmeval.errors import ConfigError
from fastmmeval.lite.export import LITE_SUFFIX, SELECTION_FORMAT, Selection, read_selection
from fastmmeval.metrics.base import METRICS
from fastmmeval.runscores import (
    Run,
    TaskSamples,
    bootstrap_gaps,
    by_model,
    correlations,
    expand_runs,
    headline_value,
    model_labels,
    read_run,
    significant_pairs,
)

MIN_MODELS = 3


@dataclass
class Thresholds:
    """When a task is flagged "keep full"."""

    min_corr: float = 0.87
    bootstrap_iters: int = 1000
    seed: int = 0


def validate_task(
    task: str, labels: list[str], full: list[TaskSamples], lite_items: list[dict[str, Any]], th: Thresholds
) -> dict[str, Any]:
    """The report of one task: per-model scores, correlations, gap, ordering check, verdict."""
    metric = full[0].metric
    full_scores = [headline_value(metric, list(f.items.values())) for f in full]
    lite_scores = [headline_value(metric, list(m.values())) for m in lite_items]
    report: dict[str, Any] = {
        "task": task, "metric": metric.name, "n_models": len(labels),
        "n_full": max(len(f.items) for f in full), "n_lite": max(len(m) for m in lite_items),  # scored docs
        "scores": {lab: {"full": f, "lite": s, "failed_full": t.n_failed}
                   for lab, f, s, t in zip(labels, full_scores, lite_scores, full, strict=True)},
    }  # fmt: skip
    reasons: list[str] = []
    ok = [i for i, (f, s) in enumerate(zip(full_scores, lite_scores, strict=True)) if f is not None and s is not None]
    if len(ok) < MIN_MODELS:
        report.update(correlations=dict.fromkeys(("pearson", "spearman", "kendall")), mean_abs_gap=None,
                      orderings={"significant": 0, "preserved": 0, "flipped": []}, keep_full=None,
                      reasons=[f"only {len(ok)} model(s) with scores on both sets: at least {MIN_MODELS} are needed"])
        return report
    f_ok, l_ok = [full_scores[i] for i in ok], [lite_scores[i] for i in ok]
    corr = correlations(f_ok, l_ok)
    if corr["pearson"] is None:
        reasons.append("Pearson undefined: scores do not vary across models (saturated?)")
    elif corr["pearson"] < th.min_corr:
        reasons.append(f"Pearson {corr['pearson']:.3f} < {th.min_corr}")
    boot = bootstrap_gaps(metric, [full[i].items for i in ok], th.bootstrap_iters, th.seed)
    significant = significant_pairs(f_ok, boot)
    flipped = []
    for pair in significant:
        lite_gap, (lo, hi) = l_ok[pair.a] - l_ok[pair.b], pair.ci95
        if np.sign(lite_gap) != np.sign(pair.gap):
            la, lb = labels[ok[pair.a]], labels[ok[pair.b]]
            flipped.append({"models": [la, lb], "full_gap": pair.gap, "ci95": [lo, hi], "lite_gap": lite_gap})
            reasons.append(f"{la} vs {lb}: full gap {pair.gap:+.2f} (CI {lo:+.2f}..{hi:+.2f}) "
                           f"but lite gap {lite_gap:+.2f}")
    if not significant:
        reasons.append("no pair of models differs beyond its bootstrap CI on the full set, so no ranking can be "
                       "checked (saturated scores, too few docs or too similar models)")
    if metric.cluster is not None:
        clusters: dict[Any, set[bool]] = {}
        chosen = set().union(*lite_items)
        for f in full:
            for d, item in f.items.items():
                clusters.setdefault(json.dumps(item[metric.cluster], default=str), set()).add(d in chosen)
        split = sum(1 for kept in clusters.values() if len(kept) == 2)
        if split:
            reasons.append(f"metric {metric.name} scores clusters ({metric.cluster}) and the lite set splits {split}")
    report.update(
        correlations=corr,
        mean_abs_gap=float(np.mean(np.abs(np.subtract(f_ok, l_ok)))),
        orderings={"significant": len(significant), "preserved": len(significant) - len(flipped),
                   "flipped": flipped},
        keep_full=bool(reasons),
        reasons=reasons,
    )
    return report


def _selections(folder: Path) -> dict[str, Selection]:
    """Task name -> selection, of a selection folder; empty when `folder` holds none."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            is_selection = json.loads(path.read_text()).get("format") == SELECTION_FORMAT
        except (OSError, json.JSONDecodeError, AttributeError):
            continue
        if is_selection:
            sel = read_selection(path)
            out[sel.task] = sel
    return out


def validate(
    full_paths: list[Path], lite_paths: list[Path], th: Thresholds | None = None, progress: bool = False
) -> dict[str, Any]:
    """The lite validation report over every task that the full runs and the lite side share."""
    th = th or Thresholds()
    full_runs = [read_run(p) for p in expand_runs(full_paths)]
    labels = model_labels(full_runs)
    full = by_model(full_runs, "full")
    selections: dict[str, Selection] = {}
    lite_runs: list[Run] = []
    for p in lite_paths:
        found = _selections(p) if p.is_dir() and not (p / "results.json").exists() else {}
        if found:
            selections.update(found)
        else:
            lite_runs += [read_run(q) for q in expand_runs([p])]
    lite = by_model(lite_runs, "lite")
    tasks = sorted({t for m in full.values() for t in m})
    reports, unmatched = [], []
    for task in tqdm(tasks, desc="validate", unit="task", disable=not progress):
        keys = sorted((k for k in full if task in full[k]), key=labels.__getitem__)
        if task in selections:
            sel = selections[task]
            for k in keys:
                fp = full[k][task].fingerprint
                if fp and sel.task_fingerprint != fp:
                    raise ConfigError(f"selection for {task} was made on task fingerprint {sel.task_fingerprint}, "
                                      f"but the full run of {labels[k]} has {fp}: the task changed; select again")
            wanted = set(sel.doc_ids)
            lite_items = [{d: v for d, v in full[k][task].items.items() if d in wanted} for k in keys]
        else:
            keys = [k for k in keys if task + LITE_SUFFIX in lite.get(k, {})]
            if not keys:
                unmatched.append(task)
                continue
            lite_items = [lite[k][task + LITE_SUFFIX].items for k in keys]
        full_items = [full[k][task] for k in keys]
        if len({f.fingerprint for f in full_items}) > 1:
            raise ConfigError(f"the full runs ran different versions of task {task} (task fingerprints differ): "
                              "their scores are not comparable")
        reports.append(validate_task(task, [labels[k] for k in keys], full_items, lite_items, th))
    if not reports:
        raise ConfigError("no task has both full and lite scores: pass lite runs of <task>_lite tasks of the same "
                          "models, or the folder written by `fastmmeval lite select`")
    return {"thresholds": vars(th), "tasks": reports, "aggregate": aggregate_scores(reports),
            "tasks_without_lite": unmatched}


def aggregate_scores(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The paper's normalized aggregate per model: the equal-weight mean of the tasks' 0-100
    headline scores, full beside lite. `lite` counts "keep full" tasks at their full score (as a
    deployed lite suite would run them); `lite_all_subsets` uses every lite score. `correlations`
    compares each lite column with the full one across models."""
    usable = [r for r in reports if METRICS.get(r["metric"]).to_100 is not None and r["keep_full"] is not None]
    models = sorted({m for r in usable for m in r["scores"]})
    out: dict[str, Any] = {"tasks": [r["task"] for r in usable], "models": {}}
    for model in models:
        rows = [r for r in usable if r["scores"].get(model, {}).get("full") is not None
                and r["scores"][model]["lite"] is not None]
        if len(rows) != len(usable):
            continue  # a model without every task has no comparable aggregate
        full = [r["scores"][model]["full"] for r in rows]
        lite = [r["scores"][model]["full" if r["keep_full"] else "lite"] for r in rows]
        raw = [r["scores"][model]["lite"] for r in rows]
        out["models"][model] = {"full": float(np.mean(full)), "lite": float(np.mean(lite)),
                                "lite_all_subsets": float(np.mean(raw))}
    columns = {k: [v[k] for v in out["models"].values()] for k in ("full", "lite", "lite_all_subsets")}
    out["correlations"] = {k: correlations(columns["full"], columns[k]) for k in ("lite", "lite_all_subsets")}
    return out
