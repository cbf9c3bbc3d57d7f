"""Explainers of MathVista's own differences; a failed or unreadable judgment, which any judged
task may list, is `failed_judgments` or `unreadable_judgments` (differences/judged.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch, same_value
from fastmmeval.tasks.families.mathvista import EMPTY, get_most_similar
from fastmmeval.tasks.task import Task

MATHVISTA_KEY = "llm_as_judge_eval,none"


def _lmms_eval_mathvista(m: Mismatch, task: Task) -> float | None | bool:
    """lmms-eval's llm_as_judge_eval (mathvista_aggregate_results: rounded to 2 decimals, None for
    0) over our verdicts with its own two readings put back: a float-answer question is wrong (its
    rounding raises), an empty response is the choice closest to '' (multiple choice; else wrong).
    False where a doc has no verdict of ours (a failed judgment)."""
    docs = {r.id: r for r in task.doc_refs() if r.id in m.doc_ids}
    correct = 0
    for doc_id, sample in zip(m.doc_ids, m.ours_samples, strict=True):
        value, rule = sample["metrics"]["llm_as_judge_eval"], str(sample["extract_rule"])
        if value is None:
            return False
        if rule == EMPTY:
            fields = task.doc(docs[doc_id]).fields
            choices = [str(c) for c in fields.get("choices") or ()]
            right = fields["question_type"] == "multi_choice" and get_most_similar("", choices) == sample["target"][0]
        else:
            right = bool(value) and not rule.endswith("float")
        correct += right
    accuracy = round(correct / len(m.ours_samples) * 100, 2)
    return None if accuracy == 0 else accuracy


def _mathvista_reading(m: Mismatch, task: Task, shown: Callable[[dict[str, Any]], bool]) -> bool:
    """Whether one of our samples is one that lmms-eval reads otherwise (`shown`) and its value over
    our verdicts (`_lmms_eval_mathvista`) is the one it reported."""
    if m.kind not in ("score", "aggregate") or m.key != MATHVISTA_KEY or not any(map(shown, m.ours_samples)):
        return False
    theirs = _lmms_eval_mathvista(m, task)
    return theirs is not False and same_value(theirs, m.theirs)


@EXPLAINERS.register("float_precision")
def float_precision(m: Mismatch, task: Task) -> bool:
    """MathVista: lmms-eval scores every float-answer question wrong; shown by one we score right."""
    return _mathvista_reading(m, task, lambda s: bool(s["metrics"]["llm_as_judge_eval"]) and
                              str(s["extract_rule"]).endswith("float"))  # fmt: skip


@EXPLAINERS.register("empty_is_wrong")
def empty_is_wrong(m: Mismatch, task: Task) -> bool:
    """MathVista: an empty response is wrong here; lmms-eval takes the choice closest to '' for it."""
    return _mathvista_reading(m, task, lambda s: s["extract_rule"] == EMPTY)


@EXPLAINERS.register("zero_is_none")
def zero_is_none(m: Mismatch, task: Task) -> bool:
    """MathVista: no answer right is 0 here; lmms-eval's aggregation returns None for it."""
    return m.kind in ("score", "aggregate") and m.key == MATHVISTA_KEY and m.ours == 0 and m.theirs is None
