"""Image tokens of record shards kept beside an index (`<index>/image_tokens/`), so that a scan naming the
training ids of image matches reads each shard's image tokens back instead of decoding and tokenizing every
training image again (with SEED: running the model again).

`contam index` and `contam add` write one entry per record shard as they tokenize its images. `contam scan`
reads an entry only while it still describes the shard: the same file (size and modification time), the same
image tokenizer (fingerprint), the same reading (format, image root, image and id fields), and every image file
the shard references in the state it was in when the entry was written (size and modification time, or
missing). Otherwise the shard's images are decoded again, and the scan says so.

An entry is a folder: `tokens.u32` and `tokens.u32.offsets` (a token shard: one document per readable image,
in corpus order), `ids.jsonl` (the training id of each of those images) and `meta.json`, written last; the
folder is renamed into place, so a killed build leaves no entry that could be read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fastmmeval.contam.ngram.build import safe_name
from fastmmeval.contam.ngram.settings import CorpusError, ShardSource, TokenBlock
from fastmmeval.contam.ngram.token_shards import TokenShardSource

CACHE_VERSION = 1
CACHE_FOLDER = "image_tokens"
_TMP = ".tmp-"


@dataclass(frozen=True)
class ImageTokenCache:
    """A folder of image-token entries that record sources write to (`write=True`, while an index is built)
    or read from (while a scan streams the corpus)."""

    folder: Path
    write: bool = False


@runtime_checkable
class KeepsImageTokens(Protocol):
    """A shard source that can keep its image tokens in an image cache, or look them up there."""

    def with_image_cache(self, cache: ImageTokenCache) -> ShardSource:
        """The source keeping (or looking up) its image tokens in `cache`."""
        ...


def with_image_cache(source: ShardSource, cache: ImageTokenCache) -> ShardSource:
    """The source keeping (or looking up) its image tokens in `cache` if it can; any other source as it is."""
    return source.with_image_cache(cache) if isinstance(source, KeepsImageTokens) else source


def file_state(path: Path) -> list[int] | None:
    """[size, modification time in ns] of a file, None if it cannot be read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None
    return [st.st_size, st.st_mtime_ns]


class RefStates:
    """A running digest of the state of each image a shard references, in order: a file's size and modification
    time (or its absence); an embedded image counts by position only. The references themselves are the
    shard's content, which the shard's own state covers."""

    def __init__(self) -> None:
        self._digest = hashlib.blake2b(digest_size=16)

    def add(self, path: Path | None) -> None:
        """Adds the next reference: the image file's path, or None for an embedded image."""
        self._digest.update(f"{'embedded' if path is None else file_state(path)}\n".encode())

    def add_refused(self) -> None:
        """Adds the next reference: a path that is not read (outside the image root)."""
        self._digest.update(b"refused\n")

    def hexdigest(self) -> str:
        """The digest of the references added so far."""
        return self._digest.hexdigest()


def entry_path(cache: ImageTokenCache, describe: dict[str, Any]) -> Path:
    """Where the entry of a shard read as `describe` says lives (one per shard file, tokenizer and reading)."""
    key = json.dumps({k: describe[k] for k in sorted(describe) if k != "shard_state"}, sort_keys=True)
    return cache.folder / safe_name(Path(describe["shard"]).name, key)


class EntryWriter:
    """Writes one entry as a shard's images are tokenized: `add` each batch in corpus order, then `commit`.
    Used as a context manager, it removes what it wrote unless committed."""

    def __init__(self, path: Path, describe: dict[str, Any]) -> None:
        self.path = path
        self.describe = describe
        self.tmp = path.with_name(f"{path.name}{_TMP}{os.getpid()}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        self._tokens = open(self.tmp / "tokens.u32", "wb")  # noqa: SIM115 - closed by commit or __exit__
        self._offsets = open(self.tmp / "tokens.u32.offsets", "wb")  # noqa: SIM115
        self._ids = open(self.tmp / "ids.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        self._written = 0
        self.images = 0

    def add(self, tokens: np.ndarray, ids: Sequence[str]) -> None:
        """Appends a batch: one row of tokens per image, with the images' training ids."""
        if not len(ids):
            return
        tokens = np.asarray(tokens, dtype="<u4").reshape(len(ids), -1)
        (self._written + tokens.shape[1] * np.arange(len(tokens), dtype="<i8")).tofile(self._offsets)
        tokens.tofile(self._tokens)
        self._ids.writelines(json.dumps(i) + "\n" for i in ids)
        self._written += tokens.size
        self.images += len(tokens)

    def _close(self) -> None:
        for f in (self._tokens, self._offsets, self._ids):
            f.close()

    def commit(self, refs: str, missing: int) -> None:
        """Seals the entry: `refs` is the digest of the shard's image references, `missing` the images that
        could not be read."""
        self._close()
        meta = {"version": CACHE_VERSION, **self.describe, "refs": refs, "images": self.images, "missing": missing}
        (self.tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        shutil.rmtree(self.path, ignore_errors=True)
        os.replace(self.tmp, self.path)

    def __enter__(self) -> EntryWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class Entry:
    """A readable entry: its meta and where it lives."""

    path: Path
    meta: dict[str, Any]

    @property
    def refs(self) -> str:
        """The digest of the shard's image references when the entry was written."""
        return str(self.meta["refs"])

    @property
    def missing(self) -> int:
        """Images the shard referenced that could not be read."""
        return int(self.meta["missing"])

    def blocks(self, block_tokens: int) -> Iterator[TokenBlock]:
        """The shard's image blocks, as tokenizing its images gives them (blocks may be cut elsewhere); a
        damaged entry is a CorpusError naming it and `--no_image_cache`."""
        shard = TokenShardSource(self.path / "tokens.u32", "image", block_tokens)
        try:
            with open(self.path / "ids.jsonl", encoding="utf-8") as ids:
                for block in shard.blocks():
                    names = [json.loads(ids.readline()) for _ in range(len(block.ids))]
                    if not all(isinstance(name, str) for name in names):
                        raise ValueError("ids.jsonl holds a training id that is not a string")
                    yield TokenBlock(block.tokens, block.doc_offsets, block.seed, names)
        except (CorpusError, OSError, ValueError) as e:
            raise CorpusError(
                f"image-token cache entry {self.path} is damaged ({e}); delete that folder, or scan with "
                "--no_image_cache to tokenize the shard's images again"
            ) from None


def read_entry(cache: ImageTokenCache, describe: dict[str, Any]) -> Entry | None:
    """The entry written for a shard read as `describe` says (whatever the shard's state was then), or None."""
    path = entry_path(cache, describe)
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("version") != CACHE_VERSION or any(meta.get(k) != v for k, v in describe.items() if k != "shard_state"):
        return None
    offsets = file_state(path / "tokens.u32.offsets")
    if offsets is None or offsets[0] != 8 * int(meta.get("images", -1)):  # damaged: as good as none
        return None
    return Entry(path, meta)


def sweep(folder: Path) -> None:
    """Deletes entries a killed build left half written."""
    if folder.is_dir():
        for p in folder.glob(f"*{_TMP}*"):
            shutil.rmtree(p, ignore_errors=True)


def usage(folder: Path) -> dict[str, int]:
    """How many entries the folder holds and their bytes."""
    entries = [p for p in folder.glob("*/meta.json")] if folder.is_dir() else []
    size = sum(f.stat().st_size for e in entries for f in e.parent.iterdir())
    return {"entries": len(entries), "bytes": size}
