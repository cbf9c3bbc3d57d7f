"""Explainers of the MathVerse differences (`tasks/builtin/judge/mathverse_testmini.yaml`): what
becomes of a failed judge call and how the judge's reply is read. Both look at the judgments in our
scored samples (the deciding judge's raw reply, the value read from it, the error)."""

from __future__ import annotations

from typing import Any

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.harness import Mismatch
from fastmmeval.parity.peer import lmms_eval_module
from fastmmeval.tasks.task import Task

BINARY_PROMPT = "lmms_eval_binary@1"


def _judgments(m: Mismatch) -> list[dict[str, Any]]:
    """The deciding (first) judge's record of every judgment in our samples of the mismatch."""
    return [next(iter(by_judge.values())) for s in m.ours_samples for by_judge in s.get("judgments", {}).values()]


@EXPLAINERS.register("failed_judgments")
def failed_judgments(m: Mismatch, task: Task) -> bool:
    """A judge call failed (no reply): the doc is left out of our score; lmms-eval scores it 0."""
    failed = any(r["raw"] is None and r["error"] is not None for r in _judgments(m))
    return m.kind in ("score", "aggregate") and failed


@EXPLAINERS.register("judge_reply_reading")
def judge_reply_reading(m: Mismatch, task: Task) -> bool:
    """A reply to lmms-eval's binary prompt that lmms-eval's own reader (`parse_binary_response`:
    correct when the reply holds a "1") grades otherwise than we read it (its leading 1 or 0, or
    unreadable)."""
    if m.kind not in ("score", "aggregate"):
        return False
    parse = lmms_eval_module("llm_judge.utils").ResponseParser.parse_binary_response
    replies = [r for r in _judgments(m) if r["prompt"] == BINARY_PROMPT and r["raw"] is not None]
    return any(r["value"] != parse(r["raw"], "0/1") for r in replies)
