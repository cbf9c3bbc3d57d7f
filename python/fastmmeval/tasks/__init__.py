"""Tasks: YAML protocols, dataset sources, prompt templates.

The API: `resolve(names, include_path)` turns task and group names into ready `Task`s; `Catalog`
lists every known task and group; `TaskConfig` is one parsed task file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import TaskConfig, with_mc_mode
from fastmmeval.tasks.overrides import with_generation, with_system_instruction
from fastmmeval.tasks.task import Task

__all__ = ["Catalog", "Task", "TaskConfig", "resolve"]


def resolve(
    names: Iterable[str],
    include_path: Iterable[str | Path] = (),
    max_image_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_absolute_image_paths: bool = False,
    mc_mode: str | None = None,
    predict_only: bool = False,
    gen_kwargs: dict[str, Any] | None = None,
    system_instruction: str | None = None,
) -> list[Task]:
    """The tasks named (task or group names, groups expanded, each task once) from the built-in
    catalog plus the `include_path` folders, reading images under `max_image_pixels` (None: no cap)
    and absolute image paths only where the task file or `allow_absolute_image_paths` allows them;
    with `mc_mode` (gen or ppl) every multiple-choice task is asked that way; with `predict_only`
    none is scored; `gen_kwargs` (`tasks.overrides.parse_gen_kwargs`) override the generation settings of
    every task that generates, and `system_instruction` is a system turn before every prompt."""
    configs = Catalog(Path(p) for p in include_path).resolve(names)
    if mc_mode is not None:
        configs = [with_mc_mode(c, mc_mode) for c in configs]
    if gen_kwargs:
        configs = [with_generation(c, gen_kwargs) for c in configs]
    if system_instruction:
        configs = [with_system_instruction(c, system_instruction) for c in configs]
    return [Task(c, max_image_pixels, allow_absolute_image_paths, predict_only) for c in configs]
