"""MMBench CircularEval: a question counts as right only if every rotation of its options is.

MMBench presents each question once per rotation of its options (lmms-lab/MMBench and
VLMEvalKit's TSVs store rotation k of question i as a row with `index` i + k * 1,000,000), and
VLMEvalKit / lmms-eval (`MMBench_Evaluator.eval_sub_data`) score the question 1 only when every
rotation's answer is its correct letter. Here an unparsed answer is wrong (never a random letter,
which lmms-eval falls back to after its judge fails), and every group present is counted, with or
without its rotation 0.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.metrics.base import METRICS, Metric, percent

ROTATION_STRIDE = 1_000_000


def circular_group(fields: Mapping[str, Any]) -> int | str:
    """The question a doc is a rotation of: the doc field `circular_group` when present (as a
    string), else the whole-number doc field `index` modulo 1,000,000."""
    explicit = fields.get("circular_group")
    if explicit is not None:
        return str(explicit)
    raw = fields.get("index")
    index = _whole(raw)
    if index is None:
        raise DocError(f"circular_accuracy: needs a whole-number doc field 'index' or a 'circular_group', got {raw!r}")
    return index % ROTATION_STRIDE


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        return int(value) if value.lstrip("-").isdigit() else None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    try:
        return operator.index(value)
    except TypeError:
        return None


def score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"group": the question, "correct": whether this rotation's answer is the target letter}."""
    return {"group": circular_group(fields), "correct": prediction is not None and prediction in targets}


def circular_accuracy(items: Sequence[Mapping[str, Any]]) -> float:
    """The fraction of groups whose rotations are all correct."""
    groups: dict[Any, bool] = {}
    for item in items:
        groups[item["group"]] = groups.get(item["group"], True) and bool(item["correct"])
    return sum(groups.values()) / len(groups) if groups else float("nan")


# to_100: a fraction of questions, so percent. The bootstrap resamples questions, not rows.
METRICS.add(
    "circular_accuracy",
    Metric("circular_accuracy", score, circular_accuracy, stderr="bootstrap", to_100=percent, cluster="group"),
)
