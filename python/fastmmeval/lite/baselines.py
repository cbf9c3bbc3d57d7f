"""Subset baselines to compare k-center against: random, k-means and stratified-by-category."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastmmeval.errors import ConfigError


def _check_size(n: int, k: int) -> None:
    if not 0 < k <= n:
        raise ConfigError(f"subset size must be in 1..{n} (the number of docs), got {k}")


def random_subset(n: int, k: int, seed: int = 0) -> np.ndarray:
    """`k` distinct indices of `n` drawn uniformly with a seeded generator (int64, draw order)."""
    _check_size(n, k)
    return np.random.default_rng(seed).permutation(n)[:k].astype(np.int64)


def kmeans_subset(features: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """The doc nearest each of `k` k-means centroids (sklearn, seeded); when two centroids share a
    nearest doc, the later one takes its nearest doc not yet taken. Int64, centroid order."""
    from sklearn.cluster import KMeans

    x = np.asarray(features, dtype=np.float32)
    _check_size(len(x), k)
    centroids = KMeans(n_clusters=k, random_state=seed, n_init=1).fit(x).cluster_centers_
    taken: list[int] = []
    used = np.zeros(len(x), dtype=bool)
    x_sq = np.einsum("ij,ij->i", x, x)
    for c in centroids.astype(np.float32):
        d = x_sq - 2.0 * (x @ c)
        d[used] = np.inf
        best = int(np.argmin(d))
        used[best] = True
        taken.append(best)
    return np.asarray(taken, dtype=np.int64)


def stratified_subset(categories: Sequence[object], k: int, seed: int = 0) -> np.ndarray:
    """`k` indices with each category represented in proportion to its size (largest remainders
    get the leftover slots, ties to the larger category), drawn at random within a category
    (seeded). Int64, grouped by category in first-seen order."""
    n = len(categories)
    _check_size(n, k)
    groups: dict[object, list[int]] = {}
    for i, c in enumerate(categories):
        groups.setdefault(c, []).append(i)
    sizes = np.array([len(g) for g in groups.values()])
    quota = k * sizes / n
    take = np.floor(quota).astype(int)
    order = sorted(range(len(sizes)), key=lambda g: (-(quota[g] - take[g]), -sizes[g], g))
    for g in order[: k - int(take.sum())]:
        take[g] += 1
    rng = np.random.default_rng(seed)
    picks = [rng.permutation(members)[:t] for members, t in zip(groups.values(), take, strict=True)]
    return np.concatenate(picks).astype(np.int64)
