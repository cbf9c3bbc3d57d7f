"""Parity fixtures of the document, chart and OCR benchmarks (rows from tests/test_tasks_doc.py)."""

from __future__ import annotations

from pathlib import Path

from parity_case import ParityCase
from test_tasks_doc import CHARTQA, DOCVQA, INFOVQA, OCRBENCH, chartqa_rows, docvqa_rows, infovqa_rows, ocrbench_rows

from fastmmeval.parity import PeerTask
from fastmmeval.parity.peer import Fresh
from fastmmeval.tasks.families.doc import OCRBENCH_CATEGORIES


def ocrbench_peer() -> PeerTask:
    """lmms-eval's ocrbench with its running per-category totals zeroed for each aggregation and its
    report file written to a scratch folder (it takes the output path from the run's args)."""
    peer = PeerTask.load("ocrbench")
    peer.patches["utils.OCRBench_score"] = Fresh(lambda: dict.fromkeys(OCRBENCH_CATEGORIES, 0))
    peer.patches["utils.generate_submission_file"] = lambda name, args, subpath="": str(Path("/dev/null"))
    return peer


CASES = [
    ParityCase("chartqa", chartqa_rows, CHARTQA),
    ParityCase("docvqa_val", docvqa_rows, DOCVQA, extra={"1": ["Pau     l"]}),
    ParityCase("infovqa_val", infovqa_rows, INFOVQA, extra={"0": ["pin   terest"]}),
    ParityCase("ocrbench", ocrbench_rows, OCRBENCH, peer=ocrbench_peer),
]
