"""Parity fixtures of the multiple-choice benchmarks (rows from tests/test_tasks_mcq.py)."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_mcq import AI2D, SCIENCEQA, ai2d_rows, scienceqa_rows

CASES = [
    ParityCase("ai2d", ai2d_rows, AI2D),
    ParityCase("scienceqa_img", scienceqa_rows, SCIENCEQA),
]
