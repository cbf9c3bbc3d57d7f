"""Levenshtein distance over code points: the batched native path and its pure-Python reference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastmmeval import _core


def levenshtein_distances(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Levenshtein distance (in code points) between a[i] and b[i] for every i, as int64."""
    return _core.levenshtein_distance(list(a), list(b))


def levenshtein_similarities(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """1 - distance / max(len(a[i]), len(b[i])) for every i (1.0 for two empty strings), as float64."""
    return _core.levenshtein_similarity(list(a), list(b))


def levenshtein_distance_reference(a: str, b: str) -> int:
    """Pure-Python twin of `levenshtein_distances` for one pair, for tests."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def levenshtein_similarity_reference(a: str, b: str) -> float:
    """Pure-Python twin of `levenshtein_similarities` for one pair, for tests."""
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - levenshtein_distance_reference(a, b) / longest
