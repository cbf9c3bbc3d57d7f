"""The cross-benchmark score: each task's headline metric on 0-100, averaged with equal weights.

A task's headline metric is the first of its task file's `metrics` (`results.json` records it as
`headline_metric`, and the key its values go under as `headline_as`); that metric's `to_100` puts
its value on 0-100 (see `Metric`). Tasks without
a value or without a mapping are listed under `excluded` with the reason, never counted as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fastmmeval.metrics.base import METRICS


def headline(result: Mapping[str, Any]) -> tuple[str, float, float | None] | str:
    """(value name, value on 0-100, its stderr on 0-100) of one task's results, or why there is
    none. The stderr goes through `to_100` by a central difference (exact for linear maps)."""
    name = result.get("headline_metric")
    if not name:
        return "no headline metric"
    if name not in METRICS:
        return f"unknown metric {name!r}"
    metric = METRICS.get(name)
    if metric.to_100 is None:
        return f"metric {name!r} has no 0-100 mapping"
    prefix = result.get("headline_as") or name  # the task file may rename a metric's result key
    key = prefix if metric.headline is None else f"{prefix}_{metric.headline}"
    entry = result.get("metrics", {}).get(key)
    if entry is None:
        return f"no value named {key!r} in the task's metrics"
    value, err = entry.get("value"), entry.get("stderr")
    if value is None:
        return "no scored docs"
    scaled_err = None if err is None else abs(metric.to_100(value + err) - metric.to_100(value - err)) / 2
    return key, metric.to_100(value), scaled_err


def overall_score(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The equal-weight mean of the tasks' normalized headline values: {"overall", "stderr"
    (tasks taken as independent; None when a task has none), "n_tasks", "per_task" {task:
    normalized}, "headline_metrics" {task: value name}, "excluded" [{"task", "reason"}]}."""
    per_task: dict[str, float] = {}
    names: dict[str, str] = {}
    errors: list[float | None] = []
    excluded: list[dict[str, str]] = []
    for task, result in results.items():
        got = headline(result)
        if isinstance(got, str):
            excluded.append({"task": task, "reason": got})
            continue
        names[task], per_task[task], err = got
        errors.append(err)
    k = len(per_task)
    overall = sum(per_task.values()) / k if k else None
    known = [e for e in errors if e is not None]
    stderr = math.sqrt(sum(e * e for e in known)) / k if k and len(known) == k else None
    return {
        "overall": overall,
        "stderr": stderr,
        "n_tasks": k,
        "per_task": per_task,
        "headline_metrics": names,
        "excluded": excluded,
    }
