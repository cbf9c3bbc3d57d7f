"""Models' scores read back from run folders, and how two lists of scores agree.

Scores are a task's headline metric on the 0-100 scale (`Metric.to_100`; the raw value when a metric
has none), recomputed from the samples with the metric's own aggregate, so the same docs can be
rescored in any subset (a lite selection, one category, a bootstrap resample). Models are matched by
the model fingerprint in each run's manifest. Used by `lite validate` and `compare consistency`.
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

from fastmmeval.errors import ConfigError
from fastmmeval.metrics.base import METRICS, Metric

CORRELATIONS = ("pearson", "spearman", "kendall")


@dataclass
class TaskSamples:
    """One task of one run: its headline metric, the metric item of every scored doc, each scored doc's
    categories (field -> category, as its sample recorded them) and the breakdown fields its results hold."""

    metric: Metric
    items: dict[str, Any]
    n_failed: int
    fingerprint: str | None
    categories: dict[str, dict[str, str]] = field(default_factory=dict)
    breakdowns: tuple[str, ...] = ()


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
            raise ConfigError(f"{path}: missing (scores are recomputed from the samples)")
        samples = _read_samples(path)
        key = result.get("headline_as") or name
        try:
            scored = [s for s in samples if s.get("failed") is None]
            items = {s["doc_id"]: s["metrics"][key] for s in scored}
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{path}: a scored sample lacks doc_id or its {name!r} metric ({e})") from None
        run.tasks[task] = TaskSamples(
            METRICS.get(name), items, len(samples) - len(items), result.get("fingerprint"),
            {s["doc_id"]: s["categories"] for s in scored if s.get("categories")},
            tuple(result.get("breakdowns") or ()),
        )  # fmt: skip
    return run


def expand_runs(paths: list[Path]) -> list[Path]:
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


def by_model(runs: list[Run], side: str) -> dict[str, dict[str, TaskSamples]]:
    """model key -> task -> samples, refusing two runs of one model that both hold a task."""
    out: dict[str, dict[str, TaskSamples]] = {}
    for run in runs:
        tasks = out.setdefault(run.model_key, {})
        for task, samples in run.tasks.items():
            if task in tasks:
                raise ConfigError(f"two {side} runs of model {run.label} hold task {task}; pass only one of them")
            tasks[task] = samples
    return out


def model_labels(runs: list[Run]) -> dict[str, str]:
    """model key -> a readable label (`model(model_args)`, with the run folder's name where two models
    share one)."""
    labels = {r.model_key: r.label for r in runs}
    if len(set(labels.values())) < len(labels):  # same name, other settings or weights: tell them apart
        labels = {r.model_key: f"{r.label} [{r.root.name}]" for r in runs}
    return labels


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


def correlation_tests(a: list[float], b: list[float]) -> dict[str, dict[str, float | None]]:
    """Pearson, Spearman and Kendall (tau-b) of paired scores, each `{"value", "p"}` (scipy's two-sided
    p-value); None where undefined (fewer than two pairs, or a constant side)."""
    from scipy import stats

    out: dict[str, dict[str, float | None]] = {}
    for name, fn in zip(CORRELATIONS, (stats.pearsonr, stats.spearmanr, stats.kendalltau), strict=True):
        if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
            out[name] = {"value": None, "p": None}
            continue
        r, p = (float(x) for x in fn(a, b))
        out[name] = {"value": r if math.isfinite(r) else None, "p": p if math.isfinite(p) else None}
    return out


def correlations(a: list[float], b: list[float]) -> dict[str, float | None]:
    """Pearson, Spearman and Kendall (tau-b) of paired scores; None where undefined (constant input)."""
    return {name: test["value"] for name, test in correlation_tests(a, b).items()}


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


@dataclass(frozen=True)
class SignificantPair:
    """Two models (positions `a`, `b`) whose score gap lies outside its paired bootstrap 95% CI."""

    a: int
    b: int
    gap: float
    ci95: tuple[float, float]


def significant_pairs(scores: list[float], draws: np.ndarray) -> list[SignificantPair]:
    """The pairs of models whose gap `scores[a] - scores[b]` has a bootstrap 95% CI (from `draws`, as
    `bootstrap_gaps` returns them) that excludes 0: the orderings another score list should keep."""
    out = []
    for a, b in combinations(range(len(scores)), 2):
        gaps = draws[:, a] - draws[:, b]
        gaps = gaps[np.isfinite(gaps)]
        if len(gaps) < 2:
            continue
        lo, hi = np.percentile(gaps, [2.5, 97.5])
        if not lo <= 0 <= hi:
            out.append(SignificantPair(a, b, scores[a] - scores[b], (float(lo), float(hi))))
    return out
