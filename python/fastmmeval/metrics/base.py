"""The metric interface, registry and aggregation with standard errors.

A metric scores each doc into a JSON-able item (a float for simple metrics, a small dict when the
aggregate needs more, e.g. a category or a pair id), then aggregates the items of a task into one
value or a dict of named values. Standard errors are analytic for means and bootstrapped
(seeded) for everything else.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastmmeval.registry import Registry

MetricValue = float | dict[str, float]


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean (nan when empty)."""
    return sum(values) / len(values) if values else float("nan")


def mean_with_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its analytic standard error (sample std / sqrt(n); 0 for n < 2)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    m = mean(values)
    if n < 2:
        return m, 0.0
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var / n)


# score(prediction, targets, doc fields) -> item; prediction None means unparsed.
Scorer = Callable[[str | None, Sequence[str], Mapping[str, Any]], Any]


def percent(value: float) -> float:
    """A fraction in [0, 1] on the 0-100 scale (the default `to_100`)."""
    return 100.0 * value


def already_on_100(value: float) -> float:
    """A value that is already on the 0-100 scale (the `to_100` of metrics reported in percent)."""
    return value


@dataclass(frozen=True)
class Metric:
    """A per-doc `score`, an `aggregate` over the items, and how its stderr is estimated.

    `stderr="analytic"` needs float items and the mean as aggregate.

    `to_100` maps the headline value onto 0-100, higher is better, for the cross-benchmark average
    (`metrics.aggregate.overall_score`); each metric documents its mapping where it is defined
    (default `percent`, for fractions; e.g. a score with a known maximum is divided by it, an
    unbounded one is capped). None: not comparable, left out of the average. `headline` names the
    key of a dict aggregate that is the headline value (None for float aggregates).

    `cluster` names the item field (items are then dicts) holding a cluster id, for metrics whose
    docs are not independent (e.g. the rotations of one MMBench question): the bootstrap resamples
    whole clusters, and each draw of a cluster gets an id of its own, so a cluster drawn twice
    counts twice in `aggregate`.

    `judge` names the judge prompt (`fastmmeval.judge.prompts`) whose verdict the metric scores:
    the evaluator asks the run's judge and passes the verdict's value to `score` in the doc's
    fields under `JUDGE_VERDICT`; a failed judgment leaves the doc out of this metric.

    `unavailable` checks an outside requirement (e.g. METEOR's Java) before any model time is spent."""

    name: str
    score: Scorer
    aggregate: Callable[[Sequence[Any]], MetricValue] = mean
    stderr: Literal["analytic", "bootstrap", "none"] = "analytic"
    to_100: Callable[[float], float] | None = percent
    headline: str | None = None
    cluster: str | None = None
    judge: str | None = None
    unavailable: Callable[[], str | None] | None = None  # why the metric cannot run here (None: it can)


# The field under which a judge metric's `score` finds the judge's verdict value.
JUDGE_VERDICT = "_judge_verdict"


METRICS: Registry[Metric] = Registry("metric")


def _names(metric: Metric, value: MetricValue) -> dict[str, float]:
    if isinstance(value, Mapping):
        return {f"{metric.name}_{k}": float(v) for k, v in value.items()}
    return {metric.name: float(value)}


def summarize(
    metric: Metric, items: Sequence[Any], bootstrap_iters: int = 1000, seed: int = 0
) -> dict[str, dict[str, float | None]]:
    """{name: {"value", "stderr"}} for the metric (one name per value of a dict aggregate); the
    seeded bootstrap resamples items, or whole clusters when the metric names a `cluster` field."""
    if not items:
        return {metric.name: {"value": None, "stderr": None}}
    if metric.stderr == "analytic":
        value, err = mean_with_stderr([float(v) for v in items])
        return {metric.name: {"value": value, "stderr": err}}
    values = _names(metric, metric.aggregate(items))
    units = _clusters(metric.cluster, items)
    if metric.stderr == "none" or bootstrap_iters < 2 or len(units) < 2:
        return {k: {"value": v, "stderr": None} for k, v in values.items()}
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {k: [] for k in values}
    n = len(units)
    for _ in range(bootstrap_iters):
        picks = [units[rng.randrange(n)] for _ in range(n)]
        if metric.cluster is None:
            sample = [unit[0] for unit in picks]
        else:
            field = metric.cluster
            sample = [{**item, field: (item[field], j)} for j, unit in enumerate(picks) for item in unit]
        for k, v in _names(metric, metric.aggregate(sample)).items():
            if k in draws and math.isfinite(v):
                draws[k].append(v)
    return {k: {"value": v, "stderr": _std(draws[k])} for k, v in values.items()}


def units(metric: Metric, items: Sequence[Any]) -> int:
    """How many independent units the items are: items, or the metric's clusters (e.g. MMBench's questions)."""
    return len(_clusters(metric.cluster, items))


def _clusters(field: str | None, items: Sequence[Any]) -> list[list[Any]]:
    """The resampling units: one per item, or the items of each cluster (in first-seen order)."""
    if field is None:
        return [[item] for item in items]
    groups: dict[Any, list[Any]] = {}
    for item in items:
        groups.setdefault(item[field], []).append(item)
    return list(groups.values())


def _std(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
