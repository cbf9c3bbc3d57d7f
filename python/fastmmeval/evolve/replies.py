"""What the evolve roles are asked to answer in: one JSON schema per prompt (kept to the subset every
backend can fill, models.schema_subset), read back with the judge parser's repair and checked against
it (live.validate.read_object). The generator's schema depends on the image's option count and on the
tools a plan may name, so it is built per call."""

from __future__ import annotations

import string
from typing import Any

_TEXT = {"type": "string", "minLength": 1}
_ROLE = {"type": "string", "enum": ["central", "peripheral"]}

# Algorithm 1's analysis perspectives (MMBench's), with what each one looks at.
PERSPECTIVES = {
    "visual content": "the objects, scenes, people and activities shown",
    "visual style": "photograph, illustration, chart, diagram, screenshot, rendering; colours and quality",
    "OCR dependency": "whether and how much of the question rests on text visible in the image",
    "spatial relations": "where things are relative to each other and to the frame",
    "external knowledge dependency": "knowledge beyond the image the question needs",
}
FIELDS = ("title", "context", "source", "timestamp")
MAX_PATTERNS = 12
MAX_OPTIONS = 4


def letters(n: int) -> list[str]:
    """The first `n` option letters: A, B, ..."""
    return list(string.ascii_uppercase[:n])


SCHEMAS: dict[str, dict[str, Any]] = {
    "spec_benchmark": {"type": "object", "required": ["purpose", "format"],
                       "properties": {"purpose": _TEXT, "format": _TEXT}},
    "spec_atomic": {"type": "object", "required": ["purpose", "data_sources"],
                    "properties": {"purpose": _TEXT, "data_sources": _TEXT}},
    "pattern_extract": {
        "type": "object", "required": ["patterns"],
        "properties": {"patterns": {"type": "array", "minItems": 1, "maxItems": 6, "items": {
            "type": "object", "required": ["pattern", "role"], "properties": {"pattern": _TEXT, "role": _ROLE}}}},
    },
    "pattern_consolidate": {
        "type": "object", "required": ["patterns"],
        "properties": {"patterns": {"type": "array", "minItems": 1, "maxItems": MAX_PATTERNS, "items": {
            "type": "object", "required": ["perspective", "pattern", "role"],
            "properties": {"perspective": {"type": "string", "enum": list(PERSPECTIVES)}, "pattern": _TEXT,
                           "role": _ROLE}}}},
    },
    "judge": {"type": "object", "required": ["accept", "rationales"],
              "properties": {"accept": {"type": "boolean"},
                             "rationales": {"type": "array", "minItems": 1, "maxItems": 3, "items": _TEXT}}},
    "update_query": {"type": "object", "required": ["query"], "properties": {"query": _TEXT}},
}  # fmt: skip


def plan_reply_schema(sources: list[str], queries: int) -> dict[str, Any]:
    """The acquisition planner's reply: fields F_t, strategy A_t over the configured sources, `queries` queries Q_t."""
    return {
        "type": "object", "required": ["fields", "strategy", "queries"],
        "properties": {
            "fields": {"type": "array", "minItems": 1, "maxItems": len(FIELDS),
                       "items": {"type": "string", "enum": list(FIELDS)}},
            "strategy": {"type": "object", "required": ["source", "why"],
                         "properties": {"source": {"type": "string", "enum": sources}, "why": _TEXT}},
            "queries": {"type": "array", "minItems": 1, "maxItems": queries, "items": _TEXT},
        },
    }  # fmt: skip


def generate_schema(options: int, plan: dict[str, Any]) -> dict[str, Any]:
    """A generator's reply for an image whose question has `options` options, its plan in `plan` (the
    plan array's schema, evolve.solution.plan_schema)."""
    return {
        "type": "object", "required": ["question", "hint", "options", "answer", "plan"],
        "properties": {
            "question": _TEXT,
            "hint": {"type": "string"},
            "options": {"type": "array", "minItems": options, "maxItems": options, "items": _TEXT},
            "answer": {"type": "string", "enum": letters(options)},
            "plan": plan,
        },
    }  # fmt: skip


def compare_schema(candidates: int) -> dict[str, Any]:
    """The comparison role's pick among `candidates` numbered from 0."""
    return {"type": "object", "required": ["best", "reason"],
            "properties": {"best": {"type": "integer", "minimum": 0, "maximum": candidates - 1}, "reason": _TEXT}}


def verify_schema(options: int) -> dict[str, Any]:
    """The vision-blind verifier's answer: one of the `options` letters."""
    return {"type": "object", "required": ["answer", "reason"],
            "properties": {"answer": {"type": "string", "enum": letters(options)}, "reason": {"type": "string"}}}
