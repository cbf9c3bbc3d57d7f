"""Tasks: YAML protocols, dataset sources, prompt templates.

The API: `resolve(names, include_path)` turns task and group names into ready `Task`s; `Catalog`
lists every known task and group; `TaskConfig` is one parsed task file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import TaskConfig
from fastmmeval.tasks.task import Task

__all__ = ["Catalog", "Task", "TaskConfig", "resolve"]


def resolve(
    names: Iterable[str],
    include_path: Iterable[str | Path] = (),
    max_image_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_absolute_image_paths: bool = False,
) -> list[Task]:
    """The tasks named (task or group names, groups expanded, each task once) from the built-in
    catalog plus the `include_path` folders, reading images under `max_image_pixels` (None: no cap)
    and absolute image paths only where the task file or `allow_absolute_image_paths` allows them."""
    configs = Catalog(Path(p) for p in include_path).resolve(names)
    return [Task(c, max_image_pixels, allow_absolute_image_paths) for c in configs]
