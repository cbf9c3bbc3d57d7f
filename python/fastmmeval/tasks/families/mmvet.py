"""MM-Vet as lmms-eval 0.7.3 scores it: graded by the run's judge (`--judge_model` / `--judge_config`)
with MM-Vet's own prompt (`mmvet_official`); `mmvet` reports the mean 0-1 grade on 0-100 and
`mmvet_capabilities` adds the per-capability scores lmms-eval logs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics import JUDGE_VERDICT, METRICS, Metric
from fastmmeval.metrics.base import already_on_100, mean
from fastmmeval.tasks.processors import DOC_PROCESSORS, text_field

MMVET_CAPABILITIES = ("rec", "ocr", "know", "gen", "spat", "math")


def mmvet_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """The judge's 0-1 correctness grade on 0-100."""
    return 100.0 * float(fields[JUDGE_VERDICT])


METRICS.add("mmvet", Metric("mmvet", mmvet_score, to_100=already_on_100, judge="mmvet"))


@DOC_PROCESSORS.register("mmvet")
def mmvet(row: dict[str, Any]) -> dict[str, Any]:
    """What MM-Vet's judge is shown: the bare question (without the step-by-step instruction the
    model gets) and the ground truth with spaces around <AND> / <OR>, as lmms-eval builds its query."""
    answer = text_field(row, "answer", "mmvet").replace("<AND>", " <AND> ").replace("<OR>", " <OR> ")
    return {"judge_question": text_field(row, "question", "mmvet"), "judge_answer": answer}


def mmvet_capability_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The judge's 0-1 grade on 0-100 (`mmvet`) and the doc's capabilities (`capability`, e.g. "rec,ocr")."""
    capabilities = [c.strip() for c in text_field(fields, "capability", "mmvet").split(",")]
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
    "mmvet_capabilities", mmvet_capability_item, mmvet_capability_aggregate, stderr="bootstrap", to_100=already_on_100,
    headline="score", judge="mmvet_official",
))  # fmt: skip
