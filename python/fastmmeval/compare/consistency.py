"""Cross-version consistency: do two versions of a benchmark score and rank the same models alike?

MMBench-Live's Section 4.4 at two granularities: the task-model level (one point per model x category,
the categories of the task's breakdown field) and the model-averaged level (one point per model: the
equal-weight mean of its category scores; with no breakdown, the whole task's score). At each: Pearson r
and Spearman rho with scipy's p-values (Table 2), Kendall tau-b, and the share of model pairs whose
order the new version keeps; beside them, beyond the paper, bootstrap 95% CIs and the pairs whose old
gap is outside its bootstrap CI. And Figure 2: dRank = Rank_new - Rank_old per model x category.

Scores are recomputed from the samples (`fastmmeval.runscores`: the headline metric on 0-100), so
the bootstrap can redraw them: within each category of each version, the resampling units (docs, or
whole clusters where the metric names one, e.g. an MMBench question with its CircularEval rotations)
are drawn with replacement, the same draw for every model of that version (paired), independently
across versions, categories keeping their sizes; every statistic is recomputed on each draw.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from fastmmeval.compare.runs import SIDES, VersionPair, breakdown_field, by_category, pair_versions
from fastmmeval.errors import ConfigError
from fastmmeval.runscores import (
    CORRELATIONS,
    bootstrap_gaps,
    correlation_tests,
    correlations,
    headline_value,
    significant_pairs,
)
from fastmmeval.util import write_bytes_atomic, write_json_atomic

MIN_MODELS = 3
MEAN_COLUMN = "mean"  # the dRank column of the model-averaged scores
REPORT_FILE = "consistency.json"
HEATMAP_FILE = "delta_rank.png"


@dataclass
class ConsistencyReport:
    """What `consistency` found (and wrote as `consistency.json`): per side (`old`, `new`) each model's
    score per category; per level (`task_model`, `model_averaged`) the correlations, with p-values and
    bootstrap CIs, and the pairwise orderings kept; dRank per model x category (and `mean`)."""

    tasks: dict[str, str]
    metric: str
    field: str | None
    models: list[str]
    categories: list[str]
    scores: dict[str, dict[str, dict[str, float | None]]]
    levels: dict[str, dict[str, Any]]
    delta_rank: dict[str, dict[str, int | None]]
    bootstrap: dict[str, Any]
    unmatched: dict[str, list[str]]
    files: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """The report as `consistency.json` holds it."""
        return asdict(self)


def consistency(
    runs_a: list[Path],
    runs_b: list[Path],
    tasks: tuple[str, str],
    out: Path,
    field: str | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
) -> ConsistencyReport:
    """Compare task `tasks[0]` in the old version's runs `runs_a` with task `tasks[1]` in the new version's
    runs `runs_b` over the models evaluated on both, by the categories of breakdown `field` (None: the first
    field both record; the whole task where they record none); write `consistency.json` and
    `delta_rank.png` into `out`. `bootstrap` resamples (0: no CIs), seeded by `seed`."""
    pair = pair_versions(runs_a, runs_b, tasks)
    if len(pair.labels) < MIN_MODELS:
        raise ConfigError(f"{len(pair.labels)} model(s) ran both {tasks[0]} and {tasks[1]}: at least {MIN_MODELS} "
                          f"are needed (old only: {pair.only_old or 'none'}; new only: {pair.only_new or 'none'})")
    field = breakdown_field(pair, field)
    sides = (pair.old, pair.new)
    grouped = [[by_category(s, field, task) for s in side] for side, task in zip(sides, tasks, strict=True)]
    found = [set().union(*side) for side in grouped]
    categories = sorted(found[0] & found[1])
    if not categories:
        raise ConfigError(f"{tasks[0]} and {tasks[1]} share no {field!r} category")
    scores = np.array([[[_score(pair, g.get(c)) for c in categories] for g in side] for side in grouped])
    draws = _draws(pair, grouped, categories, bootstrap, seed) if bootstrap else None
    labels = pair.labels
    levels = {"task_model": _task_model_level(scores, draws, labels, categories),
              "model_averaged": _model_level(scores, draws, labels)}
    report = ConsistencyReport(
        tasks=dict(zip(SIDES, tasks, strict=True)),
        metric=pair.metric.name,
        field=field,
        models=labels,
        categories=categories,
        scores={side: {m: {c: _finite(scores[i, j, k]) for k, c in enumerate(categories)}
                       for j, m in enumerate(labels)} for i, side in enumerate(SIDES)},
        levels=levels,
        delta_rank=delta_rank(scores[0], scores[1], labels, categories),
        bootstrap={"iters": bootstrap, "seed": seed, "unit": _unit(pair),
                   "scheme": "units drawn with replacement within each category of each version, the same draw "
                             "for every model of that version; 95% CIs are the 2.5 and 97.5 percentiles"},
        unmatched={"models_old_only": pair.only_old, "models_new_only": pair.only_new,
                   "categories_old_only": sorted(found[0] - found[1]),
                   "categories_new_only": sorted(found[1] - found[0])},
        files={"report": str(out / REPORT_FILE), "heatmap": str(out / HEATMAP_FILE)},
    )  # fmt: skip
    from fastmmeval.compare.heatmap import delta_rank_png

    png = io.BytesIO()
    title = f"ΔRank = Rank({tasks[1]}) - Rank({tasks[0]})"
    delta_rank_png(report.delta_rank, [*categories, MEAN_COLUMN], title, png)
    write_bytes_atomic(out / HEATMAP_FILE, png.getvalue())
    write_json_atomic(out / REPORT_FILE, report.to_json())
    return report


def _score(pair: VersionPair, items: dict[str, Any] | None) -> float:
    value = headline_value(pair.metric, list(items.values())) if items else None
    return np.nan if value is None else value


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _unit(pair: VersionPair) -> str:
    """What one bootstrap draw picks."""
    if pair.metric.cluster is None:
        return "a doc"
    return (f"a cluster of docs sharing the metric's {pair.metric.cluster!r} (all of them or none: e.g. an MMBench "
            "question with its CircularEval rotations)")


def _draws(
    pair: VersionPair, grouped: list[list[dict[str, dict[str, Any]]]], categories: list[str], iters: int, seed: int
) -> np.ndarray:
    """(iters, side, model, category) scores on bootstrap resamples of each version's docs."""
    out = np.full((iters, 2, len(pair.labels), len(categories)), np.nan)
    for i, side in enumerate(grouped):
        for k, c in enumerate(categories):
            stream = int(np.random.SeedSequence([seed, i, k]).generate_state(1)[0])
            out[:, i, :, k] = bootstrap_gaps(pair.metric, [g.get(c, {}) for g in side], iters, stream)
    return out


