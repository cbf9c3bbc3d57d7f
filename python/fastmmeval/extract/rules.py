"""Rule-based extractors: option letters, yes/no, numbers, first word, raw text."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ANSWER_IS = re.compile(r"(?:the\s+)?(?:correct\s+)?answer\s*(?:is|:)\s*(.+)", re.IGNORECASE | re.DOTALL)


def _answer_part(text: str) -> tuple[str, str]:
    """The text after 'The answer is' when present, with the name of that rule."""
    m = _ANSWER_IS.search(text)
    return (m.group(1), "answer_is+") if m else (text, "")


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
    """The first word, without surrounding punctuation."""
    body, prefix = _answer_part(text)
    for token in body.split():
        word = token.strip(".,;:!?\"'()[]{}*")
        if word:
            return Extraction(word, prefix + "first_word")
    return Extraction(None, UNPARSED)


@EXTRACTORS.register("yes_no")
def yes_no(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """'yes' or 'no' when exactly one of them appears as a word (first one wins otherwise)."""
    words = re.findall(r"[a-z]+", text.lower())
    found = [w for w in words if w in ("yes", "no")]
    if not found:
        return Extraction(None, UNPARSED)
    rule = "yes_no_single" if len(set(found)) == 1 else "yes_no_first"
    return Extraction(found[0], rule)


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?")
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_WORD_NUMBERS = {w: str(i) for i, w in enumerate(_NUMBER_WORDS)}


@EXTRACTORS.register("number")
def number(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The first number (digits, thousands separators, decimals, %), or a number word 0-10."""
    body, prefix = _answer_part(text)
    m = _NUMBER.search(body)
    if m:
        return Extraction(m.group(0).replace(",", ""), prefix + "number")
    for word in re.findall(r"[a-z]+", body.lower()):
        if word in _WORD_NUMBERS:
            return Extraction(_WORD_NUMBERS[word], prefix + "number_word")
    return Extraction(None, UNPARSED)


@EXTRACTORS.register("option_letter")
def option_letter(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The chosen option's letter: exactly one standalone option letter (also '(A)', 'A.',
    'A:'), else the one option whose text appears in the answer; never a guess."""
    letters = LETTERS[: len(options)] if options else LETTERS[:4]
    body, prefix = _answer_part(text)
    words = re.sub(r"[.()\[\],:;!*#{}]", " ", body).split()
    found = {w for w in words if w in letters}
    # "A" inside a sentence is usually the article, as in VLMEvalKit's can_infer_option.
    if len(found) == 1 and not (found == {"A"} and len(words) > 3):
        return Extraction(found.pop(), prefix + "letter")
    lowered = body.lower()
    hits = [i for i, o in enumerate(options) if o and re.search(rf"\b{re.escape(o.lower())}\b", lowered)]
    if len(hits) == 1:
        return Extraction(letters[hits[0]], prefix + "option_text")
    return Extraction(None, UNPARSED)
