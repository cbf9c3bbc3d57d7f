"""The explainers of listed differences: for each difference id a task file may list under
`lmms_eval.differences`, a check that says whether that difference accounts for a mismatch.

An explainer recomputes lmms-eval's side with the difference taken away (e.g. its responses cut at
our stop strings) and answers whether that gives our value; ids whose effect is a fact about the
value (a rounding, a scale) check that fact. The generic ones are here; a benchmark's own live in
`differences/<family>.py`, registered on import."""

from __future__ import annotations

import importlib
import pkgutil

from fastmmeval.engine.sampling import cut_at_stop
from fastmmeval.extract.base import UNPARSED
from fastmmeval.parity.mismatch import Explainer, Mismatch, same_value
from fastmmeval.registry import Registry
from fastmmeval.tasks.task import Task

EXPLAINERS: Registry[Explainer] = Registry("difference")


def _scored(m: Mismatch) -> bool:
    return m.kind in ("score", "aggregate") and m.theirs_with is not None


def _cut(response: str, stops: tuple[str, ...]) -> str:
    """`response` as our backends return it: up to its first stop string (maybe nothing)."""
    cut = cut_at_stop(response, stops)
    return response if cut is None else cut


@EXPLAINERS.register("stop_string")
def stop_string(m: Mismatch, task: Task) -> bool:
    """Our responses end at the task's stop strings; lmms-eval's chat models do not cut at `until`."""
    stops = task.config.generation.stop
    if not _scored(m) or not stops or not any(s in r for r in m.responses for s in stops):
        return False
    return same_value(m.theirs_with(lambda r: _cut(r, stops)), m.ours)  # type: ignore[misc]


@EXPLAINERS.register("stripped")
def stripped(m: Mismatch, task: Task) -> bool:
    """We read the response stripped of surrounding whitespace; lmms-eval scores it as generated."""
    if not _scored(m) or all(r == r.strip() for r in m.responses):
        return False
    stops = task.config.generation.stop
    return same_value(m.theirs_with(lambda r: _cut(r, stops).strip()), m.ours)  # type: ignore[misc]


@EXPLAINERS.register("unrounded")
def unrounded(m: Mismatch, task: Task) -> bool:
    """Our values are not rounded; lmms-eval rounds them (to 1-6 decimals: a whole number would
    pass for any value near it)."""
    if m.kind != "aggregate" or not isinstance(m.ours, float) or not isinstance(m.theirs, (int, float)):
        return False
    return any(same_value(round(m.ours, n), m.theirs) for n in range(1, 7))


@EXPLAINERS.register("unparsed_not_random")
def unparsed_not_random(m: Mismatch, task: Task) -> bool:
    """An answer our rules cannot read is wrong; lmms-eval picks a random option letter for it."""
    return _scored(m) and any(s.get("extract_rule") == UNPARSED for s in m.ours_samples)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
