"""The extractor interface and registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmmeval.registry import Registry


@dataclass(frozen=True)
class Extraction:
    """The parsed answer (None when nothing could be parsed) and the rule that produced it."""

    value: str | None
    rule: str


# An extractor reads a response text, the doc's options (if any) and the doc's fields (for rules
# that need more, e.g. an answer type), and returns an Extraction.
Extractor = Callable[[str, Sequence[str], Mapping[str, Any] | None], Extraction]
EXTRACTORS: Registry[Extractor] = Registry("extractor")
UNPARSED = "unparsed"
