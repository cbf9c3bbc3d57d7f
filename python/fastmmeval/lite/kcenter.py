"""Greedy k-center selection: pick k docs so that every doc is close to a picked one.

Greedy k-center (farthest-point traversal) starts from one row and repeatedly adds the row farthest
(Euclidean) from its nearest chosen row; its covering radius (the largest distance from any row to
its nearest center) is within 2x of the best possible. Every path here follows the same rules:

- the first center is `first_center(n, seed)`: `numpy.random.default_rng(seed).integers(n)`;
- ties go to the lowest row index, and a chosen row is never chosen again (so k = n is a permutation).

Paths: `device="cpu"` runs `fastmmeval._core.greedy_k_center` (C++, AVX2/F16C/FMA when the CPU has
them, all cores, one pass over the rows per center); `device="cuda"` runs the fused Triton kernel
in `fastmmeval.triton_kernels.kcenter`. `storage="float16"` (the default) stores the features as
fp16 and accumulates distances in fp32: half the bytes of fp32 per pass, and the pass is bound by
memory bandwidth. `greedy_k_center_reference` is the plain float64 numpy twin.
"""

from __future__ import annotations

import numpy as np
from tqdm import tqdm

from fastmmeval import _core
from fastmmeval.errors import ConfigError, FastmmevalError

STORAGES = ("float16", "float32")
FLOAT16_MAX = 65504.0
_REFERENCE_CHUNK = 4096  # rows per block in the numpy paths (bounds their temporary memory)


class FeatureError(FastmmevalError):
    """Features k-center cannot measure distances on (wrong shape, non-finite, beyond float16)."""


def first_center(n: int, seed: int) -> int:
    """The index of the first center for `n` rows: `numpy.random.default_rng(seed).integers(n)`."""
    return int(np.random.default_rng(seed).integers(n))


def _checked(features: np.ndarray, k: int, storage: str) -> np.ndarray:
    """`features` as an array, after checking everything the paths rely on."""
    if storage not in STORAGES:
        raise ConfigError(f"k-center storage must be one of {', '.join(STORAGES)}, got {storage!r}")
    x = np.asarray(features)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise FeatureError(f"k-center features must be a non-empty 2-D array (docs x dims), got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.integer):
        raise FeatureError(f"k-center features must be numbers, got dtype {x.dtype}")
    n = x.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ConfigError(f"k-center size k must be an integer in 1..{n} (the number of docs), got {k!r}")
    lo, hi = float(x.min()), float(x.max())  # NaN and inf propagate into these two reductions
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad = int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0])
        raise FeatureError(f"k-center features of doc {bad} are not finite (NaN or inf)")
    limit = FLOAT16_MAX if storage == "float16" else float(np.finfo(np.float32).max)
    if max(-lo, hi) > limit:
        raise FeatureError(f"k-center features reach {max(-lo, hi):.4g}, beyond {storage}'s {limit:.6g}: "
                           "normalize them" + (" or use storage='float32'" if storage == "float16" else ""))
    return x


def greedy_k_center(features: np.ndarray, k: int, seed: int = 0, device: str = "cpu",
                    storage: str = "float16", progress: bool = True) -> np.ndarray:
    """Indices (int64, pick order) of `k` rows of `features` (docs x dims) chosen by greedy k-center.

    The first center is `first_center(len(features), seed)`; each next one is the row farthest from
    its nearest center (Euclidean, ties to the lowest index). `device` is "cpu" or "cuda"
    ("cuda:N"); `storage` "float16" (fp32 accumulation) or "float32". `progress` shows a tqdm bar
    of picks (CPU path)."""
    if device != "cpu" and not device.startswith("cuda"):
        raise ConfigError(f"k-center device must be 'cpu' or 'cuda[:N]', got {device!r}")
    x = _checked(features, k, storage)
    x = np.ascontiguousarray(x, dtype=np.float16 if storage == "float16" and x.dtype == np.float16 else np.float32)
    first = first_center(len(x), seed)
    if device == "cpu":
        with tqdm(total=int(k), desc="k-center", unit="center", disable=not progress) as bar:
            return _core.greedy_k_center(x, int(k), first, float16=storage == "float16",
                                         on_pick=lambda done: bar.update(done - bar.n))
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"k-center device {device!r}: torch sees no CUDA device")
    try:
        from fastmmeval.triton_kernels.kcenter import greedy_k_center_triton
    except ImportError as err:
        raise ConfigError(f"k-center on {device!r} needs Triton (pip install 'fastmmeval[lite]'): {err}") from err
    dtype = torch.float16 if storage == "float16" else torch.float32
    on_device = torch.from_numpy(x).to(device=device, dtype=dtype)
    return greedy_k_center_triton(on_device, int(k), first).cpu().numpy()


def greedy_k_center_reference(features: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Plain numpy (float64) twin of `greedy_k_center`: same first center, ties and no repeats."""
    x = _checked(features, k, "float32").astype(np.float64)  # a copy: the rows are read many times
    n = len(x)
    min_d2 = np.full(n, np.inf)
    centers = [first_center(n, seed)]
    while True:
        c = centers[-1]
        min_d2[c] = -1.0
        if len(centers) == k:
            return np.array(centers, dtype=np.int64)
        for lo in range(0, n, _REFERENCE_CHUNK):
            diff = x[lo:lo + _REFERENCE_CHUNK] - x[c]
            np.minimum(min_d2[lo:lo + _REFERENCE_CHUNK], np.einsum("ij,ij->i", diff, diff),
                       out=min_d2[lo:lo + _REFERENCE_CHUNK])
        centers.append(int(np.argmax(min_d2)))


def covering_radius(features: np.ndarray, centers: np.ndarray) -> float:
    """The largest distance (Euclidean, float64) from any row of `features` to its nearest center
    (`centers`: row indices)."""
    x = np.asarray(features, dtype=np.float64)
    idx = np.asarray(centers, dtype=np.int64)
    if x.ndim != 2 or idx.ndim != 1 or len(idx) == 0:
        raise FeatureError(f"covering_radius needs 2-D features and a non-empty list of centers, got shapes "
                           f"{x.shape} and {idx.shape}")
    if idx.min() < 0 or idx.max() >= len(x):
        raise FeatureError(f"covering_radius: center indices must be in 0..{len(x) - 1}")
    c = x[idx]
    c_sq = np.einsum("ij,ij->i", c, c)
    worst = 0.0
    for lo in range(0, len(x), _REFERENCE_CHUNK):
        block = x[lo:lo + _REFERENCE_CHUNK]
        # The expanded form finds the nearest center fast; the distance to it is then taken exactly.
        nearest = np.argmin(c_sq[None, :] - 2.0 * (block @ c.T), axis=1)
        diff = block - c[nearest]
        worst = max(worst, float(np.einsum("ij,ij->i", diff, diff).max()))
    return float(np.sqrt(worst))
