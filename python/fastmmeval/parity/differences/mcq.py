"""Explainers of the multiple-choice benchmarks' differences (`tasks/families/mcq.py`)."""

from __future__ import annotations

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.harness import Mismatch
from fastmmeval.tasks.task import Task


@EXPLAINERS.register("image_rows_only")
def image_rows_only(m: Mismatch, task: Task) -> bool:
    """SEED-Bench: only the image rows are run, so lmms-eval's accuracy on its video rows
    (seed_video) is not reported."""
    return m.kind == "keys" and m.key == "seed_video,none" and ("data_type", "image") in task.config.where
