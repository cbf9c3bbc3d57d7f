"""Explainers of the WebSRC differences (`tasks/builtin/web/websrc_val.yaml`)."""

from __future__ import annotations

from fastmmeval.engine.sampling import cut_at_stop
from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch, same_value
from fastmmeval.tasks.task import Task

# lmms-eval's websrc_aggregate_results returns round(f1, 3), for one question as for many.
F1_DECIMALS = 3


@EXPLAINERS.register("f1_rounded")
def f1_rounded(m: Mismatch, task: Task) -> bool:
    """lmms-eval rounds websrc_squad_f1 to 3 decimals in every run: our value so rounded is
    lmms-eval's on the same responses cut at our stop strings (a response can show both)."""
    if m.kind not in ("score", "aggregate") or m.theirs_with is None or not isinstance(m.ours, float):
        return False
    stops = task.config.generation.stop

    def as_ours(response: str) -> str:
        cut = cut_at_stop(response, stops)
        return response if cut is None else cut

    return same_value(round(m.ours, F1_DECIMALS), m.theirs_with(as_ours))
