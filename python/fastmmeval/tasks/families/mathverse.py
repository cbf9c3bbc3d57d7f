"""MathVerse testmini as lmms-eval 0.7.3 runs it (tasks mathverse_testmini and its problem-version
sub-tasks): the zero-shot "format-prompt" query (`mathverse`), and every response graded 1 or 0 by
the run's judge with lmms-eval's binary correctness prompt (`lmms_eval_binary`) against the
dataset's `question_for_eval` and answer; `mathverse` is the share graded correct.

lmms-eval 0.7.3 calls neither the extraction nor the matching prompt of MathVerse's own evaluation
(`create_extract_prompt` / `create_match_prompt` are unused, and its `trunk_response` and
`quick_match` settings are read only by `eval_results`, which nothing calls): `score_answer` sends
the whole stripped response to the judge once. So does this task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics import JUDGE_VERDICT, METRICS, Metric
from fastmmeval.tasks.processors import DOC_PROCESSORS, text_field


@DOC_PROCESSORS.register("mathverse")
def mathverse(row: dict[str, Any]) -> dict[str, str]:
    """`mathverse_query`: lmms-eval's zero-shot "format-prompt" query (`create_one_query` with
    query_type query_wo: the dataset's `query_wo`, stripped); and `judge_question`: the dataset's
    `question_for_eval`, the question the judge is shown."""
    return {
        "mathverse_query": text_field(row, "query_wo", "mathverse").strip(),
        "judge_question": text_field(row, "question_for_eval", "mathverse"),
    }


def mathverse_correct(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """The judge's grade: 1.0 when it judged the response correct, else 0.0."""
    return float(fields[JUDGE_VERDICT])


METRICS.add("mathverse", Metric("mathverse", mathverse_correct, judge="lmms_eval_binary"))
