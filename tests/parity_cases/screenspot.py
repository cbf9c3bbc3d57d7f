"""Parity fixtures of ScreenSpot (rows and answers from tests/test_tasks_screenspot.py)."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_screenspot import (
    DOCS,
    IDS,
    SCREENSPOT_REC_TEST,
    SCREENSPOT_REG_TEST,
    rec_responses,
    screenspot_rec_test_rows,
    screenspot_reg_test_rows,
)

# lmms-eval's CIDEr runs Java's PTBTokenizer on every scoring: three docs keep the check short.
REG_DOCS = 3


def _reg_rows() -> list[dict]:
    return screenspot_reg_test_rows()[:REG_DOCS]


CASES = [
    ParityCase(
        "screenspot_rec_test",
        screenspot_rec_test_rows,
        SCREENSPOT_REC_TEST,
        extra={i: rec_responses(bbox) for i, (*_, bbox) in zip(IDS, DOCS, strict=True)},
    ),
    ParityCase(
        "screenspot_reg_test",
        _reg_rows,
        SCREENSPOT_REG_TEST,
        extra={"2": ["click <File> in the menu bar"]},  # a tag-like word: ptb_tokenizer
    ),
]
