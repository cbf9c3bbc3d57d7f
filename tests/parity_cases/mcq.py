"""Parity fixtures of the multiple-choice benchmarks (rows from tests/test_tasks_mcq.py)."""

from __future__ import annotations

import test_tasks_mcq as t
from parity_case import ParityCase

# A model that writes the role tag of its turn first: empty once cut at the stop string, "A" read whole.
ROLE_TAG_FIRST = {"101672": ["ASSISTANT: A"]}

CASES = [
    ParityCase("ai2d", t.ai2d_rows, t.AI2D),
    ParityCase("ai2d_lite", t.ai2d_rows, t.AI2D),
    ParityCase("scienceqa_img", t.scienceqa_rows, t.SCIENCEQA),
    ParityCase("seedbench", t.seedbench_rows, t.SEEDBENCH, extra=ROLE_TAG_FIRST),
    ParityCase("seedbench_lite", t.seedbench_rows, t.SEEDBENCH, extra=ROLE_TAG_FIRST),
    ParityCase("realworldqa", t.realworldqa_rows, t.REALWORLDQA),
    ParityCase("mmstar", t.mmstar_rows, t.MMSTAR),
]
