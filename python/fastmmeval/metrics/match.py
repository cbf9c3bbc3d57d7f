"""Exact-match style metrics."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics.base import METRICS, Metric


def normalize(text: str) -> str:
    """Lower-case, collapse whitespace, drop surrounding punctuation."""
    return re.sub(r"\s+", " ", text.lower()).strip(" .,;:!?\"'")


def exact_match(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """1.0 when the normalized prediction equals any normalized target."""
    if prediction is None:
        return 0.0
    return float(any(normalize(prediction) == normalize(t) for t in targets))


def accuracy(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """1.0 when the prediction (an option letter) is the target letter."""
    return float(prediction is not None and prediction in targets)


METRICS.add("exact_match", Metric("exact_match", exact_match))
METRICS.add("accuracy", Metric("accuracy", accuracy))
