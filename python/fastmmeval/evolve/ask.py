"""One model call of an evolve stage: a role asked one of the evolve prompts, shown images from the
workspace's blobs (none for the vision-blind verifier), through the stage cache; its reply read
against the call's JSON schema into the stage's record, or a Failure keeping the raw reply."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fastmmeval.evolve.records import Failure
from fastmmeval.live.ask import ask_record
from fastmmeval.live.prompts import Prompt, packaged_prompt
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache, content_key

T = TypeVar("T")


def evolve_prompt(name: str) -> Prompt:
    """The evolve prompt `name` (evolve/prompts/<name>.yaml)."""
    return packaged_prompt("fastmmeval.evolve", name)


def ask(role: Role, prompt_name: str, values: dict[str, Any], images: Sequence[tuple[str, str]], blobs: Blobs,
        cache: StageCache, schema: dict[str, Any], subject: str, read: Callable[[dict[str, Any]], T]) -> T | Failure:
    """`read` of the reply of `role` to prompt `prompt_name` rendered with `values`, shown the blobs
    `images` ((sha, suffix) pairs) first, or a Failure of stage `prompt_name` for `subject`: without a raw
    reply when the call failed, with it when the reply broke the schema or `read` refused it (any
    FastmmevalError it raises). Cached under the images' and the values' hashes and the schema."""
    inputs = [sha for sha, _ in images] + [content_key("values", values)]
    data = [blobs.get(sha, suffix) for sha, suffix in images]
    return ask_record(role, prompt_name, evolve_prompt(prompt_name), values, data, cache, inputs, schema, subject, read)
