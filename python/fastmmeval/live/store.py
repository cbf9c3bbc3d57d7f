"""A month's work folder: content-addressed blobs (screenshots, page text and HTML) and the stage
cache, a sqlite table of every stage result under a key of (stage, prompt, model and settings, input
hashes), so a rerun after kill -9 repeats no capture and no model call."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastmmeval.util import open_cache_db, write_bytes_atomic


def sha256_hex(data: bytes) -> str:
    """The hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def content_key(*parts: Any) -> str:
    """The sha256 of `parts` as canonical JSON: the key of a stage result or a record."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return sha256_hex(blob.encode("utf-8"))


class Blobs:
    """Files named by the sha256 of their bytes under `root/<2 hex>/<sha><suffix>`; a put of bytes
    already there writes nothing."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha: str, suffix: str) -> Path:
        """Where the blob `sha` with `suffix` (e.g. '.png') lives."""
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise ValueError(f"not a sha256 hex digest: {sha!r}")
        return self.root / sha[:2] / f"{sha}{suffix}"

    def put(self, data: bytes, suffix: str) -> str:
        """Store `data`; returns its sha256."""
        sha = sha256_hex(data)
        path = self.path(sha, suffix)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(path, data)
        return sha

    def get(self, sha: str, suffix: str) -> bytes:
        """The bytes of blob `sha`."""
        return self.path(sha, suffix).read_bytes()


class StageCache:
    """Stage results (JSON values) in a sqlite file, safe to share between threads; each put is
    committed at once, so a killed build keeps everything it finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims: dict[str, list[Any]] = {}  # key -> [its lock, how many threads hold or wait for it]
        self._db = open_cache_db(path, "CREATE TABLE IF NOT EXISTS results"
                                       " (key TEXT PRIMARY KEY, stage TEXT NOT NULL, value TEXT NOT NULL, at REAL)")

    @contextmanager
    def claim(self, key: str) -> Iterator[None]:
        """Hold `key` while its result is computed: another thread claiming it waits until then (and then
        finds the result cached, unless it failed)."""
        with self._lock:
            gate = self._claims.setdefault(key, [threading.Lock(), 0])
            gate[1] += 1
        try:
            with gate[0]:
                yield
        finally:
            with self._lock:
                gate[1] -= 1
                if gate[1] == 0:
                    del self._claims[key]

    def get(self, key: str) -> Any | None:
        """The value cached under `key`, or None."""
        with self._lock:
            row = self._db.execute("SELECT value FROM results WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, stage: str, value: Any) -> None:
        """Keep `value` (JSON-able) under `key`."""
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)", (key, stage, text, time.time()))
            self._db.commit()

    def counts(self) -> dict[str, int]:
        """How many results each stage has cached."""
        with self._lock:
            rows = self._db.execute("SELECT stage, COUNT(*) FROM results GROUP BY stage").fetchall()
        return dict(rows)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


@dataclass(frozen=True)
class WorkFolder:
    """A pipeline's folder with its `work/`: the sqlite stage cache and the blobs, under `root`."""

    root: Path

    @property
    def cache_path(self) -> Path:
        """The sqlite stage cache."""
        return self.root / "work" / "cache.sqlite"

    @property
    def blobs(self) -> Blobs:
        """The blobs (screenshots, images, page texts), named by sha256."""
        return Blobs(self.root / "work" / "blobs")
