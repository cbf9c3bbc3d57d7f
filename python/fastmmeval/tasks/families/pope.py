"""POPE (object hallucination, yes/no questions) as lmms-eval 0.7.3 runs it: the stripped question
(`question_stripped`), lmms-eval's literal yes/no reading (`yes_no_exact`) or the official one
(`yes_no_pope`), and accuracy, precision, recall, F1 and yes ratio as the official POPE evaluation
(RUCAIBox/POPE `evaluate.py`, LLaVA's `eval_pope.py`) computes them (`pope`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.metrics.base import METRICS, Metric
from fastmmeval.tasks.processors import DOC_PROCESSORS

_NEGATIONS = frozenset({"No", "no", "not"})


@DOC_PROCESSORS.register("question_stripped")
def question_stripped(row: dict[str, Any]) -> dict[str, str]:
    """`question_stripped`: the question without surrounding whitespace (lmms-eval's POPE prompt)."""
    return {"question_stripped": str(row["question"]).strip()}


@EXTRACTORS.register("yes_no_exact")
def yes_no_exact(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """'yes' or 'no' when the whole answer, lower-cased and stripped, is that word (lmms-eval's
    POPE comparison); anything else ("Yes.", "No, there is none") is unparsed, scored wrong."""
    answer = text.lower().strip()
    return Extraction(answer, "exact_yes_no") if answer in ("yes", "no") else Extraction(None, UNPARSED)


@EXTRACTORS.register("yes_no_pope")
def yes_no_pope(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """POPE's reading, as the official evaluation (RUCAIBox/POPE `evaluate.py`, copied by LLaVA's
    `eval_pope.py`): keep the text before the first '.', drop commas, split on single spaces;
    the word 'No', 'no' or 'not' means 'no' (rule `pope_no_word`), anything else is 'yes' (rule
    `pope_default_yes`, so hedges and refusals count as yes, as upstream).

    The response is stripped first (LLaVA writes stripped answers); an empty response is unparsed
    instead of upstream's 'yes'. Case and word boundaries are upstream's: 'NO', 'Nope',
    'No!' and "isn't" read as yes."""
    answer = text.strip()
    if not answer:
        return Extraction(None, UNPARSED)
    value = pope_answer(answer)
    return Extraction(value, "pope_no_word" if value == "no" else "pope_default_yes")


def pope_answer(text: str) -> str:
    """The official reading of an answer: keep the text before the first '.', delete commas,
    split on single spaces; "no" when a word is exactly "No", "no" or "not" (case-sensitive, so
    "NO" and "Not" read as yes), otherwise "yes" (also for an empty or off-topic answer)."""
    words = text.split(".", 1)[0].replace(",", "").split(" ")
    return "no" if _NEGATIONS.intersection(words) else "yes"


def pope_label(target: str) -> str:
    """The ground-truth label, "yes" or "no" (case and surrounding whitespace ignored); DocError otherwise."""
    label = target.strip().lower()
    if label not in ("yes", "no"):
        raise DocError(f"pope: the target must be yes or no, got {target!r}")
    return label


def pope_score(
    prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """{"prediction": "yes" | "no" | "other", "label": "yes" | "no"} for one question; "other"
    only for an answer the extractor could not parse (None)."""
    if len(targets) != 1:
        raise DocError(f"pope: expected one target, got {len(targets)}")
    return {"prediction": "other" if prediction is None else pope_answer(prediction), "label": pope_label(targets[0])}


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def pope_aggregate(items: Sequence[Mapping[str, str]]) -> dict[str, float]:
    """accuracy, precision, recall, f1_score and yes_ratio (the share of *predictions* that are
    yes), all in [0, 1]; a ratio with a zero denominator is 0.

    "yes" is the positive class. An "other" prediction is wrong for accuracy, a miss (false
    negative) when the label is yes, and never a positive. The official script has no "other":
    it reads every answer as yes or no (`pope_answer`).

    Deliberate differences from lmms-eval 0.7.3 (`lmms_eval/tasks/pope/utils.py`): its
    `pope_yes_ratio` is the share of *ground-truth* labels that are yes (0.5 on the balanced
    splits whatever the model says), and it compares the lower-cased, stripped answer with
    "yes"/"no" literally, so "Yes." or "No, there is no dog." are wrong for accuracy and left out
    of precision and recall, where the official script reads them as yes and no.
    """
    tp = fp = tn = fn = yes = 0
    for item in items:
        predicted, label = item["prediction"], item["label"]
        yes += predicted == "yes"
        if label == "yes":
            tp += predicted == "yes"
            fn += predicted != "yes"
        else:
            fp += predicted == "yes"
            tn += predicted == "no"
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return {
        "accuracy": _ratio(tp + tn, len(items)),
        "precision": precision,
        "recall": recall,
        "f1_score": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "yes_ratio": _ratio(yes, len(items)),
    }


# Headline: F1 (as LLaVA-1.5 and VLMEvalKit report POPE), a fraction, so percent on 0-100.
METRICS.add("pope", Metric("pope", pope_score, pope_aggregate, stderr="bootstrap", headline="f1_score"))
