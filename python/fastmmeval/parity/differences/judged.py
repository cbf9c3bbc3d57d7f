"""Explainers of what every judged task may list: a judge call that failed, or a reply that could
not be read. Both look at the judgments in our scored samples (the deciding judge's raw reply, the
value read from it, the error)."""

from __future__ import annotations

from typing import Any

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch
from fastmmeval.tasks.task import Task


def judgments(m: Mismatch) -> list[dict[str, Any]]:
    """The deciding (first) judge's record of every judgment in our samples of the mismatch."""
    return [next(iter(by_judge.values())) for s in m.ours_samples for by_judge in s.get("judgments", {}).values()]


@EXPLAINERS.register("failed_judgments")
def failed_judgments(m: Mismatch, task: Task) -> bool:
    """A judge call failed (no reply): the doc is left out of our score; lmms-eval scores it anyway
    (0, -1 or a reading of its own, as the task file says)."""
    failed = any(r["raw"] is None and r["error"] is not None for r in judgments(m))
    return m.kind in ("score", "aggregate") and failed


@EXPLAINERS.register("unreadable_judgments")
def unreadable_judgments(m: Mismatch, task: Task) -> bool:
    """The judge replied, but its reply could not be read (no rating, or one out of range; an empty
    extraction): the doc is left out of our score; lmms-eval reads a score from it anyway."""
    unreadable = any(r["raw"] is not None and r["error"] is not None for r in judgments(m))
    return m.kind in ("score", "aggregate") and unreadable