def _level(
    old: np.ndarray, new: np.ndarray, boot_old: list[np.ndarray], boot_new: list[np.ndarray]
) -> dict[str, Any]:
    """Correlations of paired points (nan ones left out) with p-values and, over the draws, 95% CIs."""
    ok = np.isfinite(old) & np.isfinite(new)
    level: dict[str, Any] = {"n": int(ok.sum()), **correlation_tests(list(old[ok]), list(new[ok]))}
    values: dict[str, list[float]] = {name: [] for name in CORRELATIONS}
    for a, b in zip(boot_old, boot_new, strict=True):
        fine = np.isfinite(a) & np.isfinite(b)
        for name, r in correlations(list(a[fine]), list(b[fine])).items():
            if r is not None:
                values[name].append(r)
    for name in CORRELATIONS:
        defined = values[name]
        ci = [float(x) for x in np.percentile(defined, [2.5, 97.5])] if len(defined) >= 2 else None
        level[name] |= {"ci95": ci, "draws_defined": len(defined)}
    return level


def _orderings(
    groups: list[tuple[list[int], np.ndarray, np.ndarray, np.ndarray | None]], labels: list[str], where: list[str]
) -> dict[str, Any]:
    """Pairs of models ordered apart on the old version (per group: model positions, old and new scores,
    old draws) and how many keep that order on the new one; the same for the pairs whose old gap lies
    outside its bootstrap 95% CI, with each of those that flips."""
    pairs = kept = significant = significant_kept = 0
    flipped = []
    for (models, old, new, boot), group in zip(groups, where, strict=True):
        for a, b in combinations(range(len(models)), 2):
            if old[a] != old[b]:
                pairs += 1
                kept += bool(np.sign(new[a] - new[b]) == np.sign(old[a] - old[b]))
        for pair in significant_pairs(list(old), boot) if boot is not None else []:
            significant += 1
            new_gap = float(new[pair.a] - new[pair.b])
            if np.sign(new_gap) == np.sign(pair.gap):
                significant_kept += 1
            else:
                flipped.append({"models": [labels[models[pair.a]], labels[models[pair.b]]], "in": group,
                                "old_gap": pair.gap, "ci95": list(pair.ci95), "new_gap": new_gap})
    return {"pairs": pairs, "kept": kept, "share_kept": kept / pairs if pairs else None,
            "significant": significant, "significant_kept": significant_kept, "flipped": flipped}  # fmt: skip


