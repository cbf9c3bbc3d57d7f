"""Answer extraction rules and the match metrics."""

import pytest

from fastmmeval.extract import EXTRACTORS
from fastmmeval.metrics import METRICS, mean_with_stderr

OPTIONS = ["cat", "rocket", "coffee cup", "horse"]


@pytest.mark.parametrize(
    ("text", "letter", "rule"),
    [
        ("B", "B", "letter"),
        ("(C)", "C", "letter"),
        ("D. horse", "D", "letter"),
        ("The answer is B.", "B", "answer_is+letter"),
        ("It is a rocket", "B", "option_text"),
        ("A cat sits on a mat", "A", "option_text"),
        ("A or B", None, "unparsed"),
        ("I cannot tell", None, "unparsed"),
    ],
)
def test_option_letters_are_read_and_never_guessed(text: str, letter: str | None, rule: str) -> None:
    got = EXTRACTORS.get("option_letter")(text, OPTIONS)
    assert (got.value, got.rule) == (letter, rule)


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("yes_no", "Yes, there is.", "yes"),
        ("yes_no", "no", "no"),
        ("yes_no", "Maybe.", None),
        ("number", "The answer is 1,234.5%", "1234.5%"),
        ("number", "seven", "7"),
        ("number", "none here", None),
        ("first_word", "  Cat. It sleeps.", "Cat"),
    ],
)
def test_simple_extractors(name: str, text: str, value: str | None) -> None:
    assert EXTRACTORS.get(name)(text, []).value == value


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
