"""Answer extraction: turn a model's free text into the answer a metric compares."""

from fastmmeval.extract import rules as _rules  # noqa: F401  (registers the built-in rules)
from fastmmeval.extract.base import EXTRACTORS, Extraction, Extractor

__all__ = ["EXTRACTORS", "Extraction", "Extractor"]
