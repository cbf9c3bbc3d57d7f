"""Paired tests of two runs on the same docs: McNemar for 0/1 outcomes, the paired bootstrap otherwise.

Both report the difference as `b - a` (the second run minus the first, so a positive difference means
`b` scored higher) with a 95% (1 - alpha) interval and a two-sided p-value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist

import numpy as np

from fastmmeval.errors import ConfigError

# Below this many discordant pairs McNemar's chi-square approximation is poor: the exact binomial test is used.
EXACT_BELOW = 25
# Bootstrap draws are made this many indices at a time (4 MiB of int32: they stay in cache).
_CHUNK_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class PairedTest:
    """The outcome of a paired test of `b` against `a` over `n` paired units.

    `test` is `mcnemar_exact`, `mcnemar_chi2` or `paired_bootstrap`; `diff = mean_b - mean_a`;
    [`ci_low`, `ci_high`] its 1 - alpha interval; `significant` is `p_value < alpha`. For McNemar,
    `b01` counts the units `a` got wrong and `b` right, `b10` the reverse (None for the bootstrap)."""

    test: str
    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool
    alpha: float = 0.05
    b01: int | None = None
    b10: int | None = None


def mcnemar(a: Sequence[int], b: Sequence[int], *, exact: bool | None = None, alpha: float = 0.05) -> PairedTest:
    """McNemar's test of paired 0/1 outcomes. `exact` (default: when there are fewer than 25 discordant
    pairs) gives the two-sided exact binomial p-value, else the chi-square statistic with continuity
    correction is used, both as statsmodels' `mcnemar` computes them (no discordant pair: p = 1). The
    interval is the Wald interval of a paired difference of proportions (Agresti, Categorical Data
    Analysis, 10.1): diff +- z * sqrt(b01 + b10 - (b01 - b10)**2 / n) / n."""
    x, y = _pair(a, b)
    if not (np.isin(x, (0, 1)).all() and np.isin(y, (0, 1)).all()):
        raise ConfigError("mcnemar: outcomes must be 0 or 1")
    n = len(x)
    b01 = int(np.sum((x == 0) & (y == 1)))
    b10 = int(np.sum((x == 1) & (y == 0)))
    discordant = b01 + b10
    exact = discordant < EXACT_BELOW if exact is None else exact
    if discordant == 0:
        p = 1.0
    elif exact:
        p = _binomial_two_sided(min(b01, b10), discordant)
    else:
        statistic = (abs(b01 - b10) - 1) ** 2 / discordant
        p = math.erfc(math.sqrt(statistic / 2))  # the chi-square(1) survival function
    diff = (b01 - b10) / n
    half = NormalDist().inv_cdf(1 - alpha / 2) * math.sqrt(max(discordant - (b01 - b10) ** 2 / n, 0.0)) / n
    return PairedTest(
        test="mcnemar_exact" if exact else "mcnemar_chi2",
        n=n,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        diff=diff,
        ci_low=diff - half,
        ci_high=diff + half,
        p_value=p,
        significant=p < alpha,
        alpha=alpha,
        b01=b01,
        b10=b10,
    )


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, iters: int = 10000, seed: int = 0, alpha: float = 0.05
) -> PairedTest:
    """The paired bootstrap of the mean difference: `iters` resamples of the units with replacement
    (numpy `default_rng(seed)`), the percentile interval of the resampled mean differences, and the
    two-sided p-value 2 * min(P(d* <= 0), P(d* >= 0)) over them, at most 1 (identical runs: 1)."""
    x, y = _pair(a, b)
    if iters < 1:
        raise ConfigError(f"paired_bootstrap: iters must be >= 1, got {iters}")
    d = y.astype(np.float64) - x.astype(np.float64)
    n = len(d)
    rng = np.random.default_rng(seed)
    draws = np.empty(iters)
    step = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, iters, step):
        rows = min(step, iters - start)
        draws[start : start + rows] = d[rng.integers(0, n, size=(rows, n), dtype=np.int32)].mean(axis=1)
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    p = min(1.0, 2 * min(float(np.mean(draws <= 0)), float(np.mean(draws >= 0))))
    return PairedTest(
        test="paired_bootstrap",
        n=n,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        diff=float(d.mean()),
        ci_low=float(low),
        ci_high=float(high),
        p_value=p,
        significant=p < alpha,
        alpha=alpha,
    )


def _pair(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or len(x) == 0:
        raise ConfigError(f"paired test: needs two equally long, non-empty lists of values, got {x.shape}, {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ConfigError("paired test: values must be finite")
    return x, y


def _binomial_two_sided(k: int, n: int) -> float:
    """min(1, 2 * P(X <= k)) for X ~ Binomial(n, 1/2), computed exactly, then rounded once."""
    term, total = 1, 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return min(1.0, float(Fraction(2 * total, 1 << n)))
