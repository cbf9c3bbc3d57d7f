"""The finalize stage: the finalizer's last edit of a checked draft: a clear open question (never
multiple choice), a correct answer, and English criteria tied to it adding up to exactly 10."""

from __future__ import annotations

from typing import Any

from fastmmeval.live.ask import ask_and_read, draft_json, page_values
from fastmmeval.live.records import Capture, Draft, Failure
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache
from fastmmeval.live.validate import criteria_text, require_english, require_open

STAGE = "finalize"


def finalize_draft(draft: Draft, capture: Capture, role: Role, cache: StageCache, blobs: Blobs) -> Draft | Failure:
    """The final draft (same page, index and subtask), or a Failure when the finalizer's reply
    breaks a rule: a lettered option list, criteria not in English or not adding up to 10."""
    values = page_values(capture) | {"draft": draft_json(draft)}

    def final(obj: dict[str, Any]) -> Draft:
        question = obj["question"].strip()
        require_open(question)
        require_english(obj["criteria"])
        return Draft(draft.page, draft.index, draft.subtask, question, obj["answer"].strip(),
                     criteria_text(obj["criteria"]))

    return ask_and_read(role, STAGE, "finalize", values, capture, blobs, cache, draft.id, final)
