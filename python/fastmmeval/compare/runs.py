"""Two versions of a task in our run folders: the models evaluated on both, and their scored docs by category.

The old version's runs and the new version's runs are given apart (the same model may hold both tasks
in one run folder: it may then be passed on both sides). Models are the same model when their runs'
model fingerprints are (`fastmmeval.runscores`: the model and its settings as the manifest records them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.metrics.base import Metric
from fastmmeval.runscores import TaskSamples, by_model, expand_runs, model_labels, read_run

WHOLE_TASK = "all"  # the one category of a task compared without a breakdown
SIDES = ("old", "new")


@dataclass
class VersionPair:
    """The models scored on both versions (`labels`, sorted) and each one's samples of the old and new task;
    the models found on one side only."""

    tasks: tuple[str, str]
    metric: Metric
    labels: list[str]
    old: list[TaskSamples]
    new: list[TaskSamples]
    only_old: list[str]
    only_new: list[str]


def pair_versions(runs_old: list[Path], runs_new: list[Path], tasks: tuple[str, str]) -> VersionPair:
    """The models that ran task `tasks[0]` in `runs_old` and task `tasks[1]` in `runs_new` (run folders, or
    folders of them), matched by model fingerprint."""
    sides = [[read_run(p) for p in expand_runs(paths)] for paths in (runs_old, runs_new)]
    labels = model_labels(sides[0] + sides[1])
    found: list[dict[str, TaskSamples]] = []
    for side, runs, task in zip(SIDES, sides, tasks, strict=True):
        held = {key: t[task] for key, t in by_model(runs, side).items() if task in t}
        if not held:
            names = sorted({t for r in runs for t in r.tasks})
            raise ConfigError(f"no {side} run holds task {task!r} (their tasks: {', '.join(names) or 'none'})")
        if len({s.fingerprint for s in held.values()}) > 1:
            raise ConfigError(f"the {side} runs ran different versions of task {task} (task fingerprints differ): "
                              "their scores are not comparable; pass the runs of one version")
        found.append(held)
    metrics = {found[i][next(iter(found[i]))].metric.name for i in (0, 1)}
    if len(metrics) > 1:
        raise ConfigError(f"{tasks[0]} and {tasks[1]} score different headline metrics ({' vs '.join(metrics)})")
    both = sorted(found[0].keys() & found[1].keys(), key=labels.__getitem__)
    return VersionPair(
        tasks, next(iter(found[0].values())).metric,
        [labels[k] for k in both], [found[0][k] for k in both], [found[1][k] for k in both],
        sorted(labels[k] for k in found[0].keys() - found[1].keys()),
        sorted(labels[k] for k in found[1].keys() - found[0].keys()),
    )  # fmt: skip


def breakdown_field(pair: VersionPair, field: str | None) -> str | None:
    """The breakdown field to compare by: `field`, which every run of both versions must hold, or (None)
    the first field that they all hold; None when they share none (each task is then one category)."""
    if field is not None:
        for task, side in zip(pair.tasks, (pair.old, pair.new), strict=True):
            if any(field not in s.breakdowns for s in side):
                raise ConfigError(f"--field {field}: a run's results.json has no breakdown of task {task} by {field!r} "
                                  "(the task file's `breakdown:` names the fields)")
        return field
    shared = set.intersection(*(set(s.breakdowns) for s in pair.old + pair.new)) if pair.old else set()
    return next((f for f in pair.old[0].breakdowns if f in shared), None) if pair.old else None


def by_category(samples: TaskSamples, field: str | None, task: str) -> dict[str, dict[str, Any]]:
    """category -> doc id -> metric item of the task's scored docs, by each doc's recorded value of `field`
    (None: one category, `WHOLE_TASK`)."""
    if field is None:
        return {WHOLE_TASK: dict(samples.items)}
    out: dict[str, dict[str, Any]] = {}
    for doc, item in samples.items.items():
        category = samples.categories.get(doc, {}).get(field)
        if category is None:
            raise ConfigError(f"task {task}: the sample of doc {doc!r} records no {field!r} category (written "
                              "before the task file declared its breakdown): run the task again")
        out.setdefault(category, {})[doc] = item
    return out
