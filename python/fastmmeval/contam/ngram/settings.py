"""What an n-gram count reads and how it counts: token blocks of whole documents (`TokenBlock`) from
shard sources (`ShardSource`, which raise `CorpusError` on malformed input), and the index settings
(`IndexSettings`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fastmmeval.contam.ngram.segment import NgramIndexError
from fastmmeval.errors import FastmmevalError

# Tokens a source reads per block (whole documents; a longer document is a block of its own).
BLOCK_TOKENS = 1 << 22
# Images a build names among those it could not read (all of them are counted).
NAMED_MISSING = 20


class CorpusError(FastmmevalError):
    """A corpus shard is malformed: names the file and the record."""


@dataclass(frozen=True)
class TokenBlock:
    """Whole documents of one modality: doc i is tokens[doc_offsets[i]:doc_offsets[i+1]] (last ends at len(tokens))."""

    tokens: np.ndarray  # 1-D uint16 or uint32
    doc_offsets: np.ndarray  # 1-D int64, ascending, first 0 (empty docs allowed)
    seed: int  # TEXT_SEED or IMAGE_SEED
    ids: Sequence[str]  # training id of each doc


class ShardSource(Protocol):
    """One shard of a training corpus, read lazily in bounded blocks; picklable."""

    name: str

    def blocks(self) -> Iterator[TokenBlock]:
        """The shard's documents as bounded-size blocks."""
        ...

    def missing_images(self) -> int:
        """Images referenced but unreadable, counted while blocks() ran."""
        ...


def missing_image_refs(source: ShardSource) -> list[str]:
    """The unreadable images a source names (the first NAMED_MISSING, as 'record <id>: <ref> (<why>)'); none for
    a source that names none (naming them is optional)."""
    named = getattr(source, "missing_image_refs", None)
    return [] if named is None else list(named())[:NAMED_MISSING]


@dataclass(frozen=True)
class IndexSettings:
    """How an index counts: n-gram length, the frequency threshold, partitions, memory budget, dedup, threads."""

    n: int = 8
    threshold: int = 10  # an n-gram seen more than `threshold` times is "frequent"; counts saturate at threshold + 1
    partition_bits: int = 8  # partitions by top hash bits
    memory_bytes: int = 1 << 30  # map budget (--memory); peak RSS stays within it + 20%
    dedup_docs: bool = False  # count documents containing an n-gram instead of occurrences
    threads: int = 2

    def __post_init__(self) -> None:
        # Named by the flag that sets each (partition_bits has none: only a hand-edited manifest changes it).
        if not 1 <= self.n <= 64:
            raise NgramIndexError(f"--n must be in 1..64, got {self.n}")
        if not 0 <= self.threshold <= 254:
            raise NgramIndexError(f"--threshold must be in 0..254 (counts are uint8), got {self.threshold}")
        if not 0 <= self.partition_bits <= 16:
            raise NgramIndexError(f"partition_bits of the index settings must be in 0..16, got {self.partition_bits}")
        if self.memory_bytes < 1 << 20:
            raise NgramIndexError(f"--memory must be at least 1MB, got {self.memory_bytes:,} bytes")
        if self.threads < 1:
            raise NgramIndexError(f"--threads must be at least 1, got {self.threads}")

    @property
    def cap(self) -> int:
        """The saturated count: every count above the threshold is stored as threshold + 1."""
        return self.threshold + 1

    @property
    def partitions(self) -> int:
        """The number of partitions (and of segment files per generation at most)."""
        return 1 << self.partition_bits


def check_block(block: TokenBlock, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The block's tokens and document offsets as contiguous arrays, or an error naming `where`."""
    tokens = np.asarray(block.tokens)
    if tokens.dtype not in (np.uint16, np.uint32) or tokens.ndim != 1:
        raise NgramIndexError(f"{where}: tokens must be 1-D uint16 or uint32, not {tokens.dtype} {tokens.shape}")
    offsets = np.ascontiguousarray(block.doc_offsets, dtype=np.int64)
    if offsets.ndim != 1 or (len(offsets) and (offsets[0] != 0 or offsets[-1] > len(tokens))):
        raise NgramIndexError(f"{where}: doc_offsets must start at 0 and end within the {len(tokens)} tokens")
    if len(offsets) > 1 and bool((np.diff(offsets) < 0).any()):
        raise NgramIndexError(f"{where}: doc_offsets must be non-decreasing")
    if len(offsets) == 0 and len(tokens):
        raise NgramIndexError(f"{where}: tokens without documents (doc_offsets is empty)")
    if len(block.ids) != len(offsets):
        raise NgramIndexError(f"{where}: {len(block.ids)} ids for {len(offsets)} documents")
    return np.ascontiguousarray(tokens), offsets


def concat_arrays(docs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Documents (token arrays) as one uint32 array and where each document starts (int64)."""
    lengths = np.fromiter((len(d) for d in docs), np.int64, count=len(docs))
    offsets = np.zeros(len(docs), np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    tokens = np.concatenate(docs).astype(np.uint32, copy=False) if docs else np.zeros(0, np.uint32)
    return tokens, offsets


def concat_docs(docs: Sequence[np.ndarray], ids: Sequence[str], seed: int) -> TokenBlock:
    """Documents (token arrays) as one TokenBlock."""
    tokens, offsets = concat_arrays(docs)
    return TokenBlock(tokens, offsets, seed, list(ids))
