"""Parity fixtures of the document, chart and OCR benchmarks (rows from tests/test_tasks_doc.py)."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_doc import CHARTQA, DOCVQA, INFOVQA, OCRBENCH, chartqa_rows, docvqa_rows, infovqa_rows, ocrbench_rows

CASES = [
    ParityCase("chartqa", chartqa_rows, CHARTQA),
    ParityCase("docvqa_val", docvqa_rows, DOCVQA, extra={"1": ["Pau     l"]}),
    ParityCase("infovqa_val", infovqa_rows, INFOVQA, extra={"0": ["pin   terest"]}),
    ParityCase("ocrbench", ocrbench_rows, OCRBENCH),
]
