"""One model call of a live stage: the role asked with a page's screenshots (through the stage
cache), its reply read and validated into the stage's record, or a Failure keeping the raw reply."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fastmmeval.errors import FastmmevalError
from fastmmeval.live.prompts import Prompt, prompt
from fastmmeval.live.records import Capture, Draft, Failure
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache, content_key
from fastmmeval.live.validate import SCHEMAS, read_object

T = TypeVar("T")


def screenshots(capture: Capture, blobs: Blobs) -> list[bytes]:
    """The capture's screenshots as PNG bytes, in page order."""
    return [blobs.get(sha, ".png") for sha in capture.screens]


def page_values(capture: Capture) -> dict[str, str]:
    """What every prompt says about the page: its site, URL, category, language and capture time."""
    site = capture.site
    return {"site": site.name, "url": capture.final_url or capture.url, "category": site.category or "unknown",
            "language": site.language, "captured_at": capture.captured_at or "unknown"}


def draft_json(draft: Draft) -> str:
    """The draft as the JSON a prompt shows the role: subtask, question, answer and criteria."""
    shown = {"subtask": draft.subtask, "question": draft.question, "answer": draft.answer, "criteria": draft.criteria}
    return json.dumps(shown, ensure_ascii=False, indent=2)


def ask_and_read(role: Role, stage: str, prompt_name: str, values: dict[str, Any], capture: Capture,
                 blobs: Blobs, cache: StageCache, subject: str, read: Callable[[dict[str, Any]], T]) -> T | Failure:
    """`read` of the reply of `role` to prompt `prompt_name` rendered with `values` and shown the
    capture's screenshots (the reply schema-checked first), or a Failure of `stage` for `subject`:
    without a raw reply when the call failed, with it when the reply was refused. The call is
    cached under the screenshots' and the values' hashes; the reply is asked for in the prompt's schema."""
    inputs = [*capture.screens, content_key("values", values)]
    return ask_record(role, stage, prompt(prompt_name), values, screenshots(capture, blobs), cache, inputs,
                      SCHEMAS[prompt_name], subject, read, prompt_name)


def ask_record(role: Role, stage: str, asked: Prompt, values: dict[str, Any], images: Sequence[bytes],
               cache: StageCache, inputs: Sequence[str], schema: dict[str, Any], subject: str,
               read: Callable[[dict[str, Any]], T], cache_stage: str | None = None) -> T | Failure:
    """`read` of the reply of `role` to `asked` rendered with `values` (shown `images`, cached under
    `inputs`, asked for in `schema`, which the reply must match), or a Failure of `stage` for
    `subject`: without a raw reply when the call failed, with it when the reply was refused (the
    schema, or any FastmmevalError `read` raises). `cache_stage` names the call in the cache (default: `stage`)."""
    reply = role.ask(cache_stage or stage, asked, values, images, cache, inputs, schema)
    if reply.text is None:
        return Failure(stage, subject, reply.error or f"{asked.id}: no reply")
    try:
        return read(read_object(reply.text, schema))
    except FastmmevalError as e:
        return Failure(stage, subject, f"{asked.id}: {e}", reply.text)
