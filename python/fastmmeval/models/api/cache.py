"""The persistent response cache of the API backends: answered payloads in sqlite, so a re-run or
`--resume` asks the API nothing it has answered before (failures are not cached)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastmmeval.models.api.calls import Reply
from fastmmeval.util import open_cache_db


class ResponseCache:
    """Answered payloads in a sqlite file, keyed by the hash of (backend, payload); safe to share
    between threads and processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = open_cache_db(path, "CREATE TABLE IF NOT EXISTS replies"
                                       " (key TEXT PRIMARY KEY, reply TEXT NOT NULL, at REAL)")

    @staticmethod
    def key(backend: str, payload: dict[str, Any]) -> str:
        """The content hash a payload is cached under."""
        blob = json.dumps({"backend": backend, "payload": payload}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, key: str) -> Reply | None:
        """The cached reply, if any."""
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return Reply(**json.loads(row[0])) if row else None

    def put(self, key: str, reply: Reply) -> None:
        """Keep a successful reply."""
        with self._lock:
            row = (key, json.dumps(asdict(reply)), time.time())
            self._db.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)", row)
            self._db.commit()


def default_cache_dir() -> Path:
    """$FASTMMEVAL_CACHE/api, or ~/.cache/fastmmeval/api."""
    return Path(os.environ.get("FASTMMEVAL_CACHE", Path.home() / ".cache" / "fastmmeval")) / "api"
