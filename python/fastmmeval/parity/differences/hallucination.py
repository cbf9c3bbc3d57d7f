"""Explainers of the hallucination benchmarks' differences (`tasks/families/pope.py`, `mme.py`,
`hallusion_bench.py`)."""

from __future__ import annotations

from collections import Counter

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch, same_value
from fastmmeval.parity.peer import PeerFailure
from fastmmeval.tasks.task import Task

# The result keys that POPE's unparsed answers move: recall, and F1 through it.
POPE_RECALL_KEYS = ("pope_recall,none", "pope_f1_score,none")
# The message of the assertion in lmms-eval's mme_aggregate_results.
MME_PAIRS = "MME only supports pairwise evaluation"


def _pope_items(m: Mismatch) -> list[dict[str, str]]:
    """Our per-doc POPE items ({"prediction", "label"}) of the mismatch's samples."""
    return [s["metrics"]["pope"] for s in m.ours_samples if s.get("metrics", {}).get("pope") is not None]


@EXPLAINERS.register("yes_ratio_of_answers")
def yes_ratio_of_answers(m: Mismatch, task: Task) -> bool:
    """POPE: our yes ratio is the share of answers read as yes, lmms-eval's the share of labels
    that are yes: both facts checked on our samples of the mismatch."""
    items = _pope_items(m)
    if m.kind not in ("score", "aggregate") or not m.key.startswith("pope_yes_ratio,") or not items:
        return False
    answers = sum(i["prediction"] == "yes" for i in items) / len(items)
    labels = sum(i["label"] == "yes" for i in items) / len(items)
    return same_value(m.ours, answers) and same_value(m.theirs, labels)


@EXPLAINERS.register("unparsed_is_a_miss")
def unparsed_is_a_miss(m: Mismatch, task: Task) -> bool:
    """POPE: an answer that is not yes or no is a miss on a yes label here; lmms-eval leaves it out
    of recall. lmms-eval given "no" for each such answer (a miss on a yes label, and no effect on
    precision) gives our recall and F1."""
    if m.kind not in ("score", "aggregate") or m.key not in POPE_RECALL_KEYS or m.theirs_with is None:
        return False
    assert task.extract is not None
    if all(task.extract(r, (), {}).value is not None for r in m.responses):
        return False
    return same_value(m.theirs_with(lambda r: r if task.extract(r, (), {}).value is not None else "no"), m.ours)


@EXPLAINERS.register("questions_per_image")
def questions_per_image(m: Mismatch, task: Task) -> bool:
    """MME: lmms-eval's aggregation fails on an image without exactly two questions; here such an
    image is scored. Checked: lmms-eval failed with its pairwise assertion, and our samples hold an
    image asked a number of questions other than two."""
    if not isinstance(m.theirs, PeerFailure) or MME_PAIRS not in m.theirs.error:
        return False
    items = [s["metrics"]["mme"] for s in m.ours_samples]
    return any(n != 2 for n in Counter((i["category"], i["image"]) for i in items).values())
