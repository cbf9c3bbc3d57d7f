"""The paired statistics of `fastmmeval compare`: the paired t-test, the mean and standard deviation of
paired differences and the paired Cohen's d, each equal to scipy's on the same numbers (one implementation
the compare flows share).

For n pairs with differences Δ_i = a_i - b_i, mean m and sample standard deviation s (ddof=1):
t = m / (s / √n) with n - 1 degrees of freedom (`scipy.stats.ttest_rel`), and Cohen's d for paired
samples (d_z) = m / s, so that t = d·√n."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

Alternative = Literal["greater", "less", "two-sided"]


def mean_std(delta: Sequence[float]) -> tuple[float, float]:
    """The mean of `delta` and its sample standard deviation (ddof=1; nan for fewer than two values)."""
    values = np.asarray(delta, dtype=np.float64)
    if values.size == 0:
        return math.nan, math.nan
    std = float(values.std(ddof=1)) if values.size > 1 else math.nan
    return float(values.mean()), std


def paired_t_test(a: Sequence[float], b: Sequence[float], alternative: Alternative = "greater") -> tuple[float, float]:
    """(t, p) of the paired t-test of E[a - b] against 0, `alternative` saying which side (greater:
    E[a - b] > 0): those of `scipy.stats.ttest_rel(a, b, alternative=alternative)`, nan where it gives nan."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    delta = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = delta.size
    mean, std = mean_std(delta)
    if n < 2 or not math.isfinite(std):
        return math.nan, math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        t = float(np.float64(mean) / (np.float64(std) / math.sqrt(n)))
    if math.isnan(t):
        return math.nan, math.nan
    from scipy import stats  # imported on first use: `fastmmeval compare` loads this module at start

    df = n - 1
    if alternative == "greater":
        p = float(stats.t.sf(t, df))
    elif alternative == "less":
        p = float(stats.t.cdf(t, df))
    elif alternative == "two-sided":
        p = float(2 * stats.t.sf(abs(t), df))
    else:
        raise ValueError(f"alternative must be greater, less or two-sided, got {alternative!r}")
    return t, p


def cohens_d_paired(delta: Sequence[float]) -> float:
    """Cohen's d of paired differences (d_z): mean(Δ) / std(Δ, ddof=1); nan for fewer than two values or
    no spread."""
    mean, std = mean_std(delta)
    if not math.isfinite(std) or std == 0:
        return math.nan
    return mean / std


@dataclass(frozen=True)
class PairedStats:
    """What a paired comparison reports: n pairs, mean and std (ddof=1) of Δ = a - b, the t statistic and
    p-value of `alternative` and Cohen's d; a value that is undefined (too few pairs, no spread) is None."""

    n: int
    mean: float | None
    std: float | None
    t: float | None
    p: float | None
    d: float | None
    alternative: Alternative = "greater"

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON values."""
        return asdict(self)


def paired_stats(a: Sequence[float], b: Sequence[float], alternative: Alternative = "greater") -> PairedStats:
    """The paired comparison of `a` and `b` (Δ_i = a_i - b_i)."""
    t, p = paired_t_test(a, b, alternative)
    delta = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mean, std = mean_std(delta)
    return PairedStats(len(delta), _finite(mean), _finite(std), _finite(t), _finite(p),
                       _finite(cohens_d_paired(delta)), alternative)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
