"""The label distribution of one category in two versions of a benchmark (MMBench-Live Section 4.6): an LLM
role reads each question of the category with its correct answer and names the label it is about (for
spatial relations: the relation, such as "north"), and the two versions' label counts are compared by their
vocabulary sizes, their five most frequent labels and what they share.

A question is its doc's prompt as the task renders it (options included) and the correct answer (its
letter and option text); a task scored by CircularEval has each question once (its first rotation among the
docs). Labels are compared case-folded, with runs of spaces made one and surrounding punctuation cut. The
role's calls go through the stage cache (`Role.ask`), so a rerun asks nothing twice; a failed call or a
reply outside the schema is counted with its reason and left out of the counts, never given a label.
"""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from tqdm import tqdm

from fastmmeval.errors import ConfigError, DocError
from fastmmeval.extract.rules import LETTERS
from fastmmeval.live.ask import ask_record
from fastmmeval.live.prompts import Prompt, packaged_prompt
from fastmmeval.live.records import Failure
from fastmmeval.live.roles import Role
from fastmmeval.live.store import StageCache, content_key
from fastmmeval.metrics.circular import circular_group
from fastmmeval.protocol import Doc, TextPart
from fastmmeval.tasks.task import Task

PROMPT = "label"
STAGE = "compare_label"
SCHEMA: dict[str, Any] = {"type": "object", "required": ["label"],
                          "properties": {"label": {"type": "string", "minLength": 1}}}
TOP = 5
CIRCULAR_METRIC = "circular_accuracy"
FAILURES_KEPT = 20  # reasons listed in the report (all are counted)


def label_prompt() -> Prompt:
    """The labeler's prompt (compare/prompts/label.yaml)."""
    return packaged_prompt("fastmmeval.compare", PROMPT)


def normal_label(text: str) -> str:
    """A label as labels are compared: case-folded, inner whitespace one space, outer punctuation cut."""
    return re.sub(r"\s+", " ", text).strip().strip(".,;:!?\"'`()[]{}").strip().casefold()


@dataclass(frozen=True)
class TaskLabels:
    """One version's labels of the category: questions asked, labelled and failed (with the first reasons),
    every label's count (most frequent first), the vocabulary size and the top labels as [label, count, share]."""

    task: str
    questions: int
    labelled: int
    failed: int
    failures: list[dict[str, str]]
    counts: dict[str, int]
    vocabulary: int
    top: list[list[Any]]


@dataclass(frozen=True)
class LabelReport:
    """Both versions' labels of `category` (docs whose field `field` holds it), who labelled them with which
    prompt, and the overlap: labels in both top-5 lists, shared labels and the vocabularies' Jaccard index."""

    category: str
    field: str
    labeler: str
    prompt: str
    a: TaskLabels
    b: TaskLabels
    top_shared: list[str] = field(default_factory=list)
    shared_labels: int = 0
    vocabulary_jaccard: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of every field."""
        return asdict(self)


def category_docs(task: Task, category: str, field_name: str) -> list[Doc]:
    """The docs of `task` whose field `field_name` is `category` (one per question under CircularEval)."""
    column = task.rows.column(field_name)
    if all(v is None for v in column):
        raise ConfigError(f"task {task.name}: its docs have no field {field_name!r} (the category field)")
    refs = [r for r in task.doc_refs() if column[r.index] is not None and str(column[r.index]) == category]
    if not refs:
        present = sorted({str(v) for v in column if v is not None})
        raise ConfigError(f"task {task.name}: no doc has {field_name} {category!r} (it has: {', '.join(present[:30])})")
    docs = [task.doc(r) for r in refs]
    if CIRCULAR_METRIC not in task.config.metrics:
        return docs
    first: dict[Any, Doc] = {}
    for doc in docs:
        first.setdefault(circular_group(doc.fields), doc)
    return list(first.values())


def question_values(task: Task, doc: Doc, category: str) -> dict[str, str]:
    """What the prompt is filled with for `doc`: the category, the question as the task renders it and its
    correct answer (letter and option text for multiple choice)."""
    request = task.request(doc, seed=0)
    text = "\n".join("".join(p.text for p in m.content if isinstance(p, TextPart)) for m in request.messages)
    targets = task.targets(doc)
    options = task.options(doc)
    answer = "; ".join(f"{t}. {options[LETTERS.index(t)]}" for t in targets) if options else " / ".join(targets)
    return {"category": category, "question": text.strip(), "answer": answer}


def _tally(task: Task, labels: list[str | Failure]) -> TaskLabels:
    failures = [f for f in labels if isinstance(f, Failure)]
    counts = Counter(label for label in labels if isinstance(label, str))
    labelled = sum(counts.values())
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    top = [[label, n, n / labelled] for label, n in list(ordered.items())[:TOP]]
    reasons = [{"doc": f.subject, "reason": f.reason} for f in failures[:FAILURES_KEPT]]
    return TaskLabels(task.name, len(labels), labelled, len(failures), reasons, ordered, len(ordered), top)


def task_labels(task: Task, category: str, role: Role, cache: StageCache, field_name: str = "category",
                workers: int = 8, progress: bool = True) -> TaskLabels:
    """The labels `role` gives the questions of `category` in `task` (calls cached in `cache`)."""
    asked = label_prompt()
    jobs: list[tuple[str, dict[str, str]] | Failure] = []
    for doc in category_docs(task, category, field_name):
        try:
            jobs.append((doc.id, question_values(task, doc, category)))
        except DocError as e:
            jobs.append(Failure(STAGE, doc.id, str(e)))

    def label(job: tuple[str, dict[str, str]] | Failure) -> str | Failure:
        if isinstance(job, Failure):
            return job
        doc_id, values = job
        got = ask_record(role, STAGE, asked, values, [], cache, [content_key("values", values)], SCHEMA, doc_id,
                         lambda reply: normal_label(reply["label"]))
        return got if isinstance(got, Failure) or got else Failure(STAGE, doc_id, f"{asked.id}: an empty label")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(tqdm(pool.map(label, jobs), total=len(jobs), desc=f"labels {task.name}", unit="question",
                            disable=not progress))
    return _tally(task, results)


def label_distribution(task_a: Task, task_b: Task, category: str, role: Role, cache: StageCache,
                       field_name: str = "category", workers: int = 8, progress: bool = True) -> LabelReport:
    """Both tasks' label distributions of `category` (see the module docstring) and their overlap."""
    a, b = (task_labels(t, category, role, cache, field_name, workers, progress) for t in (task_a, task_b))
    top_b = {label for label, _, _ in b.top}
    shared = set(a.counts) & set(b.counts)
    union = set(a.counts) | set(b.counts)
    return LabelReport(category, field_name, role.name, label_prompt().id, a, b,
                       top_shared=[label for label, _, _ in a.top if label in top_b], shared_labels=len(shared),
                       vocabulary_jaccard=len(shared) / len(union) if union else 0.0)
