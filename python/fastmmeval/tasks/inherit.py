"""Task-file inheritance: `extends: <task file or task name>` takes every setting of the parent and
applies the child's on top, so a variant (a lite subset, a split of the same benchmark) holds only the
lines that differ.

Merging: a mapping merges key by key (recursively); any other value replaces the parent's; `KEY: null`
drops an inherited key; `KEY+: [...]` appends to an inherited list. The merged mapping is what the
task schema reads, so the fingerprint hashes the resolved protocol."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastmmeval.errors import ConfigError
from fastmmeval.tasks.yaml_lines import LineDict, load_yaml

EXTENDS = "extends"
# Finds a parent by task name: its file, its mapping as written (before its own `extends` is resolved) and
# the task folder that file is in (which its own `extends` of a file may not leave).
FindTask = Callable[[str], tuple[Path, LineDict, Path] | None]


def resolve_extends(path: Path, data: LineDict, root: Path, find_task: FindTask | None = None) -> LineDict:
    """The task mapping read from `path` with its `extends:` chain applied (itself when it has none).
    A parent is a task file (a path ending in .yaml, relative to the child's folder and inside `root`)
    or, through `find_task`, a task name; a cycle is refused naming the file and line."""
    return _resolve(path, data, root, find_task, ())


def _resolve(path: Path, data: LineDict, root: Path, find_task: FindTask | None, chain: tuple[Path, ...]) -> LineDict:
    if EXTENDS not in data:
        return data
    ref = data[EXTENDS]
    where = data.where(EXTENDS)
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError(f"{where}: field 'extends': expected a task file or a task name, got {ref!r}")
    parent_path, parent, parent_root = _find_parent(ref, path, root, find_task, where)
    chain = (*chain, path.resolve())
    if parent_path.resolve() in chain:
        names = " -> ".join(p.name for p in (*chain, parent_path))
        raise ConfigError(f"{where}: extends: {ref!r} makes a cycle ({names})")
    parent = _resolve(parent_path, parent, parent_root, find_task, chain)
    child = LineDict({k: v for k, v in data.items() if k != EXTENDS})
    _copy_marks(data, child)
    return merge(parent, child)


def _find_parent(
    ref: str, path: Path, root: Path, find_task: FindTask | None, where: str
) -> tuple[Path, LineDict, Path]:
    if ref.endswith((".yaml", ".yml")):
        parent_path = (path.parent / ref).resolve()
        if not parent_path.is_relative_to(root.resolve()):
            raise ConfigError(f"{where}: extends: {ref!r} is outside the task folder {root}")
        if not parent_path.is_file():
            raise ConfigError(f"{where}: extends: no task file {ref!r} next to {path.name}")
        return parent_path, load_yaml(parent_path), root
    found = find_task(ref) if find_task is not None else None
    if found is None:
        hint = "" if find_task is not None else " (a task name is looked up in the catalog; here give a .yaml file)"
        raise ConfigError(f"{where}: extends: no task named {ref!r}{hint}")
    return found


def merge(parent: LineDict, child: LineDict) -> LineDict:
    """`child`'s settings applied on top of `parent`'s (see the module docstring), each key keeping
    the file and line it was written at."""
    out = LineDict(parent)
    _copy_marks(parent, out)
    out.line, out.path = child.line, child.path
    for key, value in child.items():
        base = key[:-1] if isinstance(key, str) and key.endswith("+") else None
        if base is not None:
            inherited = out.get(base)
            if not isinstance(inherited, list) or not isinstance(value, list):
                raise ConfigError(f"{child.where(key)}: field {key!r}: appends a list to an inherited list {base!r}")
            value, key = [*inherited, *value], base
        if value is None:
            out.pop(key, None)
            continue
        if isinstance(value, LineDict) and isinstance(out.get(key), LineDict):
            value = merge(out[key], value)
        out[key] = value
        out.key_lines[key] = child.line_of(key if base is None else f"{key}+")
        out.key_paths[key] = child.path_of(key if base is None else f"{key}+")  # type: ignore[assignment]
    return out


def _copy_marks(src: LineDict, dst: LineDict) -> None:
    dst.line, dst.path = src.line, src.path
    dst.key_lines = dict(src.key_lines)
    dst.key_paths = {k: p for k in src if (p := src.path_of(k)) is not None}

