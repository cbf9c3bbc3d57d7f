"""The score stage: the scorer's grade of a finished item for authenticity (0-5), coherence
(0-3) and clarity (0-2), with its reason; selection keeps the items whose total is high enough."""

from __future__ import annotations

from typing import Any

from fastmmeval.live.ask import ask_and_read, draft_json, page_values
from fastmmeval.live.records import Capture, Draft, Failure, Score
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache
from fastmmeval.live.validate import grade

STAGE = "score"


def score_item(draft: Draft, capture: Capture, role: Role, cache: StageCache, blobs: Blobs) -> Score | Failure:
    """The scorer's grades of the finalized `draft`, or a Failure when a grade is missing, not a
    number or out of its range (never clipped)."""
    values = page_values(capture) | {"draft": draft_json(draft)}

    def graded(obj: dict[str, Any]) -> Score:
        return Score(grade(obj, "authenticity", 5), grade(obj, "coherence", 3), grade(obj, "clarity", 2),
                     obj["reason"].strip())

    return ask_and_read(role, STAGE, "score", values, capture, blobs, cache, draft.id, graded)
