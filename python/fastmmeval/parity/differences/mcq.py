"""Explainers of the multiple-choice benchmarks' differences (`tasks/families/mcq.py`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from fastmmeval.extract import Extraction
from fastmmeval.extract.rules import LETTERS
from fastmmeval.metrics.circular import ROTATION_STRIDE, circular_group
from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch, same_value
from fastmmeval.protocol import Doc, Response
from fastmmeval.samples import aggregate
from fastmmeval.tasks.task import Task

JUDGE_FAILED = "judge_failed"  # the extract rule of a doc whose judgment failed (judge.pipeline.judged_score)


@EXPLAINERS.register("image_rows_only")
def image_rows_only(m: Mismatch, task: Task) -> bool:
    """SEED-Bench: only the image rows are run, so lmms-eval's accuracy on its video rows
    (seed_video) is not reported."""
    return m.kind == "keys" and m.key == "seed_video,none" and ("data_type", "image") in task.config.where


@EXPLAINERS.register("hint_nan_string")
def hint_nan_string(m: Mismatch, task: Task) -> bool:
    """MMBench cn: a hint that is the string "nan" is missing here; lmms-eval's cn prompt prints it,
    "nan " before the question. Its prompt without that prefix is ours."""
    if m.kind != "prompt" or len(m.ours) != len(m.theirs) or _docs(task, m.doc_ids)[0].fields.get("hint") != "nan":
        return False
    unprefixed = [(kind, value.removeprefix("nan ") if kind == "text" else value) for kind, value in m.theirs]
    return unprefixed == list(m.ours) and unprefixed != list(m.theirs)


@EXPLAINERS.register("rotation_0_missing")
def rotation_0_missing(m: Mismatch, task: Task) -> bool:
    """CircularEval counts every question with a rotation among the docs here; lmms-eval only those
    whose rotation 0 is among them. Our value over just those questions is its value (nan for none)."""
    if m.kind not in ("score", "aggregate"):
        return False
    docs = _docs(task, m.doc_ids)
    indices = [int(d.fields["index"]) for d in docs]
    if all(i < ROTATION_STRIDE or i % ROTATION_STRIDE in indices for i in indices):
        return False
    kept = [s for s, d in zip(m.ours_samples, docs, strict=True) if circular_group(d.fields) in indices]
    ours = aggregate(task, kept, bootstrap_iters=0).get(m.key)
    return same_value(ours, m.theirs) or (ours is None and isinstance(m.theirs, float) and math.isnan(m.theirs))


@EXPLAINERS.register("judge_failed_not_random")
def judge_failed_not_random(m: Mismatch, task: Task) -> bool:
    """A doc whose judgment failed is left out of the score here; lmms-eval scores it with a random
    letter. Its value is ours with each such doc scored right or wrong (some combination)."""
    if m.kind not in ("score", "aggregate"):
        return False
    failed = [i for i, s in enumerate(m.ours_samples) if s.get("extract_rule") == JUDGE_FAILED]
    if not failed:
        return False
    docs = _docs(task, m.doc_ids)
    for rights in itertools.product((True, False), repeat=len(failed)):
        samples = list(m.ours_samples)
        for i, right in zip(failed, rights, strict=True):
            samples[i] = {**samples[i], **_scored_as(task, docs[i], right)}
        if same_value(aggregate(task, samples, bootstrap_iters=0).get(m.key), m.theirs):
            return True
    return False


def _scored_as(task: Task, doc: Doc, right: bool) -> dict[str, Any]:
    """`doc`'s sample fields had its answer been read as its target letter, or as another letter."""
    targets = task.targets(doc)
    letter = targets[0] if right else next(c for c in LETTERS if c not in targets)
    return task.score(doc, Response(f"{task.name}/{doc.id}", text=letter), Extraction(letter, "random"))


def _docs(task: Task, ids: Sequence[str]) -> list[Doc]:
    """The task's docs of `ids`, in that order."""
    refs = {r.id: r for r in task.doc_refs() if r.id in set(ids)}
    return [task.doc(refs[i]) for i in ids]
