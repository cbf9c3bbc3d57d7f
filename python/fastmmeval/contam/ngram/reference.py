"""Pure-Python / numpy references of the native n-gram counting (the index's map, merge and streaming
steps), which the tests hold the native code to."""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from fastmmeval.contam.ngram.hashing import ngram_hashes_reference
from fastmmeval.contam.ngram.settings import IndexSettings, ShardSource, TokenBlock


def reference_counts(sources: Sequence[ShardSource], settings: IndexSettings) -> collections.Counter:
    """Pure-Python Counter of every n-gram hash in the sources (unsaturated; documents containing it with
    dedup_docs), for tests."""
    counts: collections.Counter = collections.Counter()
    for source in sources:
        for block in source.blocks():
            tokens = np.asarray(block.tokens, dtype=np.uint32)
            bounds = [int(o) for o in block.doc_offsets] + [len(tokens)]
            for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
                doc = ngram_hashes_reference(tokens[begin:end], [0], settings.n, int(block.seed)).tolist()
                counts.update(set(doc) if settings.dedup_docs else doc)
    return counts


def count_hashes_reference(
    hashes: np.ndarray, cap: int, doc_of: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique hashes and their counts saturated at cap (uint8), in numpy; with doc_of (the document of
    each hash) a hash counts once per document. The numpy twin of one map spill."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    if doc_of is not None:
        pairs = np.unique(np.stack([hashes, np.asarray(doc_of, np.uint64)], axis=1), axis=0)
        hashes = pairs[:, 0]
    uniq, counts = np.unique(hashes, return_counts=True)
    return uniq, np.minimum(counts, cap).astype(np.uint8)


def merge_counts_reference(parts: Sequence[tuple[np.ndarray, np.ndarray]], cap: int) -> tuple[np.ndarray, np.ndarray]:
    """The numpy twin of a k-way merge: sorted unique hashes with counts summed and saturated at cap."""
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    hashes = np.concatenate([h for h, _ in parts]).astype(np.uint64)
    counts = np.concatenate([c for _, c in parts]).astype(np.int64)
    uniq, inverse = np.unique(hashes, return_inverse=True)
    summed = np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64)
    return uniq, np.minimum(summed, cap).astype(np.uint8)


def stream_block_reference(
    queries: np.ndarray, block: TokenBlock, settings: IndexSettings
) -> tuple[np.ndarray, list[set[int]]]:
    """Occurrences (documents containing, with dedup) of each sorted query hash in one block, and the set of
    documents containing each; the reference of one streaming step."""
    tokens = np.asarray(block.tokens, dtype=np.uint32)
    bounds = [int(o) for o in block.doc_offsets] + [len(tokens)]
    counts = np.zeros(len(queries), np.int64)
    docs: list[set[int]] = [set() for _ in range(len(queries))]
    where = {int(h): i for i, h in enumerate(queries)}
    for d, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        doc = ngram_hashes_reference(tokens[begin:end], [0], settings.n, int(block.seed)).tolist()
        for h in set(doc) if settings.dedup_docs else doc:
            if h in where:
                counts[where[h]] += 1
                docs[where[h]].add(d)
    return counts, docs
