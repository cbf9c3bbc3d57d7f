"""Pre-tokenized corpus shards, the terabyte path: raw token ids plus document offsets, read in blocks
of whole documents (`TokenShardSource`) and written by `write_token_shard`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED
from fastmmeval.contam.ngram.settings import BLOCK_TOKENS, CorpusError, TokenBlock, concat_docs
from fastmmeval.contam.ngram.shard_identity import file_identity

TOKEN_SUFFIXES = {".u16": np.uint16, ".u32": np.uint32}


class _DocIds(Sequence):
    """`<file>#<doc>` for every document of a pre-tokenized shard, made on demand."""

    def __init__(self, prefix: str, start: int, count: int) -> None:
        self.prefix, self.start, self.count = prefix, start, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        if not 0 <= i < self.count:
            raise IndexError(i)
        return f"{self.prefix}#{self.start + i}"


@dataclass
class TokenShardSource:
    """A pre-tokenized shard: `X.u16` or `X.u32` (raw little-endian token ids) and `X.u16.offsets` /
    `X.u32.offsets` (raw little-endian int64: the first token of each document, ascending from 0), read
    in blocks of whole documents of about `block_tokens` tokens (read, not mapped: mapped pages would count
    towards the build's memory budget). `modality` says whether the
    ids are text tokens or image tokens (e.g. 32 SEED codes per image, pre-computed on a GPU)."""

    path: Path
    modality: str = "text"
    block_tokens: int = BLOCK_TOKENS
    name: str = ""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.path.suffix not in TOKEN_SUFFIXES:
            raise CorpusError(f"{self.path}: a token shard ends in .u16 or .u32 (its token width)")
        if self.modality not in ("text", "image"):
            raise CorpusError(f"{self.path}: modality must be 'text' or 'image', not {self.modality!r}")
        self.name = self.name or str(self.path)

    @property
    def offsets_path(self) -> Path:
        """Where the document offsets live."""
        return self.path.with_name(self.path.name + ".offsets")

    def missing_images(self) -> int:
        """Always 0: a token shard references no image files."""
        return 0

    def identity(self) -> dict[str, Any]:
        """What decides this shard's tokens: its two files (resolved path, size, modification time) and modality."""
        return {"format": "tokens", "files": [file_identity(self.path), file_identity(self.offsets_path)],
                "modality": self.modality}  # fmt: skip

    def _offsets(self) -> tuple[int, np.ndarray]:
        """The shard's token count and its document offsets (memory-mapped)."""
        itemsize = np.dtype(TOKEN_SUFFIXES[self.path.suffix]).itemsize
        for p in (self.path, self.offsets_path):
            if not p.is_file():
                raise CorpusError(f"{p}: missing (a token shard needs its tokens and its .offsets file)")
        size = self.path.stat().st_size
        if size % itemsize:
            raise CorpusError(f"{self.path}: {size} bytes is not a whole number of {itemsize}-byte tokens")
        n_tokens = size // itemsize
        osize = self.offsets_path.stat().st_size
        if osize % 8:
            raise CorpusError(f"{self.offsets_path}: {osize} bytes is not a whole number of int64 offsets")
        offsets = np.memmap(self.offsets_path, dtype="<i8", mode="r") if osize else np.zeros(0, "<i8")
        if len(offsets) and (offsets[0] != 0 or offsets[-1] > n_tokens):
            raise CorpusError(f"{self.offsets_path}: offsets must start at 0 and stay within {n_tokens} tokens")
        return n_tokens, offsets

    def blocks(self) -> Iterator[TokenBlock]:
        """Blocks of whole documents (a single document longer than block_tokens is a block of its own)."""
        n_tokens, offsets = self._offsets()
        seed = TEXT_SEED if self.modality == "text" else IMAGE_SEED
        native = np.dtype(TOKEN_SUFFIXES[self.path.suffix])
        stored = native.newbyteorder("<")
        n_docs = len(offsets)
        first = 0
        with open(self.path, "rb") as f:
            while first < n_docs:
                start = int(offsets[first])
                # Whole documents ending within block_tokens of `start` (at least one document per block).
                limit = start + self.block_tokens
                fits = int(np.searchsorted(offsets, limit, side="right"))
                last = n_docs if fits == n_docs and n_tokens <= limit else fits - 1
                last = max(last, first + 1)
                end = int(offsets[last]) if last < n_docs else n_tokens
                doc_offs = np.asarray(offsets[first:last], dtype=np.int64) - start
                if np.any(np.diff(doc_offs) < 0):
                    raise CorpusError(f"{self.offsets_path}: offsets decrease within documents {first}..{last - 1}")
                f.seek(start * native.itemsize)
                block_tokens = np.fromfile(f, dtype=stored, count=end - start).astype(native, copy=False)
                yield TokenBlock(block_tokens, doc_offs, seed, _DocIds(self.path.name, first, last - first))
                first = last


def write_token_shard(path: Path, docs: Sequence[np.ndarray], dtype: type = np.uint32) -> None:
    """Write documents as a token shard (`path` ends in .u16 or .u32) plus its `.offsets` file."""
    path = Path(path)
    block = concat_docs([np.asarray(d) for d in docs], [""] * len(docs), TEXT_SEED)
    if dtype == np.uint16 and len(block.tokens) and int(block.tokens.max()) > 0xFFFF:
        raise CorpusError(f"{path}: token ids above 65535 do not fit a .u16 shard")
    path.write_bytes(block.tokens.astype(np.dtype(dtype).newbyteorder("<")).tobytes())
    path.with_name(path.name + ".offsets").write_bytes(block.doc_offsets.astype("<i8").tobytes())
