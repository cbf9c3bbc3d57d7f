"""Dataset sources: where a task's rows come from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastmmeval.registry import Registry

# A builder writes a dataset's files (jsonl/parquet + images) into the folder it is given;
# the task's `dataset.data_files` are then read relative to that folder.
DATASET_BUILDERS: Registry[Callable[[Path], None]] = Registry("dataset builder")
