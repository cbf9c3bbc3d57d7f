"""Does a lite set rank models like the full set? Correlations, score gaps and ordering checks.

Input: run folders of several models on the full tasks, and for the lite side either run folders
of the same models on the `<task>_lite` tasks or a selection folder (`fastmmeval lite select`
output), in which case lite scores are recomputed from the full runs' samples restricted to the
selected docs: no model is run again. Models are matched by the model fingerprint in each run's
manifest. Scores are each task's headline metric on the 0-100 scale (`Metric.to_100`; the raw
value when a metric has none), recomputed from the samples with the metric's own aggregate.

Per task: Pearson, Spearman and Kendall correlations across models, the mean absolute score gap,
and whether every pair of models whose full-set gap lies outside its paired bootstrap 95% CI
(docs resampled, seeded; whole clusters for cluster metrics) keeps its order on the lite set.
A task is flagged "keep full" when Pearson is below `min_corr` (0.87, the paper's lowest accepted
value) or undefined, when such an ordering flips, when no pair of models differs significantly on
the full set (nothing to preserve: saturated scores or too few docs), or when its metric scores
clusters of docs (e.g. MME's image pairs) that the lite set splits.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fastmmeval.errors import ConfigError
from fastmmeval.lite.export import LITE_SUFFIX, SELECTION_FORMAT, Selection, read_selection
from fastmmeval.metrics.base import METRICS, Metric

MIN_MODELS = 3


@dataclass
class TaskSamples:
    """One task of one run: its headline metric and the metric item of every scored doc."""

    metric: Metric
    items: dict[str, Any]
    n_failed: int
    fingerprint: str | None


@dataclass
class Run:
    """A run folder: the model it evaluated and its tasks' samples."""

    root: Path
    label: str
    model_key: str
    tasks: dict[str, TaskSamples] = field(default_factory=dict)


def _read_samples(path: Path) -> list[dict[str, Any]]:
    """Sample lines of a samples file; a torn last line (a run still writing) is ignored, never cut."""
    lines = path.read_bytes().splitlines(keepends=True)
    out = []
    for lineno, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if lineno == len(lines) and not line.endswith(b"\n"):
                break
            raise ConfigError(f"{path}:{lineno}: corrupt sample line") from None
    return out


def read_run(root: Path) -> Run:
    """The model and per-task samples of one run folder (`manifest.json`, `results.json`,
    `samples/<task>.jsonl`)."""
    try:
        manifest = json.loads((root / "manifest.json").read_text())
        results = json.loads((root / "results.json").read_text())["results"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{root}: not a finished run folder (manifest.json + results.json): {e}") from None
    config = manifest.get("config", {})
    label = config.get("model", "?") + (f"({config['model_args']})" if config.get("model_args") else "")
    fp = json.dumps(manifest.get("model_fingerprint", label), sort_keys=True, default=str)
    run = Run(root, label, hashlib.sha256(fp.encode()).hexdigest()[:16])
    for task, result in results.items():
        name = result.get("headline_metric")
        if name not in METRICS:
            raise ConfigError(f"{root}/results.json: task {task}: headline metric {name!r} is not a known metric")
        path = root / "samples" / f"{task}.jsonl"
        if not path.exists():
            raise ConfigError(f"{path}: missing (lite validation recomputes scores from samples)")
        samples = _read_samples(path)
        try:
            key = result.get("headline_as") or name
            scored = {s["doc_id"]: s["metrics"][key] for s in samples if s.get("failed") is None}
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{path}: a scored sample lacks doc_id or its {name!r} metric ({e})") from None
        run.tasks[task] = TaskSamples(METRICS.get(name), scored, len(samples) - len(scored), result.get("fingerprint"))
    return run


def headline_value(metric: Metric, items: list[Any]) -> float | None:
    """The metric's headline value over `items`, on 0-100 when the metric maps onto it."""
    if not items:
        return None
    value = metric.aggregate(items)
    if isinstance(value, dict):
        if metric.headline is None:
            raise ConfigError(f"metric {metric.name!r} has several values and no headline")
        value = value[metric.headline]
    value = float(value)
    if not math.isfinite(value):
        return None
    return metric.to_100(value) if metric.to_100 is not None else value


def correlations(full: list[float], lite: list[float]) -> dict[str, float | None]:
    """Pearson, Spearman and Kendall (tau-b) of paired scores; None where undefined (constant input)."""
    from scipy import stats

    out: dict[str, float | None] = {}
    for name, fn in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr), ("kendall", stats.kendalltau)):
        if len(full) < 2 or np.ptp(full) == 0 or np.ptp(lite) == 0:
            out[name] = None
            continue
        r = float(fn(full, lite)[0])
        out[name] = r if math.isfinite(r) else None
    return out


