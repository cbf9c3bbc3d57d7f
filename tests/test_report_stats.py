"""The paired tests against statsmodels and scipy on random cases, tiny and tied ones included."""

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from fastmmeval.errors import ConfigError
from fastmmeval.report.stats import mcnemar, paired_bootstrap


def _table(a: np.ndarray, b: np.ndarray) -> list[list[int]]:
    return [[int(np.sum((a == i) & (b == j))) for j in (0, 1)] for i in (0, 1)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 30, 100, 1000, 5000])
def test_mcnemar_matches_statsmodels_exact_and_chi2(n: int) -> None:
    rng = np.random.default_rng(n)
    for trial in range(20):
        p_a, p_b = rng.random(2)
        a = (rng.random(n) < p_a).astype(int)
        b = (rng.random(n) < p_b).astype(int)
        if trial % 2:  # correlated runs: most outcomes agree
            b = np.where(rng.random(n) < 0.7, a, b)
        table = _table(a, b)
        discordant = table[0][1] + table[1][0]
        exact = mcnemar(a, b, exact=True)
        assert exact.p_value == pytest.approx(sm_mcnemar(table, exact=True).pvalue, abs=1e-12)
        assert (exact.b01, exact.b10) == (table[0][1], table[1][0])
        if discordant:  # statsmodels' chi-square is nan without discordant pairs; ours says p = 1
            chi2 = mcnemar(a, b, exact=False)
            assert chi2.p_value == pytest.approx(sm_mcnemar(table, exact=False, correction=True).pvalue, abs=1e-12)
        assert mcnemar(a, b).test == ("mcnemar_exact" if discordant < 25 else "mcnemar_chi2")
        assert exact.diff == pytest.approx(b.mean() - a.mean())
        assert exact.ci_low <= exact.diff <= exact.ci_high


def test_mcnemar_ties_and_planted_difference() -> None:
    same = [1, 0, 1, 1, 0]
    tied = mcnemar(same, same, exact=False)
    assert (tied.p_value, tied.diff, tied.ci_low, tied.ci_high, tied.significant) == (1.0, 0.0, 0.0, 0.0, False)
    rng = np.random.default_rng(0)
    a, b = (rng.random(500) < 0.6).astype(int), (rng.random(500) < 0.75).astype(int)
    planted = mcnemar(a, b)
    assert planted.significant and planted.p_value < 0.01 and planted.ci_low > 0
    with pytest.raises(ConfigError, match="0 or 1"):
        mcnemar([0, 2], [1, 1])


@pytest.mark.parametrize("n", [2, 3, 5, 20, 60, 300, 2000])
def test_paired_bootstrap_interval_matches_scipy(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    iters = 4000
    for trial in range(3):
        a = rng.normal(0, 1, n)
        b = a + rng.normal(0.1 * trial, rng.uniform(0.2, 2), n)
        ours = paired_bootstrap(a, b, iters=iters, seed=trial)
        d = b - a
        ref = stats.bootstrap((d,), np.mean, method="percentile", n_resamples=iters, random_state=trial)
        ref = ref.confidence_interval
        se = d.std(ddof=1) / np.sqrt(n)
        # Two independent Monte-Carlo percentile estimates: each end's sd is about 2.7 se / sqrt(iters).
        assert ours.ci_low == pytest.approx(ref.low, abs=0.3 * se + 1e-12)
        assert ours.ci_high == pytest.approx(ref.high, abs=0.3 * se + 1e-12)
        assert ours.diff == pytest.approx(d.mean())
        if n >= 60:  # the percentile interval is close to the analytic t interval on larger samples
            t = stats.t.ppf(0.975, n - 1) * se
            assert ours.ci_low == pytest.approx(d.mean() - t, abs=0.2 * se)
            assert ours.ci_high == pytest.approx(d.mean() + t, abs=0.2 * se)


def test_paired_bootstrap_p_value() -> None:
    rng = np.random.default_rng(7)
    a = rng.random(400)
    assert paired_bootstrap(a, a).p_value == 1.0
    tied = paired_bootstrap([0.5] * 10, [0.5] * 10)
    assert (tied.p_value, tied.ci_low, tied.ci_high) == (1.0, 0.0, 0.0)
    one = paired_bootstrap([0.2], [0.7])  # a single pair: every resample is that pair
    assert (one.diff, one.ci_low, one.ci_high, one.p_value) == pytest.approx((0.5, 0.5, 0.5, 0.0))
    planted = paired_bootstrap(a, a + 0.2 + rng.normal(0, 0.3, 400), iters=2000)
    assert planted.p_value < 0.01 and planted.significant
    null = paired_bootstrap(a, a + rng.normal(0, 0.3, 400), iters=2000, seed=1)
    assert null.p_value > 0.05 and not null.significant


def test_paired_bootstrap_is_seeded_and_refuses_bad_input() -> None:
    a, b = np.arange(50.0), np.arange(50.0)[::-1]
    assert paired_bootstrap(a, b, iters=300, seed=5) == paired_bootstrap(a, b, iters=300, seed=5)
    with pytest.raises(ConfigError, match="equally long"):
        paired_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(ConfigError, match="equally long"):
        mcnemar([], [])
