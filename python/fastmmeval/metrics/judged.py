"""Metrics scored by a judge model: they read the verdict the evaluator recorded, never call it.

- `judge_score`: LiveBench-style 0-10 grade against the reference and per-item criteria, reported
  on 0-100 (grade x 10).
- `llava_w`: LLaVA-Bench (in-the-wild) relative score: the judge rates the reference answer and the
  model's answer (1-10 each); the score is 100 x sum(answer ratings) / sum(reference ratings) over
  the judged docs. It can pass 100; `to_100` caps it there for the cross-benchmark average.
- `mmvet`: MM-Vet-style 0-1 correctness grade, reported on 0-100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics.base import JUDGE_VERDICT, METRICS, Metric


def judge_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """The judge's 0-10 grade on 0-100."""
    return 10.0 * float(fields[JUDGE_VERDICT])


def llava_w_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, float]:
    """The judge's ratings of the reference and of the answer."""
    verdict = fields[JUDGE_VERDICT]
    return {"reference": float(verdict["reference"]), "answer": float(verdict["answer"])}


def llava_w_relative(items: Sequence[Mapping[str, float]]) -> float:
    """100 x total answer rating / total reference rating (LLaVA-W's relative score)."""
    reference = sum(i["reference"] for i in items)
    return 100.0 * sum(i["answer"] for i in items) / reference if reference else float("nan")


def mmvet_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """The judge's 0-1 correctness grade on 0-100."""
    return 100.0 * float(fields[JUDGE_VERDICT])


def _on_100(value: float) -> float:
    return value


METRICS.add("judge_score", Metric("judge_score", judge_score, to_100=_on_100, judge="judge_score"))
METRICS.add("llava_w", Metric(
    "llava_w", llava_w_item, aggregate=llava_w_relative, stderr="bootstrap", to_100=lambda v: min(v, 100.0),
    judge="llava_w",
))  # fmt: skip
METRICS.add("mmvet", Metric("mmvet", mmvet_score, to_100=_on_100, judge="mmvet"))
