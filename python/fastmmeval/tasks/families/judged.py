"""Benchmarks lmms-eval 0.7.3 scores with a GPT judge: MM-Vet and LLaVA-Bench (in-the-wild), graded
by the run's judge (`--judge_model` / `--judge_config`) with their own judge prompts (`mmvet_official`,
and LLaVA's review prompt with the image captions, `llava_bench_review`); and MathVista, whose answers
the judge extracts with MathVista's extraction prompt when the rules cannot (`mathvista_judge`).

The metrics here read the judges' verdicts and add the breakdowns lmms-eval reports (LLaVA-Bench
per question category) or logs (MM-Vet per capability)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.base import mean
from fastmmeval.metrics.judged import llava_w_item, llava_w_relative, mmvet_score
from fastmmeval.tasks.processors import DOC_PROCESSORS
from fastmmeval.tasks.render import format_options

MMVET_CAPABILITIES = ("rec", "ocr", "know", "gen", "spat", "math")
LLAVA_W_CATEGORIES = ("conv", "detail", "complex")


def _on_100(value: float) -> float:
    return value


def _text(fields: Mapping[str, Any], name: str, benchmark: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str):
        raise DocError(f"{benchmark}: doc field {name!r} is missing or not a string")
    return value


# MM-Vet ------------------------------------------------------------------------------------------


@DOC_PROCESSORS.register("mmvet")
def mmvet(row: dict[str, Any]) -> dict[str, Any]:
    """What MM-Vet's judge is shown: the bare question (without the step-by-step instruction the
    model gets) and the ground truth with spaces around <AND> / <OR>, as lmms-eval builds its query."""
    answer = _text(row, "answer", "mmvet").replace("<AND>", " <AND> ").replace("<OR>", " <OR> ")
    return {"judge_question": _text(row, "question", "mmvet"), "judge_answer": answer}


def mmvet_capability_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The judge's 0-1 grade on 0-100 (`mmvet`) and the doc's capabilities (`capability`, e.g. "rec,ocr")."""
    capabilities = [c.strip() for c in _text(fields, "capability", "mmvet").split(",")]
    return {"score": mmvet_score(prediction, targets, fields), "capabilities": capabilities}


def mmvet_capability_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """`score`: the mean grade over all docs (lmms-eval's gpt_eval_score); and per capability of
    MMVET_CAPABILITIES that some doc needs, the mean grade of the docs that need it (the per-capability
    scores lmms-eval logs)."""
    out = {"score": mean([i["score"] for i in items])}
    for capability in MMVET_CAPABILITIES:
        scores = [i["score"] for i in items if capability in i["capabilities"]]
        if scores:
            out[capability] = mean(scores)
    return out


METRICS.add("mmvet_capabilities", Metric(
    "mmvet_capabilities", mmvet_capability_item, mmvet_capability_aggregate, stderr="bootstrap", to_100=_on_100,
    headline="score", judge="mmvet_official",
))  # fmt: skip


# LLaVA-Bench (in-the-wild) -----------------------------------------------------------------------


@DOC_PROCESSORS.register("llava_bench")
def llava_bench(row: dict[str, Any]) -> dict[str, Any]:
    """What LLaVA-Bench's judge is shown: the question and, as context, the image's captions (one
    per line), as lmms-eval builds its review query."""
    captions = row.get("caption") or []
    context = "\n".join(captions) if isinstance(captions, list) else str(captions)
    return {"judge_question": _text(row, "question", "llava_w"), "judge_context": context}


def llava_w_category_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The judge's ratings of the reference and of the answer, and the question's `category`."""
    return {**llava_w_item(prediction, targets, fields), "category": _text(fields, "category", "llava_w")}


def llava_w_category_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """`all`: LLaVA-W's relative score over every judged doc; and for each of LLAVA_W_CATEGORIES
    that has docs, the relative score over that category's docs."""
    out = {"all": llava_w_relative(items)}
    for category in LLAVA_W_CATEGORIES:
        members = [i for i in items if i["category"] == category]
        if members:
            out[category] = llava_w_relative(members)
    return out


METRICS.add("llava_w_categories", Metric(
    "llava_w_categories", llava_w_category_item, llava_w_category_aggregate, stderr="bootstrap",
    to_100=lambda v: min(v, 100.0), headline="all", judge="llava_bench_review",
))  # fmt: skip


# MathVista -------------------------------------------------------------------------------------

_FORMAT_HINTS = {
    "integer": "Answer the question using a single integer number.",
    ("float", 1): "Answer the question using a single floating-point number with one decimal place.",
    ("float", 2): "Answer the question using a single floating-point number with two decimal places.",
    "list": "Answer the question using a Python list.",
}


@DOC_PROCESSORS.register("mathvista_format_prompt")
def mathvista_format_prompt(row: dict[str, Any]) -> dict[str, str]:
    """`format_query`: lmms-eval's zero-shot "format-prompt" query (task mathvista_testmini_format):
    the question with its unit, the choices lettered "A. ...", and the answer-format hint; and
    `judge_question`: the dataset's own `query`, which the answer-extraction judge is shown."""
    question_type, answer_type = row["question_type"], row["answer_type"]
    if question_type == "multi_choice":
        hint = "Answer with the option's letter from the given choices directly."
    else:
        key = ("float", row.get("precision")) if answer_type == "float" else answer_type
        hint = _FORMAT_HINTS.get(key)
        if hint is None:
            raise DocError(
                f"mathvista: no format hint for answer_type {answer_type!r}, precision {row.get('precision')!r}"
            )
    question = str(row["question"]) + (f" (Unit: {row['unit']})" if row.get("unit") else "")
    choices = format_options([str(c) for c in row["choices"]]) if row.get("choices") else ""
    format_query = "\n".join(part for part in (question, choices, hint) if part).strip()
    return {"format_query": format_query, "judge_question": str(row.get("query") or "")}


def mathvista_correct(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """100 when the normalized answer equals the reference after stripping both (MathVista's
    `safe_equal`), else 0; unparsed is wrong."""
    return 100.0 * (prediction is not None and any(prediction.strip() == t.strip() for t in targets))


METRICS.add("mathvista_accuracy", Metric("mathvista_accuracy", mathvista_correct, to_100=_on_100))
