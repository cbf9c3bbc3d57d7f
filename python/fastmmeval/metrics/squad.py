"""SQuAD's answer normalisation and exact match, as the official SQuAD evaluation script
(`normalize_answer`, `compute_exact`) computes them; WebSRC's own evaluation uses the same."""

from __future__ import annotations

import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_squad_answer(text: str) -> str:
    """Lower-cased, ASCII punctuation deleted, the words a, an and the deleted, whitespace runs as
    one space, ends trimmed."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact_match(prediction: str, answer: str) -> int:
    """1 when the prediction and the answer are equal after `normalize_squad_answer`, else 0."""
    return int(normalize_squad_answer(prediction) == normalize_squad_answer(answer))
