"""Explainers of the VQA benchmarks' differences."""

from __future__ import annotations

import re

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch
from fastmmeval.tasks.task import Task

COMMA_RUN = re.compile(r"\d,{2,}\d")


@EXPLAINERS.register("comma_run")
def comma_run(m: Mismatch, task: Task) -> bool:
    """lmms-eval's (mmf's) punctuation rule also fires on a run of commas between digits ("1,,2")."""
    return m.kind in ("score", "aggregate") and any(COMMA_RUN.search(r) for r in m.responses)


@EXPLAINERS.register("numpy_lowercase")
def numpy_lowercase(m: Mismatch, task: Task) -> bool:
    """lmms-eval lower-cases in a fixed-width numpy array, which cuts the two-character lower case of 'İ'."""
    return m.kind in ("score", "aggregate") and any("İ" in r for r in m.responses)
