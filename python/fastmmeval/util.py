"""Small helpers shared by every flow: atomic file writes, JSON Lines reading, sqlite caches, the usable
cores, lazy API exports."""

from __future__ import annotations

import glob
import importlib
import json
import os
import secrets
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError, FastmmevalError


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _create_temp(path: Path) -> tuple[int, str]:
    # Not tempfile.mkstemp: its files are 0600; these get 0666 less the umask, like any other file we write.
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue


def atomic_temps(path: Path) -> list[Path]:
    """The temporary files of atomic writes of `path` now in its folder: in progress, or left by a killed one."""
    return list(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))


def remove_stale_temps(path: Path) -> None:
    """Delete the temporary files that atomic writes of `path` left when they were killed mid-write. Only for a
    writer that knows no one else is writing `path` now (it holds the folder's lock)."""
    for tmp in atomic_temps(path):
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn one."""
    write_bytes_atomic(path, (json.dumps(data, indent=2, sort_keys=False, default=str) + "\n").encode("utf-8"))


def open_cache_db(path: Path, table: str) -> sqlite3.Connection:
    """A sqlite cache at `path` (its folder made) with `table` (a CREATE TABLE IF NOT EXISTS statement),
    shareable between threads (callers hold their own lock) and processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    # A commit survives a killed process without an fsync per entry; a power cut may lose the last few
    # entries, which only costs computing them again.
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(table)
    db.commit()
    return db


def iter_jsonl(path: Path, error: type[FastmmevalError] = ConfigError) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON Lines file, read lazily; a line that is not
    UTF-8 or not a JSON object raises `error` naming the file and line."""
    with Path(path).open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise error(f"{path}:{lineno}: not UTF-8 text (byte {e.start + 1} of the line)") from None
            except RecursionError:
                raise error(f"{path}:{lineno}: JSON nested too deeply") from None
            except ValueError as e:  # JSONDecodeError, or an integer literal too long to convert
                raise error(f"{path}:{lineno}: not valid JSON ({getattr(e, 'msg', e)})") from None
            if not isinstance(row, dict):
                raise error(f"{path}:{lineno}: each line must be a JSON object")
            yield lineno, row


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each exported name from its sub-module (`exports`:
    name -> sub-module) on first use: for flows whose imports would slow the start of every command."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
