"""Document, chart and OCR benchmarks: ChartQA (relaxed accuracy, overall and per question
source), DocVQA and InfographicVQA (ANLS, `metrics/vqa.py`) and OCRBench (answer contained in
the response, counted per category), scored as lmms-eval 0.7.3 scores them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.base import mean
from fastmmeval.metrics.vqa import relaxed_accuracy

# ChartQA's `type` column: questions written by people, and ones generated from chart summaries.
CHARTQA_HUMAN = "human_test"
CHARTQA_TYPES = (CHARTQA_HUMAN, "augmented_test")


def chartqa_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"score": relaxed accuracy (1.0 or 0.0, `relaxed_accuracy`), "human": whether the doc's
    `type` is human_test} for one ChartQA question."""
    kind = fields.get("type")
    if kind not in CHARTQA_TYPES:
        raise DocError(f"chartqa: field 'type' must be one of {', '.join(CHARTQA_TYPES)}, got {kind!r}")
    return {"score": relaxed_accuracy(prediction, targets), "human": kind == CHARTQA_HUMAN}


def chartqa_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """overall, human_split and augmented_split: the mean relaxed accuracy over all questions,
    the human-written ones and the augmented ones (lmms-eval's relaxed_overall,
    relaxed_human_split, relaxed_augmented_split); a split without questions is left out, as
    lmms-eval reports no value for it."""
    out = {"overall": mean([item["score"] for item in items])}
    for name, human in (("human_split", True), ("augmented_split", False)):
        scores = [item["score"] for item in items if item["human"] == human]
        if scores:
            out[name] = mean(scores)
    return out


# Headline: overall relaxed accuracy, a fraction, so percent on 0-100.
METRICS.add(
    "chartqa_relaxed",
    Metric("chartqa_relaxed", chartqa_score, chartqa_aggregate, stderr="bootstrap", headline="overall"),
)

# OCRBench's categories (`question_type`), in the order of its report; the first six make up
# "Text Recognition".
OCRBENCH_RECOGNITION = (
    "Regular Text Recognition", "Irregular Text Recognition", "Artistic Text Recognition",
    "Handwriting Recognition", "Digit String Recognition", "Non-Semantic Text Recognition",
)  # fmt: skip
OCRBENCH_CATEGORIES = (
    *OCRBENCH_RECOGNITION, "Scene Text-centric VQA", "Doc-oriented VQA", "Key Information Extraction",
    "Handwritten Mathematical Expression Recognition",
)  # fmt: skip
# The sub-dataset of handwritten formulas, matched with spaces removed and case kept.
OCRBENCH_FORMULAS = "HME100k"


def fold_fullwidth_ascii(text: str) -> str:
    """Full-width ASCII (U+FF01..U+FF5E) as ASCII and the ideographic space as a space; nothing
    else changes (unlike NFKC)."""
    return "".join(chr(ord(c) - 0xFEE0) if 0xFF01 <= ord(c) <= 0xFF5E else " " if c == "\u3000" else c for c in text)


def ocrbench_match(prediction: str, answer: str, dataset: str) -> bool:
    """OCRBench's rule: the answer is contained in the prediction, both stripped and with
    newlines as spaces; for HME100k formulas with every space removed (case kept), otherwise
    full-width ASCII folded and lower-cased."""
    if dataset == OCRBENCH_FORMULAS:
        answer, prediction = (t.strip().replace("\n", " ").replace(" ", "") for t in (answer, prediction))
    else:
        answer, prediction = (fold_fullwidth_ascii(t).lower().strip().replace("\n", " ") for t in (answer, prediction))
    return answer in prediction


def ocrbench_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"category": the doc's `question_type`, "score": 1 when `ocrbench_match` holds for any
    answer, else 0} for one OCRBench question; the prediction is stripped first, None scores 0.
    Note that an empty answer is contained in every prediction."""
    category, dataset = fields.get("question_type"), fields.get("dataset")
    if category not in OCRBENCH_CATEGORIES:
        raise DocError(f"ocrbench: field 'question_type' is not an OCRBench category: {category!r}")
    if not isinstance(dataset, str):
        raise DocError(f"ocrbench: field 'dataset' must be a string, got {dataset!r}")
    hit = prediction is not None and any(ocrbench_match(prediction.strip(), t, dataset) for t in targets)
    return {"category": category, "score": int(hit)}


def _key(category: str) -> str:
    """A category as a result key: "Scene Text-centric VQA" -> "scene_text_centric_vqa"."""
    return re.sub(r"[^a-z0-9]+", "_", category.lower()).strip("_")


def ocrbench_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """accuracy (questions right / questions scored, lmms-eval's ocrbench_accuracy), then the
    counts of OCRBench's report: final_score (questions right, of 1000), text_recognition (of
    300, the six recognition categories) and one count per category (e.g.
    regular_text_recognition, of 50; handwritten_mathematical_expression_recognition, of 100)."""
    counts = dict.fromkeys(OCRBENCH_CATEGORIES, 0)
    for item in items:
        counts[item["category"]] += item["score"]
    right = sum(counts.values())
    out: dict[str, float] = {"accuracy": right / len(items) if items else float("nan"), "final_score": right}
    out["text_recognition"] = sum(counts[c] for c in OCRBENCH_RECOGNITION)
    out.update({_key(c): counts[c] for c in OCRBENCH_CATEGORIES})
    return out


# Headline: accuracy, a fraction, so percent on 0-100.
METRICS.add(
    "ocrbench",
    Metric("ocrbench", ocrbench_score, ocrbench_aggregate, stderr="bootstrap", headline="accuracy"),
)
