"""LiveBench as lmms-eval 0.7.3 scores it: the run's judge sees the screenshots, the question, the
answer, the reference and the item's criteria (`live_bench_v2`, or `live_bench_v1` for the 2024-06
and 2024-07 months) and rates the answer 0-10; the score is mean(rating / 10) x 100 over the judged
docs, overall (lmms-eval's gpt4_eval_score) and per subtask (the table lmms-eval prints). A subtask
outside `SUBTASKS` is a category of its own; failed judgments are left out and counted by the
evaluator, never rated -1 or 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics import JUDGE_VERDICT, METRICS, Metric
from fastmmeval.metrics.base import already_on_100, mean
from fastmmeval.tasks.processors import text_field

# The four levels LiveBench asks questions at (the paper's Bloom's-taxonomy subtasks), as
# lmms-eval's months name them in `subtask`; the live pipeline writes its questions at these.
SUBTASKS = ("Concrete Recognition", "Analytical Questions", "Divergent Thinking", "Real-world Assistance")

# The aggregate's key of the overall score, and the prefix of each subtask's key (`score_<subtask>`,
# so a subtask called "score" cannot overwrite the overall one).
OVERALL = "score"


def live_bench_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The judge's 0-10 rating of the answer and the doc's `subtask`."""
    return {"rating": float(fields[JUDGE_VERDICT]), "subtask": text_field(fields, "subtask", "live_bench")}


def live_bench_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """`score`: mean(rating / 10) x 100 over every judged doc; `score_<subtask>` the same over each
    subtask's docs, SUBTASKS first (those with docs), then any other subtask in name order."""
    out = {OVERALL: _score(items)}
    present = {i["subtask"] for i in items}
    for subtask in [*(s for s in SUBTASKS if s in present), *sorted(present - set(SUBTASKS))]:
        out[f"{OVERALL}_{subtask}"] = _score([i for i in items if i["subtask"] == subtask])
    return out


def _score(items: Sequence[Mapping[str, Any]]) -> float:
    return 100.0 * mean([i["rating"] / 10.0 for i in items])


for _name, _prompt in (("live_bench", "live_bench_v2"), ("live_bench_v1", "live_bench_v1")):
    METRICS.add(_name, Metric(
        _name, live_bench_item, live_bench_aggregate, stderr="bootstrap", to_100=already_on_100, headline=OVERALL,
        judge=_prompt,
    ))  # fmt: skip
