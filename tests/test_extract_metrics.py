"""The match metrics (extraction is tested in test_extract.py)."""

import pytest

from fastmmeval.metrics import METRICS, mean_with_stderr


def test_exact_match_normalizes_case_space_and_punctuation_and_accepts_any_target() -> None:
    em = METRICS.get("exact_match").score
    assert em("  Cat. ", ["dog", "cat"]) == 1.0
    assert em("cats", ["cat"]) == 0.0
    assert em(None, ["cat"]) == 0.0


def test_mean_stderr_is_the_analytic_standard_error() -> None:
    mean, se = mean_with_stderr([1.0, 0.0, 1.0, 0.0])
    assert mean == 0.5 and se == pytest.approx((1 / 3) ** 0.5 / 2)


def test_unknown_metric_suggests_the_close_name() -> None:
    from fastmmeval.errors import ConfigError

    with pytest.raises(ConfigError, match="did you mean exact_match"):
        METRICS.get("exact_mach")
