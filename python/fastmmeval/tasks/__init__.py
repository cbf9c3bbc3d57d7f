"""Tasks: YAML protocols, dataset sources, prompt templates.

The API: `resolve(names, include_path)` turns task and group names into ready `Task`s; `Catalog`
lists every known task and group; `TaskConfig` is one parsed task file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import TaskConfig
from fastmmeval.tasks.task import Task

__all__ = ["Catalog", "Task", "TaskConfig", "resolve"]


def resolve(names: Iterable[str], include_path: Iterable[str | Path] = ()) -> list[Task]:
    """The tasks named (task or group names, groups expanded, each task once) from the built-in
    catalog plus the `include_path` folders."""
    return [Task(c) for c in Catalog(Path(p) for p in include_path).resolve(names)]
