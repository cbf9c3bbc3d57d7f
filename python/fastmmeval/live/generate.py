"""The generate stage: the quizmaster's questions about a page, at each of the four SUBTASKS
levels, each with a reference answer and criteria worth 10 points."""

from __future__ import annotations

import json
from typing import Any

from fastmmeval.live.ask import ask_and_read, page_values
from fastmmeval.live.prompts import prompt
from fastmmeval.live.records import SUBTASKS, Capture, Draft, Failure, PageInfo
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache
from fastmmeval.live.validate import ReplyError, criteria_text

STAGE = "generate"


def generate_drafts(capture: Capture, info: PageInfo, role: Role, cache: StageCache,
                    blobs: Blobs) -> list[Draft | Failure] | Failure:
    """The generator's questions about the page, level by level in SUBTASKS order (a question's index
    is its place): a Draft each, or a Failure for a question whose criteria do not add up to 10 (its
    raw text kept); a Failure of the page when the reply is unusable (no JSON, a level left out or
    unknown)."""
    values = page_values(capture) | {"text": info.text, "images": info.images, "news": info.news}

    def drafts(obj: dict[str, Any]) -> list[Draft | Failure]:
        asked = [(subtask, i, q) for subtask in SUBTASKS for i, q in enumerate(obj[subtask])]
        return [_draft(capture.key, index, *question) for index, question in enumerate(asked)]

    return ask_and_read(role, STAGE, "generate", values, capture, blobs, cache, capture.key, drafts)


def _draft(page: str, index: int, subtask: str, place: int, question: dict[str, Any]) -> Draft | Failure:
    draft = Draft(page, index, subtask, question["question"].strip(), question["answer"].strip(), "")
    try:
        draft.criteria = criteria_text(question["criteria"])
    except ReplyError as e:
        reason = f"{prompt('generate').id}: {subtask}/{place}: {e}"
        return Failure(STAGE, draft.id, reason, json.dumps(question, ensure_ascii=False))
    return draft
