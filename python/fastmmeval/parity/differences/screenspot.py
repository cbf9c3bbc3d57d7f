"""Explainers of the ScreenSpot differences (`tasks/families/screenspot.py`); its region-captioning
task's tokenizer difference is the captioning benchmarks' (`differences/caption.py`)."""

from __future__ import annotations

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch, same_value
from fastmmeval.tasks.families.screenspot import BOX
from fastmmeval.tasks.task import Task

# A box lmms-eval reads that misses every target (outside the screen): how it would score an
# answer without a box if it scored it wrong, as we do.
OFF_SCREEN = "[-1, -1, -1, -1]"


def _scored(m: Mismatch) -> bool:
    return m.kind in ("score", "aggregate") and m.theirs_with is not None


@EXPLAINERS.register("unparsed_is_wrong")
def unparsed_is_wrong(m: Mismatch, task: Task) -> bool:
    """An answer without a box scores 0 here; lmms-eval scores it as the box [0, 0, 0, 0]."""
    if not _scored(m) or all(BOX.search(r) for r in m.responses):
        return False
    return same_value(m.theirs_with(lambda r: r if BOX.search(r) else OFF_SCREEN), m.ours)  # type: ignore[misc]
