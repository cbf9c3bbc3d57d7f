"""The generate stage: the quizmaster's questions about a page, at each of the four SUBTASKS
levels, each with a reference answer and criteria worth 10 points."""

from __future__ import annotations

from typing import Any

from fastmmeval.live.ask import ask_and_read, page_values
from fastmmeval.live.records import SUBTASKS, Capture, Draft, Failure, PageInfo
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache
from fastmmeval.live.validate import ReplyError, criteria_text, known_subtask

STAGE = "generate"


def generate_drafts(capture: Capture, info: PageInfo, role: Role, cache: StageCache,
                    blobs: Blobs) -> list[Draft] | Failure:
    """The generator's drafts about the page (in the order written: a draft's index is its place),
    or a Failure when its reply is unusable: any question with an unknown subtask or criteria not
    adding up to 10, or a level without a question."""
    values = page_values(capture) | {"text": info.text, "images": info.images, "news": info.news}

    def drafts(obj: dict[str, Any]) -> list[Draft]:
        made = [_draft(capture.key, i, q) for i, q in enumerate(obj["questions"])]
        missing = [s for s in SUBTASKS if s not in {d.subtask for d in made}]
        if missing:
            raise ReplyError(f"no question at the level(s) {', '.join(missing)}")
        return made

    return ask_and_read(role, STAGE, "generate", values, capture, blobs, cache, capture.key, drafts)


def _draft(page: str, index: int, question: dict[str, Any]) -> Draft:
    try:
        return Draft(page, index, known_subtask(question["subtask"]), question["question"].strip(),
                     question["answer"].strip(), criteria_text(question["criteria"]))
    except ReplyError as e:
        raise ReplyError(f"questions/{index}: {e}") from None
