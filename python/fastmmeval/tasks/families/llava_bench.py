"""LLaVA-Bench (in-the-wild) as lmms-eval 0.7.3 scores it: the run's judge rates the reference answer
and the model's answer (1-10 each) with LLaVA's review prompt and the image's captions
(`llava_bench_review`); `llava_w` is 100 x sum(answer ratings) / sum(reference ratings) over the
judged docs (it can pass 100; `to_100` caps it there for the cross-benchmark average), and
`llava_w_categories` adds the per-category scores lmms-eval reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics import JUDGE_VERDICT, METRICS, Metric
from fastmmeval.tasks.processors import DOC_PROCESSORS, text_field

LLAVA_W_CATEGORIES = ("conv", "detail", "complex")


def llava_w_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, float]:
    """The judge's ratings of the reference and of the answer."""
    verdict = fields[JUDGE_VERDICT]
    return {"reference": float(verdict["reference"]), "answer": float(verdict["answer"])}


def llava_w_relative(items: Sequence[Mapping[str, float]]) -> float:
    """100 x total answer rating / total reference rating (LLaVA-W's relative score)."""
    reference = sum(i["reference"] for i in items)
    return 100.0 * sum(i["answer"] for i in items) / reference if reference else float("nan")


METRICS.add("llava_w", Metric(
    "llava_w", llava_w_item, aggregate=llava_w_relative, stderr="bootstrap", to_100=lambda v: min(v, 100.0),
    judge="llava_w",
))  # fmt: skip


@DOC_PROCESSORS.register("llava_bench")
def llava_bench(row: dict[str, Any]) -> dict[str, Any]:
    """What LLaVA-Bench's judge is shown: the question and, as context, the image's captions (one
    per line), as lmms-eval builds its review query."""
    captions = row.get("caption") or []
    context = "\n".join(captions) if isinstance(captions, list) else str(captions)
    return {"judge_question": text_field(row, "question", "llava_w"), "judge_context": context}


def llava_w_category_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The judge's ratings of the reference and of the answer, and the question's `category`."""
    return {**llava_w_item(prediction, targets, fields), "category": text_field(fields, "category", "llava_w")}


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