def _task_model_level(
    scores: np.ndarray, draws: np.ndarray | None, labels: list[str], categories: list[str]
) -> dict[str, Any]:
    """One point per model x category."""
    boots = [] if draws is None else list(draws)
    level = _level(scores[0].ravel(), scores[1].ravel(), [d[0].ravel() for d in boots], [d[1].ravel() for d in boots])
    groups = []
    for k in range(len(categories)):
        ok = [j for j in range(len(labels)) if np.isfinite(scores[:, j, k]).all()]
        boot = None if draws is None else draws[:, 0, ok, k]
        groups.append((ok, scores[0, ok, k], scores[1, ok, k], boot))
    level["orderings"] = _orderings(groups, labels, categories)
    return level


def _model_level(scores: np.ndarray, draws: np.ndarray | None, labels: list[str]) -> dict[str, Any]:
    """One point per model: the mean of its category scores (nan where one is missing)."""
    means = scores.mean(axis=2)
    boot_means = None if draws is None else draws.mean(axis=3)  # (iters, side, model)
    boots = [] if boot_means is None else list(boot_means)
    level = _level(means[0], means[1], [d[0] for d in boots], [d[1] for d in boots])
    ok = [j for j in range(len(labels)) if np.isfinite(means[:, j]).all()]
    boot = None if boot_means is None else boot_means[:, 0, ok]
    level["orderings"] = _orderings([(ok, means[0, ok], means[1, ok], boot)], labels, [MEAN_COLUMN])
    return level


def ranks(scores: np.ndarray) -> np.ndarray:
    """Rank of each score among the finite ones, 1 for the best; tied scores share the best rank of their
    group ("1, 2, 2, 4"); nan for a missing score."""
    from scipy.stats import rankdata

    out = np.full(len(scores), np.nan)
    ok = np.isfinite(scores)
    out[ok] = rankdata(-scores[ok], method="min")
    return out


def delta_rank(
    old: np.ndarray, new: np.ndarray, labels: list[str], categories: list[str]
) -> dict[str, dict[str, int | None]]:
    """model -> category (and `mean`, the model-averaged scores) -> Rank_new - Rank_old, ranks among the
    models scored on both versions there (positive: the model falls behind on the new version)."""
    columns = [np.concatenate([side, side.mean(axis=1, keepdims=True)], axis=1) for side in (old, new)]
    out: dict[str, dict[str, int | None]] = {m: {} for m in labels}
    for k, name in enumerate([*categories, MEAN_COLUMN]):
        both = np.isfinite(columns[0][:, k]) & np.isfinite(columns[1][:, k])
        r_old, r_new = (ranks(np.where(both, c[:, k], np.nan)) for c in columns)
        for j, m in enumerate(labels):
            out[m][name] = int(r_new[j] - r_old[j]) if both[j] else None
    return out
