"""The paired statistics of `fastmmeval compare` against scipy, and the paper's Table 3 read back."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fastmmeval.compare.stats import cohens_d_paired, mean_std, paired_stats, paired_t_test


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_paired_t_test_is_scipys(seed: int, alternative: str) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    a = rng.uniform(0, 1, n)
    b = np.clip(a - rng.normal(0.01 * seed, 0.1, n), 0, 1)
    ours = paired_t_test(a, b, alternative)  # type: ignore[arg-type]
    theirs = stats.ttest_rel(a, b, alternative=alternative)
    assert ours == pytest.approx((theirs.statistic, theirs.pvalue), rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("seed", range(5))
def test_mean_std_and_cohens_d_are_numpys(seed: int) -> None:
    delta = np.random.default_rng(seed).normal(0.02, 0.15, 500)
    assert mean_std(delta) == pytest.approx((np.mean(delta), np.std(delta, ddof=1)), rel=1e-12)
    assert cohens_d_paired(delta) == pytest.approx(np.mean(delta) / np.std(delta, ddof=1), rel=1e-12)
    t, _ = paired_t_test(delta, np.zeros_like(delta))
    assert t == pytest.approx(cohens_d_paired(delta) * math.sqrt(len(delta)), rel=1e-12)


def test_undefined_values_are_none_not_zero() -> None:
    one = paired_stats([0.7], [0.5])
    assert (one.n, one.mean, one.std, one.t, one.p, one.d) == (1, pytest.approx(0.2), None, None, None, None)
    flat = paired_stats([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])  # no difference and no spread: scipy says nan
    assert (flat.mean, flat.std, flat.t, flat.p, flat.d) == (0.0, 0.0, None, None, None)
    assert math.isnan(stats.ttest_rel([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]).statistic)
    with pytest.raises(ValueError, match="differ in length"):
        paired_t_test([1.0, 2.0], [1.0])


def _with_moments(n: int, mean: float, std: float) -> np.ndarray:
    z = np.random.default_rng(0).normal(size=n)
    return mean + std * (z - z.mean()) / z.std(ddof=1)


@pytest.mark.parametrize(("n", "mean", "std", "t", "p", "d"), [
    (4329, 0.0118, 0.1220, 6.38, 9.5e-11, 0.097),  # MMBench (dev, en: 4329 questions)
    (5921, 0.0060, 0.1016, 4.54, 2.9e-6, 0.059),  # MMBench-Live (5.9k instances)
])  # fmt: skip
def test_table_3_of_the_paper_adds_up(n: int, mean: float, std: float, t: float, p: float, d: float) -> None:
    """Table 3 of the MMBench-Live paper prints mean and std of Δ, t, p and d rounded: Δ with its mean and
    std gives back its d, its t (t = d·√n for n ≈ 4.3k and 5.9k) and a p of the same order as printed;
    the printed t gives back the printed p."""
    got = paired_stats(_with_moments(n, mean, std), np.zeros(n))
    assert (got.mean, got.std) == (pytest.approx(mean, rel=1e-9), pytest.approx(std, rel=1e-9))
    assert round(got.d, 3) == d
    assert got.t == pytest.approx(got.d * math.sqrt(n), rel=1e-12)
    assert got.t == pytest.approx(t, abs=0.02)  # mean and std are printed to 3 significant digits
    assert 0.5 * p < got.p < 2 * p
    assert float(stats.t.sf(t, n - 1)) == pytest.approx(p, rel=0.05)
