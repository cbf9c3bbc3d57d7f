"""The prompt of a task file (`doc_to_messages`): chat turns of text templates and image fields."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

from fastmmeval.tasks.yaml_lines import FieldReader, LineDict

ROLES = {"system", "user", "assistant"}
INTERLEAVE_KEYS = {"pattern", "images"}


@dataclass(frozen=True)
class InterleavedText:
    """A text template whose rendered text is cut at each match of `pattern`, a regular expression
    with one group: in the match's place stands the image of the list field `images` that the group
    numbers (from 1). Each piece of text is stripped and empty pieces are dropped, as lmms-eval's
    mmmu_doc_to_messages does."""

    template: str
    pattern: str
    images: str


@dataclass(frozen=True)
class MessageTemplate:
    """One chat turn of the prompt: parts are ("text", template), ("text", InterleavedText) or
    ("image", field name)."""

    role: str
    parts: tuple[tuple[str, str | InterleavedText], ...]


def template_fields(template: str) -> list[str]:
    """The `{field}` names used by a prompt template."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def parse_messages(r: FieldReader, data: LineDict) -> tuple[MessageTemplate, ...]:
    """`doc_to_messages` of `data`: a list of turns `{role: system|user|assistant, content: [part, ...]}`."""
    turns = r.get(data, "doc_to_messages", list)
    out = []
    for turn in turns:
        if not isinstance(turn, LineDict) or set(turn) - {"role", "content"}:
            raise r.fail(data, "doc_to_messages", "each turn is a mapping with role and content")
        role = r.get(turn, "role", str)
        if role not in ROLES:
            raise r.fail(turn, "role", f"must be one of {sorted(ROLES)}")
        parts = [_parse_part(r, turn, part) for part in r.get(turn, "content", list)]
        out.append(MessageTemplate(role=role, parts=tuple(parts)))
    if not out:
        raise r.fail(data, "doc_to_messages", "needs at least one turn")
    return tuple(out)


def _parse_part(r: FieldReader, turn: LineDict, part: Any) -> tuple[str, str | InterleavedText]:
    """One content part: `{text: TEMPLATE}` (optionally with `interleave: {pattern, images}`) or `{image: FIELD}`."""
    if not isinstance(part, LineDict) or set(part) not in ({"text"}, {"image"}, {"text", "interleave"}):
        raise r.fail(turn, "content", "each part is {text: <template>} (+ interleave) or {image: <field>}")
    kind = "text" if "text" in part else "image"
    value = r.get(part, kind, str)
    if kind == "image":
        return kind, value
    try:
        template_fields(value)
    except ValueError as e:
        raise r.fail(part, kind, f"bad template ({e}); write literal braces as {{{{ }}}}") from None
    if "interleave" not in part:
        return kind, value
    setting = r.get(part, "interleave", dict)
    r.check_keys(setting, INTERLEAVE_KEYS, "interleave")
    pattern, images = r.get(setting, "pattern", str), r.get(setting, "images", str)
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise r.fail(setting, "pattern", f"bad regular expression ({e})") from None
    if compiled.groups != 1:
        message = f"needs one group, the image's number (as in <image (\\d+)>); it has {compiled.groups}"
        raise r.fail(setting, "pattern", message)
    if compiled.search(""):
        raise r.fail(setting, "pattern", "matches empty text; a placeholder is some text")
    return kind, InterleavedText(value, pattern, images)
