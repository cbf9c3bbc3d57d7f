"""Reading a judge's reply: a JSON object, repaired from the usual damage.

Tried in order: the whole reply as JSON, then the first fenced code block (```json ... ```), then
the first decodable `{...}` object anywhere in the text (prose around it, a trailing remark).
Ratings may come as numbers or numeric strings ("7", "7/10", " 0.5 ")."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from fastmmeval.errors import FastmmevalError


class JudgmentError(FastmmevalError):
    """A judge's reply that cannot be read as the judgment its prompt asked for."""


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(?:/\s*\d+(?:\.\d+)?)?\s*$")


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def parse_object(text: str) -> dict[str, Any]:
    """The JSON object in a judge reply (raw, fenced, or the first decodable one in prose)."""
    found = _object(text.strip())
    if found is not None:
        return found
    for block in _FENCE.findall(text):
        found = _object(block.strip())
        if found is not None:
            return found
    decoder = json.JSONDecoder()
    for start in (i for i, c in enumerate(text) if c == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise JudgmentError(f"no JSON object in the judge's reply: {text[:80]!r}")


def rating(obj: dict[str, Any], key: str, low: float, high: float) -> float:
    """`obj[key]` as a number in [low, high]; numeric strings ("7", "7/10") are accepted, anything
    else (missing, NaN, out of range) is an error, never clipped."""
    if key not in obj:
        raise JudgmentError(f"judgment has no {key!r}: {json.dumps(obj)[:80]}")
    value = obj[key]
    if isinstance(value, str):
        match = _NUMBER.match(value)
        if match is None:
            raise JudgmentError(f"judgment {key!r} is not a number: {value!r}")
        value = float(match.group(1))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise JudgmentError(f"judgment {key!r} is not a number: {value!r}")
    if not low <= value <= high:
        raise JudgmentError(f"judgment {key!r} = {value} is outside [{low:g}, {high:g}]")
    return float(value)
