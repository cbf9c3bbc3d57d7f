"""Doc processors: the Python a benchmark needs between its hub row and its prompt.

A task file names one with `process_doc: NAME`; the function takes the row (a dict) and returns
the fields it derives (e.g. an `options` list parsed from a string column, or a question with
lmms-eval's pre- and post-prompt), which are added to the row's fields. Processors are registered
by the package's task modules (`fastmmeval.tasks.families.*`), never loaded from task files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.registry import Registry
from fastmmeval.tasks.config import DatasetSpec

DocProcessor = Callable[[dict[str, Any]], dict[str, Any]]

DOC_PROCESSORS: Registry[DocProcessor] = Registry("doc processor")

# Hub splits a processor reads besides the task's own (e.g. GQA's images, a config of their own), by
# processor name: `fastmmeval tasks --download` saves them too.
PROCESSOR_DATA: dict[str, list[tuple[DatasetSpec, str]]] = {}


def text_field(fields: Mapping[str, Any], name: str, benchmark: str) -> str:
    """The string doc field `name`; DocError naming the benchmark and field when it is missing or not a string."""
    value = fields.get(name)
    if not isinstance(value, str):
        raise DocError(f"{benchmark}: doc field {name!r} is missing or not a string")
    return value
