"""The check stage: the checker keeps, repairs or replaces a draft so that it fits its level, is
answerable, checkable and challenging, and carries no political bias. The level never changes:
the checker is told to rewrite the question instead, and the draft's subtask is kept whatever
the reply says."""

from __future__ import annotations

from typing import Any

from fastmmeval.live.ask import ask_and_read, draft_json, page_values
from fastmmeval.live.records import Capture, Draft, Failure, PageInfo
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache
from fastmmeval.live.validate import criteria_text

STAGE = "check"


def check_draft(draft: Draft, capture: Capture, info: PageInfo, role: Role, cache: StageCache,
                blobs: Blobs) -> Draft | Failure:
    """The checked draft (same page, index and subtask), or a Failure when the checker's reply is
    unusable (criteria not adding up to 10 among others)."""
    values = page_values(capture) | {"text": info.text, "images": info.images, "news": info.news,
                                     "draft": draft_json(draft), "subtask": draft.subtask}

    def checked(obj: dict[str, Any]) -> Draft:
        return Draft(draft.page, draft.index, draft.subtask, obj["question"].strip(), obj["answer"].strip(),
                     criteria_text(obj["criteria"]))

    return ask_and_read(role, STAGE, "check", values, capture, blobs, cache, draft.id, checked)
