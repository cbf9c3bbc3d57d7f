"""Parity fixture of MP-DocVQA (rows from tests/test_tasks_multidocvqa.py)."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_multidocvqa import MULTIDOCVQA_VAL, multidocvqa_val_rows

CASES = [
    ParityCase("multidocvqa_val", multidocvqa_val_rows, MULTIDOCVQA_VAL),
]
