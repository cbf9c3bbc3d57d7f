"""Hashes of n-token windows inside documents: the native path and its reference."""

from __future__ import annotations

import numpy as np
import xxhash

from fastmmeval import _core

# Text and image n-grams are hashed with different seeds so a text window never matches an image one.
TEXT_SEED = 0
IMAGE_SEED = 0x1A6E_5EED


def ngram_hashes(tokens: np.ndarray, doc_offsets: np.ndarray, n: int = 8, seed: int = 0) -> np.ndarray:
    """XXH3-64 of every window of `n` uint32 tokens that stays inside one document
    (documents start at `doc_offsets`; the last ends at len(tokens)), as uint64."""
    return _core.ngram_hashes(
        np.ascontiguousarray(tokens, dtype=np.uint32), np.ascontiguousarray(doc_offsets, dtype=np.int64), n, seed
    )


def ngram_hashes_reference(
    tokens: np.ndarray, doc_offsets: np.ndarray, n: int = 8, seed: int = 0
) -> np.ndarray:
    """Pure-Python twin of `ngram_hashes` (the `xxhash` package), for tests."""
    tokens = np.asarray(tokens, dtype="<u4")
    bounds = [int(o) for o in doc_offsets] + [len(tokens)]
    out = [
        xxhash.xxh3_64_intdigest(tokens[s : s + n].tobytes(), seed=seed)
        for begin, end in zip(bounds[:-1], bounds[1:], strict=True)
        for s in range(begin, end - n + 1)
    ]
    return np.array(out, dtype=np.uint64)
