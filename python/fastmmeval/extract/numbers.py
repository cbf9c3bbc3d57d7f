"""Numbers in free text: digits (signs, decimals, thousands separators, percentages) or words."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.rules import answer_part, fold

# Not glued to a word or a decimal point on the left ("H2O", "v1.2" hold no number). Thousands
# separators only in groups of three ("1,234,567"; "1,23" is 1 then 23).
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+\u2212]?)"
    r"(?P<digits>(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?P<percent>\s?%)?"
)
_UNITS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
]  # fmt: skip
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_WORD = re.compile(
    rf"\b(?:(?P<tens>{'|'.join(_TENS)})(?:[\s-](?P<unit>{'|'.join(_UNITS[1:10])}))?|(?P<small>{'|'.join(_UNITS)}))\b",
    re.IGNORECASE,
)


def find_number(text: str) -> Extraction | None:
    """The first number in `text`, canonical: no separators or '+', ASCII minus, '0.5' for '.5',
    '%' kept ('12.5%'); else the first number word from zero to ninety-nine; else None."""
    text = fold(text)
    m = _NUMBER.search(text)
    if m:
        sign = "-" if m["sign"] in ("-", "\u2212") else ""
        digits = m["digits"].replace(",", "")
        digits = "0" + digits if digits.startswith(".") else digits
        return Extraction(sign + digits + ("%" if m["percent"] else ""), "number")
    w = _WORD.search(text)
    if w:
        if w["small"]:
            value = _UNITS.index(w["small"].lower())
        else:
            value = _TENS[w["tens"].lower()] + (_UNITS.index(w["unit"].lower()) if w["unit"] else 0)
        return Extraction(str(value), "number_word")
    return None


@EXTRACTORS.register("number")
def number(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The first number after the last 'The answer is' when there is one, else the first number
    of the whole response (see `find_number`)."""
    body, prefix = answer_part(text)
    if prefix:
        found = find_number(body)
        if found is not None:
            return Extraction(found.value, prefix + found.rule)
    return find_number(text) or Extraction(None, UNPARSED)
