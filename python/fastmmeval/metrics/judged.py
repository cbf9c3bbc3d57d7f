"""The generic judge-scored metric: it reads the verdict the evaluator recorded, never calls the judge.

`judge_score`: a LiveBench-style 0-10 grade against the reference and per-item criteria, reported on
0-100 (grade x 10). Benchmark-specific judge metrics (MM-Vet's, LLaVA-Bench's, HallusionBench's) live
with their benchmarks in `tasks/families/`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics.base import JUDGE_VERDICT, METRICS, Metric, already_on_100


def judge_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """The judge's 0-10 grade on 0-100."""
    return 10.0 * float(fields[JUDGE_VERDICT])


METRICS.add("judge_score", Metric("judge_score", judge_score, to_100=already_on_100, judge="judge_score"))
