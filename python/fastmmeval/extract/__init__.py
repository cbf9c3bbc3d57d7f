"""Answer extraction: turn a model's free text into the answer a metric compares."""

# Importing the rule modules registers their extractors.
from fastmmeval.extract import judge_assisted as _judge_assisted  # noqa: F401
from fastmmeval.extract import numbers as _numbers  # noqa: F401
from fastmmeval.extract import options as _options  # noqa: F401
from fastmmeval.extract import rules as _rules  # noqa: F401
from fastmmeval.extract import yesno as _yesno  # noqa: F401
from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction, Extractor

__all__ = ["EXTRACTORS", "UNPARSED", "Extraction", "Extractor"]
