"""Parity fixtures of the multiple-choice benchmarks (rows from tests/test_tasks_mcq.py)."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_mcq import AI2D, ai2d_rows

CASES = [
    ParityCase("ai2d", ai2d_rows, AI2D),
]
