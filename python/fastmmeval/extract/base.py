"""The extractor interface and registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastmmeval.registry import Registry


@dataclass(frozen=True)
class Extraction:
    """The parsed answer (None when nothing could be parsed) and the rule that produced it."""

    value: str | None
    rule: str


# An extractor reads a response text (and the doc's options, if any) and returns an Extraction.
Extractor = Callable[[str, Sequence[str]], Extraction]
EXTRACTORS: Registry[Extractor] = Registry("extractor")
UNPARSED = "unparsed"
