"""Parity fixtures of the multiple-choice benchmarks (rows from tests/test_tasks_mcq.py)."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_mcq import AI2D, SCIENCEQA, SEEDBENCH, ai2d_rows, scienceqa_rows, seedbench_rows

CASES = [
    ParityCase("ai2d", ai2d_rows, AI2D),
    ParityCase("ai2d_lite", ai2d_rows, AI2D),
    ParityCase("scienceqa_img", scienceqa_rows, SCIENCEQA),
    # A model that writes the role tag of its turn first: empty once cut at the stop string, "A" read whole.
    ParityCase("seedbench", seedbench_rows, SEEDBENCH, extra={"101672": ["ASSISTANT: A"]}),
    ParityCase("seedbench_lite", seedbench_rows, SEEDBENCH, extra={"101672": ["ASSISTANT: A"]}),
]
