"""Explainers of the document and OCR benchmarks' differences."""

from __future__ import annotations

import re

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch
from fastmmeval.tasks.task import Task

OCRBENCH_SIZE = 1000
_UNEVEN = re.compile(r"\s{2,}|ß")


@EXPLAINERS.register("anls_raw_length")
def anls_raw_length(m: Mismatch, task: Task) -> bool:
    """lmms-eval's ANLS divides by the raw length, which differs from the normalized one only where
    a response or reference holds a whitespace run or a character whose upper case is longer."""
    texts = [*m.responses, *(t for s in m.ours_samples for t in s.get("target", []))]
    return m.kind in ("score", "aggregate") and any(_UNEVEN.search(t.strip()) for t in texts)


@EXPLAINERS.register("per_1000")
def per_1000(m: Mismatch, task: Task) -> bool:
    """lmms-eval's OCRBench accuracy divides the questions right by 1000, not by the questions scored."""
    n = len(m.ours_samples)
    return m.key.startswith("ocrbench_accuracy,") and isinstance(m.ours, float) and isinstance(m.theirs, float) \
        and abs(m.ours * n / OCRBENCH_SIZE - m.theirs) <= 1e-9
