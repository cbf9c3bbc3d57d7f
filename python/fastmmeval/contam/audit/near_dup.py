"""Near-duplicate questions (the paper's "similar questions"): MinHash LSH over token bigrams.

Benchmark questions go into a `datasketch` MinHashLSH; each training text document that shares enough
bigrams with the benchmark to possibly reach the threshold (an exact, cheap numpy prefilter) is MinHashed
and looked up. A pair is reported when its estimated Jaccard similarity of token-bigram sets reaches the
threshold: the same sentence with a few words changed ("the largest bar" vs "the smallest bar") is found,
which 8-gram matching misses when the change falls in every window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from datasketch import MinHash, MinHashLSH

from fastmmeval.contam.ngram.hashing import TEXT_SEED, ngram_hashes
from fastmmeval.contam.ngram.settings import TokenBlock

SHINGLE = 2
NUM_PERM = 128
_SHINGLE_SEED = 0x51_B1_1E


def shingles(tokens: np.ndarray) -> np.ndarray:
    """The distinct token-bigram hashes of one document (uint64, sorted)."""
    if len(tokens) < SHINGLE:
        return np.zeros(0, np.uint64)
    return np.unique(ngram_hashes(tokens, np.zeros(1, np.int64), SHINGLE, _SHINGLE_SEED))


def _minhash(shingle_hashes: np.ndarray) -> MinHash:
    m = MinHash(num_perm=NUM_PERM)
    m.update_batch([h.tobytes() for h in shingle_hashes])
    return m


class MinHashIndex:
    """Shingle sets by key in a MinHash LSH: `query` finds the keys whose estimated Jaccard similarity to a
    set reaches the threshold."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
        self._hashes: dict[str, MinHash] = {}

    def __len__(self) -> int:
        return len(self._hashes)

    def add(self, key: str, shingle_hashes: np.ndarray) -> None:
        """Index the set under `key` (a new key)."""
        m = _minhash(shingle_hashes)
        self._lsh.insert(key, m)
        self._hashes[key] = m

    def query(self, shingle_hashes: np.ndarray) -> list[tuple[str, float]]:
        """(key, estimated Jaccard) of every indexed set at or above the threshold, best first (ties by key)."""
        m = _minhash(shingle_hashes)
        found = [(key, float(self._hashes[key].jaccard(m))) for key in self._lsh.query(m)]
        return sorted(((k, s) for k, s in found if s >= self.threshold), key=lambda p: (-p[1], p[0]))


@dataclass
class NearDupFinder:
    """Finds, for each benchmark question, training documents whose bigram sets are near-duplicates.

    `add_questions` first, then `feed` every text block of the corpus; `matches[key]` holds up to `max_ids`
    (training id, estimated Jaccard) pairs per question, best first."""

    threshold: float = 0.6
    max_ids: int = 3
    matches: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = MinHashIndex(self.threshold)
        self._min_size = 0
        self._vocab = np.zeros(0, np.uint64)
        self.docs_hashed = 0

    def add_questions(self, questions: Sequence[tuple[str, np.ndarray]]) -> None:
        """Index benchmark questions given as (key, token ids); questions with under two tokens are skipped."""
        sets = {key: shingles(tokens) for key, tokens in questions}
        sets = {key: s for key, s in sets.items() if len(s)}
        for key, s in sets.items():
            self._index.add(key, s)
        if sets:
            self._min_size = min(len(s) for s in sets.values())
            self._vocab = np.unique(np.concatenate([*sets.values(), self._vocab]))

    def feed(self, block: TokenBlock) -> None:
        """Look up every document of a text block that could be a near-duplicate of some question."""
        if block.seed != TEXT_SEED or not self._index or not len(block.tokens):
            return
        tokens = np.asarray(block.tokens, dtype=np.uint32)
        offsets = np.asarray(block.doc_offsets, dtype=np.int64)
        bounds = np.append(offsets, len(tokens))
        hashes = ngram_hashes(tokens, offsets, SHINGLE, _SHINGLE_SEED)
        # Window k of document d starts at token offsets[d] + k; windows per document = max(0, length - 1).
        per_doc = np.maximum(np.diff(bounds) - (SHINGLE - 1), 0)
        doc_of = np.repeat(np.arange(len(offsets)), per_doc)
        known = np.isin(hashes, self._vocab)
        # Jaccard >= t needs at least t * |question| shared shingles, and every question has >= min_size.
        shared = np.bincount(doc_of[known], minlength=len(offsets))
        need = max(1, int(np.ceil(self.threshold * self._min_size)))
        starts = np.concatenate([[0], np.cumsum(per_doc)])
        for d in np.flatnonzero(shared >= need):
            self.docs_hashed += 1
            for key, score in self._index.query(np.unique(hashes[starts[d] : starts[d + 1]])):
                self._record(key, str(block.ids[int(d)]), score)

    def _record(self, key: str, training_id: str, score: float) -> None:
        found = self.matches.setdefault(key, [])
        if any(t == training_id for t, _ in found):
            return
        found.append((training_id, score))
        found.sort(key=lambda p: -p[1])
        del found[self.max_ids :]
