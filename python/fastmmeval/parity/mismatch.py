"""A disagreement between lmms-eval's side of a task and ours (`Mismatch`), how numbers are
compared (`same_value`), and the shape of a difference's check (`Explainer`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fastmmeval.tasks.task import Task

TOLERANCE = 1e-9
MismatchKind = Literal["prompt", "score", "aggregate", "keys"]
Transform = Callable[[str], str]


@dataclass
class Mismatch:
    """Where the two sides disagree: a doc's prompt, a result key on one case or on a slot, or a
    result key lmms-eval reports that we do not. `theirs_with(transform)` is lmms-eval's value of
    the same key with each response transformed first (what an explainer tries); `ours_samples`
    are our scored samples of the responses."""

    kind: MismatchKind
    key: str
    doc_ids: tuple[str, ...]
    responses: tuple[str, ...]
    ours: Any
    theirs: Any
    theirs_with: Callable[[Transform], Any] | None = None
    ours_samples: tuple[dict[str, Any], ...] = ()
    explained_by: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line: what differs, on which docs and responses."""
        where = ", ".join(self.doc_ids[:3]) + (" ..." if len(self.doc_ids) > 3 else "")
        said = "" if self.kind in ("prompt", "keys") else f" responses {list(self.responses[:2])!r}"
        why = ", ".join(self.explained_by) or "UNEXPLAINED"
        ours, theirs = _plain(self.ours), _plain(self.theirs)
        return f"{self.kind} {self.key} (docs {where}{said}): ours {ours!r}, lmms-eval {theirs!r} [{why}]"


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (for printing)."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "ndim", None) == 0 else value


Explainer = Callable[[Mismatch, Task], bool]


def same_value(a: Any, b: Any) -> bool:
    """Equal within TOLERANCE (numbers, recursively through lists and dicts); None equals None only."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= TOLERANCE
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b
