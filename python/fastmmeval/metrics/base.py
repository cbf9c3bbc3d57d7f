"""The metric interface, registry and standard aggregations."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastmmeval.registry import Registry


def mean_with_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its analytic standard error (sample std / sqrt(n); 0 for n < 2)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


@dataclass(frozen=True)
class Metric:
    """`score(prediction, targets)` per doc (prediction None = unparsed), then `aggregate`."""

    name: str
    score: Callable[[str | None, Sequence[str]], float]
    aggregate: Callable[[Sequence[float]], tuple[float, float]] = mean_with_stderr
    higher_is_better: bool = True


METRICS: Registry[Metric] = Registry("metric")
