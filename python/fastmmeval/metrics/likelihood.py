"""Multiple choice by likelihood (`mc_mode: ppl`), scored as lm-evaluation-harness scores it: `acc` picks the
option whose continuation has the highest summed log-probability, `acc_norm` the one with the highest
log-probability per UTF-8 byte of the option's text (so a long option does not lose for being long)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract.rules import LETTERS
from fastmmeval.metrics.base import METRICS, Metric

# The field under which the likelihood metrics find a doc's `OptionLikelihoods`.
OPTION_LIKELIHOODS = "_option_likelihoods"
LIKELIHOOD_METRICS = ("acc", "acc_norm")


@dataclass(frozen=True)
class OptionLikelihoods:
    """The summed log-probability of each option's continuation, beside the option texts."""

    logprobs: tuple[float, ...]
    options: tuple[str, ...]

    def best(self, per_byte: bool) -> int:
        """Index of the option with the highest summed log-probability, or with `per_byte` the highest
        log-probability per UTF-8 byte of its text; the first of equals (as numpy's argmax)."""
        if len(self.logprobs) != len(self.options):
            raise DocError(f"{len(self.logprobs)} log-probabilities for {len(self.options)} options")
        scores = [lp / len(o.encode()) if per_byte else lp for lp, o in zip(self.logprobs, self.options, strict=True)]
        return max(range(len(scores)), key=scores.__getitem__)


def _likelihood_metric(name: str, per_byte: bool) -> Metric:
    def score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
        scores = fields.get(OPTION_LIKELIHOODS)
        if not isinstance(scores, OptionLikelihoods):
            raise DocError(f"metric {name} scores options by likelihood: it is reported in ppl mode only")
        return float(LETTERS[scores.best(per_byte)] in targets)

    return Metric(name, score)


METRICS.add("acc", _likelihood_metric("acc", per_byte=False))
METRICS.add("acc_norm", _likelihood_metric("acc_norm", per_byte=True))
