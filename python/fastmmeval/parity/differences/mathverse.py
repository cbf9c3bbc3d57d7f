"""Explainer of MathVerse's own difference (`tasks/builtin/judge/mathverse_testmini.yaml`): how the
judge's reply is read. A failed judge call is `failed_judgments` (differences/judged.py)."""

from __future__ import annotations

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.differences.judged import judgments
from fastmmeval.parity.mismatch import Mismatch
from fastmmeval.parity.peer import lmms_eval_module
from fastmmeval.tasks.task import Task

BINARY_PROMPT = "lmms_eval_binary@1"


@EXPLAINERS.register("judge_reply_reading")
def judge_reply_reading(m: Mismatch, task: Task) -> bool:
    """A reply to lmms-eval's binary prompt that lmms-eval's own reader (`parse_binary_response`:
    correct when the reply holds a "1") grades otherwise than we read it (its leading 1 or 0, or
    unreadable)."""
    if m.kind not in ("score", "aggregate"):
        return False
    parse = lmms_eval_module("llm_judge.utils").ResponseParser.parse_binary_response
    replies = [r for r in judgments(m) if r["prompt"] == BINARY_PROMPT and r["raw"] is not None]
    return any(r["value"] != parse(r["raw"], "0/1") for r in replies)