def _units(metric: Metric, docs: list[str], items: list[dict[str, Any]]) -> list[list[int]]:
    """Resampling units as lists of doc positions: one per doc, or one per cluster of the metric."""
    if metric.cluster is None:
        return [[i] for i in range(len(docs))]
    groups: dict[Any, list[int]] = {}
    for i, d in enumerate(docs):
        item = next((m[d] for m in items if d in m), None)
        groups.setdefault(json.dumps(item[metric.cluster], default=str) if item else d, []).append(i)
    return list(groups.values())


def bootstrap_gaps(
    metric: Metric, items: list[dict[str, Any]], iters: int = 1000, seed: int = 0
) -> np.ndarray:
    """(iters, n_models) headline values of each model on the same resampled docs (paired
    bootstrap over the union of the models' docs; whole clusters for cluster metrics)."""
    docs = sorted(set().union(*items))
    units = _units(metric, docs, items)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(units), size=(iters, len(units)))
    if metric.stderr == "analytic":  # float items, mean aggregate: weighted sums in one product
        values = np.array([[m.get(d, np.nan) for d in docs] for m in items], dtype=np.float64)
        n_units = len(units)
        rows = (draws + n_units * np.arange(iters)[:, None]).ravel()
        counts = np.bincount(rows, minlength=iters * n_units).reshape(iters, n_units)
        unit_of = np.empty(len(docs), dtype=np.int64)
        for u, members in enumerate(units):
            unit_of[members] = u
        weights = counts[:, unit_of].astype(np.float64)
        present = ~np.isnan(values)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = (weights @ np.nan_to_num(values).T) / (weights @ present.T)
        return np.vectorize(lambda v: metric.to_100(v) if metric.to_100 else v)(means)
    out = np.full((iters, len(items)), np.nan)
    for b, draw in enumerate(draws):
        for j, m in enumerate(items):
            picked = []
            for k, u in enumerate(draw):
                for i in units[u]:
                    item = m.get(docs[i])
                    if item is not None:  # each draw of a cluster is a cluster of its own
                        picked.append({**item, metric.cluster: (item[metric.cluster], k)} if metric.cluster else item)
            value = headline_value(metric, picked)
            out[b, j] = np.nan if value is None else value
    return out


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
    flipped, significant = [], 0
    for a, b in combinations(range(len(ok)), 2):
        gap = f_ok[a] - f_ok[b]
        draws = boot[:, a] - boot[:, b]
        draws = draws[np.isfinite(draws)]
        if len(draws) < 2:
            continue
        lo, hi = np.percentile(draws, [2.5, 97.5])
        if lo <= 0 <= hi:
            continue
        significant += 1
        lite_gap = l_ok[a] - l_ok[b]
        if np.sign(lite_gap) != np.sign(gap):
            la, lb = labels[ok[a]], labels[ok[b]]
            flipped.append({"models": [la, lb], "full_gap": gap, "ci95": [float(lo), float(hi)], "lite_gap": lite_gap})
            reasons.append(f"{la} vs {lb}: full gap {gap:+.2f} (CI {lo:+.2f}..{hi:+.2f}) but lite gap {lite_gap:+.2f}")
    if significant == 0:
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
        orderings={"significant": significant, "preserved": significant - len(flipped), "flipped": flipped},
        keep_full=bool(reasons),
        reasons=reasons,
    )
    return report


def _expand(paths: list[Path]) -> list[Path]:
    """Run folders among `paths`: a run folder itself, or the run folders directly inside one."""
    out = []
    for p in paths:
        if (p / "results.json").exists():
            out.append(p)
            continue
        inner = sorted(q.parent for q in p.glob("*/results.json"))
        if not inner:
            raise ConfigError(f"{p}: neither a run folder (results.json) nor a folder of run folders")
        out += inner
    return out


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


def _by_model(runs: list[Run], side: str) -> dict[str, dict[str, TaskSamples]]:
    """model key -> task -> samples, refusing two runs of one model that both hold a task."""
    out: dict[str, dict[str, TaskSamples]] = {}
    for run in runs:
        tasks = out.setdefault(run.model_key, {})
        for task, samples in run.tasks.items():
            if task in tasks:
                raise ConfigError(f"two {side} runs of model {run.label} hold task {task}; pass only one of them")
            tasks[task] = samples
    return out


def validate(
    full_paths: list[Path], lite_paths: list[Path], th: Thresholds | None = None, progress: bool = False
) -> dict[str, Any]:
    """The lite validation report over every task that the full runs and the lite side share."""
    th = th or Thresholds()
    full_runs = [read_run(p) for p in _expand(full_paths)]
    labels = {r.model_key: r.label for r in full_runs}
    if len(set(labels.values())) < len(labels):  # same name, other settings or weights: tell them apart
        labels = {r.model_key: f"{r.label} [{r.root.name}]" for r in full_runs}
    full = _by_model(full_runs, "full")
    selections: dict[str, Selection] = {}
    lite_runs: list[Run] = []
    for p in lite_paths:
        found = _selections(p) if p.is_dir() and not (p / "results.json").exists() else {}
        if found:
            selections.update(found)
        else:
            lite_runs += [read_run(q) for q in _expand([p])]
    lite = _by_model(lite_runs, "lite")
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
