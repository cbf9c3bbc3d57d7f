"""Parity fixture of WebSRC (rows from tests/test_tasks_websrc.py)."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_websrc import WEBSRC_VAL, websrc_val_rows

CASES = [
    ParityCase("websrc_val", websrc_val_rows, WEBSRC_VAL),
]
