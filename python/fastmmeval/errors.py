"""User-facing errors: one line that names the file, field or item at fault."""

from __future__ import annotations

from enum import Enum


class FastmmevalError(Exception):
    """An error caused by input (a task file, a flag, a dataset row), shown as one line."""


class ConfigError(FastmmevalError):
    """A task file, flag or model argument is malformed or names something unknown."""


class FailureKind(str, Enum):
    """Why a doc has no score. The value is the key `results.json` counts it under (`failures`) and
    the sample's `failure_kind`; `--retry_failed` asks the model again for MODEL_ERROR docs."""

    UNREADABLE_IMAGE = "unreadable image"
    MISSING_FIELD = "missing field"
    MISSING_IMAGE_FIELD = "missing image field"
    MISSING_TARGET = "missing target"
    MODEL_ERROR = "model error"
    OTHER = "other"  # a field of the wrong form, a value the benchmark's own code refuses


class DocError(FastmmevalError):
    """One document cannot be turned into a request or scored (missing field, unreadable image)."""

    def __init__(self, message: str, kind: FailureKind = FailureKind.OTHER) -> None:
        super().__init__(message)
        self.kind = kind

    def at(self, where: str) -> DocError:
        """The same error with `where` (the task and doc) in front."""
        return DocError(f"{where}: {self}", self.kind)
