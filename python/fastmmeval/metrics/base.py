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


@dataclass(frozen=True)
class Metric:
    """A per-doc `score`, an `aggregate` over the items, and how its stderr is estimated.

    `stderr="analytic"` needs float items and the mean as aggregate. `to_100` maps the headline
    value onto 0-100 for the cross-benchmark average (None: not comparable)."""

    name: str
    score: Scorer
    aggregate: Callable[[Sequence[Any]], MetricValue] = mean
    stderr: Literal["analytic", "bootstrap", "none"] = "analytic"
    higher_is_better: bool = True
    to_100: Callable[[float], float] | None = lambda v: 100.0 * v


METRICS: Registry[Metric] = Registry("metric")


def _names(metric: Metric, value: MetricValue) -> dict[str, float]:
    if isinstance(value, Mapping):
        return {f"{metric.name}_{k}": float(v) for k, v in value.items()}
    return {metric.name: float(value)}


def summarize(
    metric: Metric, items: Sequence[Any], bootstrap_iters: int = 1000, seed: int = 0
) -> dict[str, dict[str, float | None]]:
    """{name: {"value", "stderr"}} for the metric (one name per value of a dict aggregate)."""
    if not items:
        return {metric.name: {"value": None, "stderr": None}}
    if metric.stderr == "analytic":
        value, err = mean_with_stderr([float(v) for v in items])
        return {metric.name: {"value": value, "stderr": err}}
    values = _names(metric, metric.aggregate(items))
    if metric.stderr == "none" or bootstrap_iters < 2 or len(items) < 2:
        return {k: {"value": v, "stderr": None} for k, v in values.items()}
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {k: [] for k in values}
    n = len(items)
    for _ in range(bootstrap_iters):
        sample = [items[rng.randrange(n)] for _ in range(n)]
        for k, v in _names(metric, metric.aggregate(sample)).items():
            if k in draws and math.isfinite(v):
                draws[k].append(v)
    return {k: {"value": v, "stderr": _std(draws[k])} for k, v in values.items()}


def _std(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
