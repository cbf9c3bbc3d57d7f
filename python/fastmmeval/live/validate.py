"""Reading the live roles' replies: the JSON object each prompt asks for, read with the judge
parser's repair (fenced, or inside prose), checked against that prompt's JSON schema, then held to
the rules a schema cannot state: criteria points add up to exactly 10, criteria in English, no
lettered option list in a question, a subtask that is one of SUBTASKS. Every failure is one
ReplyError whose message is the one-line reason."""

from __future__ import annotations

import math
import re
from typing import Any

import jsonschema

from fastmmeval.errors import FastmmevalError
from fastmmeval.judge.parse import JudgmentError, parse_object, rating
from fastmmeval.live.records import SUBTASKS


class ReplyError(FastmmevalError):
    """A role's reply that is not the JSON object its prompt asked for, or that breaks a rule."""


# The schemas are also what a role is asked to answer in (Request.json_schema), so they keep to what
# every backend can enforce (models.structured's subset): whole points and grades in small ranges,
# bounded lists. Criteria are a list of {points, criterion} so that their total can be checked
# exactly; criteria_text renders them as the natural-language text an item carries.
_TEXT = {"type": "string", "minLength": 1}
_CRITERIA = {
    "type": "array",
    "minItems": 1,
    "maxItems": 6,
    "items": {
        "type": "object",
        "required": ["points", "criterion"],
        "properties": {"points": {"type": "integer", "minimum": 1, "maximum": 10}, "criterion": _TEXT},
    },
}
_QUESTION = {
    "type": "object",
    "required": ["question", "answer", "criteria"],
    "properties": {"question": _TEXT, "answer": _TEXT, "criteria": _CRITERIA},
}
# One or two questions at each level, the levels as keys: a reply cannot leave one out.
_LEVELS = {
    "type": "object",
    "required": list(SUBTASKS),
    "additionalProperties": False,
    "properties": {s: {"type": "array", "minItems": 1, "maxItems": 2, "items": _QUESTION} for s in SUBTASKS},
}


def _grade(high: int) -> dict[str, Any]:
    # A numeric string ("4", "4/5") is read by judge.parse.rating too.
    return {"type": ["integer", "string"], "minimum": 0, "maximum": high}


SCHEMAS: dict[str, dict[str, Any]] = {
    "extract_text": {"type": "object", "required": ["text"], "properties": {"text": _TEXT}},
    "extract_images": {
        "type": "object",
        "required": ["images", "page"],
        "properties": {
            "images": {
                "type": "array",
                "maxItems": 8,
                "items": {
                    "type": "object",
                    "required": ["where", "shows"],
                    "properties": {"where": {"type": "string"}, "shows": _TEXT, "relates_to": {"type": "string"}},
                },
            },
            "page": _TEXT,
        },
    },
    "extract_news": {
        "type": "object",
        "required": ["stories"],
        "properties": {
            "stories": {
                "type": "array",
                "minItems": 1,
                "maxItems": 8,
                "items": {
                    "type": "object",
                    "required": ["story", "new"],
                    "properties": {"story": _TEXT, "new": _TEXT, "implications": {"type": "string"}},
                },
            }
        },
    },
    "generate": _LEVELS,
    "check": _QUESTION,
    "finalize": _QUESTION,
    "score": {
        "type": "object",
        "required": ["authenticity", "coherence", "clarity", "reason"],
        "properties": {"authenticity": _grade(5), "coherence": _grade(3), "clarity": _grade(2), "reason": _TEXT},
    },
}

# Criteria may quote the page (Japanese, Chinese, ...), but most of their letters must be ASCII.
MIN_ASCII_LETTERS = 0.7

# Lettered options: "A) ..." / "(b) ..." / "C. ..." opening a line, or "(A) ..." / "B) ..." inline.
_OPTION_AT_LINE = re.compile(r"^\s*[(\[]?([A-Da-d])[).:\]]\s+\S", re.MULTILINE)
_OPTION_INLINE = re.compile(r"(?<!\w)[(\[]?([A-D])[)\]]\s*\S")


def read_reply(text: str, prompt_name: str) -> dict[str, Any]:
    """The JSON object in `text` (repaired as the judge parser repairs), valid for the schema of
    the prompt `prompt_name`."""
    return read_object(text, SCHEMAS[prompt_name])


def read_object(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON object in `text` (repaired as the judge parser repairs), valid for `schema`; a
    ReplyError naming the first field at fault otherwise."""
    try:
        obj = parse_object(text)
    except JudgmentError:
        raise ReplyError(f"no JSON object in the reply: {_one_line(text)[:80]!r}") from None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(obj))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "reply"
        raise ReplyError(f"{where}: {_one_line(error.message)[:160]}")
    return obj


def criteria_text(criteria: list[dict[str, Any]]) -> str:
    """Criteria (a list of {points, criterion}) as the natural-language text an item carries; their
    points must add up to exactly 10."""
    total = math.fsum(c["points"] for c in criteria)
    if not math.isclose(total, 10.0, rel_tol=0.0, abs_tol=1e-9):
        raise ReplyError(f"criteria points add up to {total:g}, not 10")
    lines = [f"- {_points(c['points'])}: {_one_line(c['criterion'])}" for c in criteria]
    return "\n".join(["Award up to 10 points in total:", *lines])


def require_english(criteria: list[dict[str, Any]]) -> None:
    """Refuse criteria not written in English: fewer than MIN_ASCII_LETTERS of their letters ASCII."""
    letters = [ch for c in criteria for ch in c["criterion"] if ch.isalpha()]
    share = sum(ch.isascii() for ch in letters) / len(letters) if letters else 0.0
    if share < MIN_ASCII_LETTERS:
        raise ReplyError(f"criteria are not in English ({share:.0%} of their letters are ASCII)")


def require_open(question: str) -> None:
    """Refuse a question that lists lettered options (A, B, ...): items are never multiple choice."""
    labels = {m.group(1) for m in _OPTION_AT_LINE.finditer(question)}
    labels |= {m.group(1) for m in _OPTION_INLINE.finditer(question)}
    if {"A", "B"} <= labels or {"a", "b"} <= labels:
        shown = ", ".join(sorted(labels))
        raise ReplyError(f"the question is multiple choice (options {shown}): {_one_line(question)[:80]!r}")


def known_subtask(name: str) -> str:
    """`name` as one of SUBTASKS (case and surrounding space aside)."""
    for subtask in SUBTASKS:
        if name.strip().casefold() == subtask.casefold():
            return subtask
    raise ReplyError(f"subtask {name!r} is not one of {', '.join(SUBTASKS)}")


def grade(obj: dict[str, Any], key: str, high: float) -> float:
    """`obj[key]` as a grade from 0 to `high` (numeric strings accepted, nothing clipped)."""
    try:
        return rating(obj, key, 0.0, high)
    except JudgmentError as e:
        raise ReplyError(str(e).removeprefix("judgment ")) from None


def _points(value: float) -> str:
    return f"{value:g} point{'' if value == 1 else 's'}"


def _one_line(text: str) -> str:
    return " ".join(text.split())
