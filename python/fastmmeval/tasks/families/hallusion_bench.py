"""HallusionBench as lmms-eval 0.7.3 runs it: its aAcc / fAcc / qAcc over figures and question pairs,
verdicts from the yes/no rules or from the run's judge with HallusionBench's own prompt."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.metrics import JUDGE_VERDICT, METRICS, Metric
from fastmmeval.metrics.base import already_on_100
from fastmmeval.tasks.processors import DOC_PROCESSORS

_LABELS = {"1": "yes", "0": "no"}
# lmms-eval's judge verdicts: 1 correct, 0 incorrect, 2 unclear.
CORRECT, INCORRECT, UNCLEAR = 1, 0, 2


def _text(fields: Mapping[str, Any], name: str) -> str:
    value = fields.get(name)
    if value is None:
        raise DocError(f"hallusion_bench: the doc has no field {name!r}")
    return str(value)


def hallusion_verdict(prediction: str | None, label: str) -> int:
    """lmms-eval's verdict for one answer, with the yes/no rules in place of its GPT-4 judge:
    CORRECT when the extracted yes/no is the label, INCORRECT when it is the other, UNCLEAR when
    the answer has neither."""
    if label not in _LABELS:
        raise DocError(f"hallusion_bench: gt_answer must be '1' (yes) or '0' (no), got {label!r}")
    if prediction is None:
        return UNCLEAR
    return CORRECT if prediction == _LABELS[label] else INCORRECT


def hallusion_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"set", "figure", "question", "no_figure", "correct"} for one question. `set` is
    category_subcategory_set_id (the cluster both groupings live in); a VS question without a
    figure (figure_id 0) is correct when its verdict is correct or unclear, as lmms-eval's
    `assign_correctness`; every other question only when correct. The verdict is the judge's
    (`hallusion_correctness` prompt) when the metric is a judge metric, else `hallusion_verdict`'s."""
    if len(targets) != 1:
        raise DocError(f"hallusion_bench: expected one target (gt_answer), got {len(targets)}")
    category, figure = _text(fields, "category"), _text(fields, "figure_id")
    judged = JUDGE_VERDICT in fields
    verdict = fields[JUDGE_VERDICT] if judged else hallusion_verdict(prediction, targets[0].strip())
    no_figure = category == "VS" and figure == "0"
    return {
        "set": "_".join([category, _text(fields, "subcategory"), _text(fields, "set_id")]),
        "figure": figure,
        "question": _text(fields, "question_id"),
        "no_figure": no_figure,
        "correct": verdict == CORRECT or (no_figure and verdict == UNCLEAR),
    }


def _all_correct_share(items: Sequence[Mapping[str, Any]], unit: str) -> float:
    """100 x the share of groups (items with the same set and `unit` field) answered all correctly."""
    groups: dict[tuple[Any, str], bool] = defaultdict(lambda: True)
    for item in items:
        key = (item["set"], item[unit])
        groups[key] = groups[key] and bool(item["correct"])
    return 100.0 * sum(groups.values()) / len(groups) if groups else float("nan")


def hallusion_aacc(items: Sequence[Mapping[str, Any]]) -> float:
    """aAcc: 100 x the share of questions answered correctly."""
    return 100.0 * sum(bool(i["correct"]) for i in items) / len(items) if items else float("nan")


def hallusion_facc(items: Sequence[Mapping[str, Any]]) -> float:
    """fAcc: 100 x the share of figures whose questions are all correct (VS questions without a
    figure left out)."""
    return _all_correct_share([i for i in items if not i["no_figure"]], "figure")


def hallusion_qacc(items: Sequence[Mapping[str, Any]]) -> float:
    """qAcc: 100 x the share of questions answered correctly on every figure they are asked of."""
    return _all_correct_share(items, "question")


def _hallusion_metric(
    name: str, aggregate: Callable[[Sequence[Mapping[str, Any]]], float], judge: str | None
) -> Metric:
    # The bootstrap resamples whole sets: both the figure and the question groups lie inside one.
    return Metric(
        name, hallusion_item, aggregate, stderr="bootstrap", to_100=already_on_100, cluster="set", judge=judge
    )


# hallusion_*: verdicts from the yes/no rules; hallusion_*_judged: from the run's judge with
# HallusionBench's own prompt (the three ask the same question, which the judge answers once).
for _name, _aggregate in (("hallusion_aacc", hallusion_aacc), ("hallusion_facc", hallusion_facc),
                          ("hallusion_qacc", hallusion_qacc)):  # fmt: skip
    METRICS.add(_name, _hallusion_metric(_name, _aggregate, None))
    METRICS.add(f"{_name}_judged", _hallusion_metric(f"{_name}_judged", _aggregate, "hallusion_correctness"))


@DOC_PROCESSORS.register("hallusion_bench")
def hallusion_bench(row: dict[str, Any]) -> dict[str, str]:
    """What HallusionBench's judge is shown: the question and, as the reference, `gt_answer_details`."""
    return {"judge_question": _text(row, "question"), "judge_reference": _text(row, "gt_answer_details")}
