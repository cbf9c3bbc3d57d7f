"""Generic rules (raw text, first line, first word) and helpers the other extractors share."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# "The answer is X", "The correct answer is: X", "Final answer: X"; not "the answer is not X" / "isn't".
_ANSWER_IS = re.compile(r"\banswer\s*(?:is\b(?!\s*not\b)\s*:?|:)\s*", re.IGNORECASE)


def fold(text: str) -> str:
    """`text` in Unicode NFKC form, so full-width letters, digits and brackets read as ASCII."""
    return unicodedata.normalize("NFKC", text)


def answer_part(text: str) -> tuple[str, str]:
    """The text after the last 'The answer is' / 'Answer:' with the rule prefix 'answer_is+',
    or the whole text and '' when there is none (or nothing follows it)."""
    matches = list(_ANSWER_IS.finditer(text))
    if not matches or not text[matches[-1].end() :].strip():
        return text, ""
    return text[matches[-1].end() :], "answer_is+"


@EXTRACTORS.register("raw")
def raw(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The whole response, stripped."""
    return Extraction(text.strip(), "raw")


@EXTRACTORS.register("first_line")
def first_line(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The first non-empty line."""
    for line in text.splitlines():
        if line.strip():
            return Extraction(line.strip(), "first_line")
    return Extraction(None, UNPARSED)


@EXTRACTORS.register("first_word")
def first_word(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The first word (of the part after 'The answer is' when present), without surrounding punctuation."""
    body, prefix = answer_part(text)
    for token in body.split():
        word = token.strip(".,;:!?\"'()[]{}*")
        if word:
            return Extraction(word, prefix + "first_word")
    return Extraction(None, UNPARSED)
