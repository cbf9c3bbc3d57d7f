"""Greedy k-center: ours against lmms-eval Lite's algorithm, a numpy mat-vec loop and torch, same data.

lmms-eval Lite's tool (kcenter_greedy.py, removed upstream) calls sklearn `pairwise_distances`
between every row and the newest center once per step, keeps the running minimum and takes its
argmax; it starts at row 0. Here every contender starts at our seeded first center so all run the
same greedy sequence. Data: Gaussian blobs (unit-scale, like normalized embeddings), seeded.

`--device cpu` times `fastmmeval.lite.kcenter.greedy_k_center` (native, fp16 storage). `--device cuda`
times the fused Triton kernel on device-resident fp16 rows and prints achieved GB/s against the
device's DRAM peak (from the driver's memory clock and bus width, or `--peak_gbs`).
Prints one JSON line last: {"bench": "kcenter", "ours_s", "peer", "peer_s", "ratio", "agree", ...}.
Usage: python bench/bench_kcenter.py --n 100000 --d 1792 --k 200 [--device cuda] [--no_peers]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from importlib.metadata import version

import numpy as np
import torch
from gpu_common import torch_k_center
from sklearn.metrics import pairwise_distances

from fastmmeval import _core
from fastmmeval.lite.kcenter import covering_radius, first_center, greedy_k_center


def clustered(n: int, d: int, clusters: int, seed: int) -> np.ndarray:
    """n rows around `clusters` random means; each row has norm about 1 (float32)."""
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((clusters, d), dtype=np.float32) * np.float32(0.8 / np.sqrt(d))
    x = rng.standard_normal((n, d), dtype=np.float32)
    x *= np.float32(0.6 / np.sqrt(d))
    x += means[rng.integers(clusters, size=n)]
    return x


def lmms_eval_lite_k_center(features: np.ndarray, k: int, first: int = 0) -> np.ndarray:
    """lmms-eval Lite's greedy k-center as it was: sklearn pairwise_distances to the newest center per
    step, running minimum, argmax; it started at row 0 (`first`)."""
    min_distances = None
    selected: list[int] = []
    ind = first
    for _ in range(k):
        assert ind not in selected
        dist = pairwise_distances(features, features[[ind]], metric="euclidean")
        min_distances = dist if min_distances is None else np.minimum(min_distances, dist)
        selected.append(ind)
        ind = int(np.argmax(min_distances))
    return np.array(selected, dtype=np.int64)


def numpy_matvec_k_center(features: np.ndarray, k: int, first: int) -> np.ndarray:
    """Plain numpy loop: one float32 mat-vec per step with precomputed squared norms."""
    sq = np.einsum("ij,ij->i", features, features)
    min_d2 = np.full(len(features), np.inf, dtype=np.float32)
    centers = [first]
    for _ in range(k - 1):
        c = centers[-1]
        np.minimum(min_d2, sq + sq[c] - 2.0 * (features @ features[c]), out=min_d2)
        min_d2[centers] = -1.0
        centers.append(int(np.argmax(min_d2)))
    return np.array(centers, dtype=np.int64)


def torch_matvec_k_center(features: np.ndarray, k: int, first: int) -> np.ndarray:
    """torch on the CPU with fp16 storage: `X.half() @ c` per step, fp32 norms and running minimum."""
    return torch_k_center(torch.from_numpy(features).half(), k, first)


def timed(fn, *args) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def run_cuda(x: np.ndarray, k: int, first: int, peak_gbs: float | None) -> tuple[np.ndarray, float, dict]:
    """Times the Triton kernel on device-resident fp16 rows; returns centers, seconds and bandwidth figures."""
    import triton
    from triton.testing import get_dram_gbps

    from fastmmeval.triton_kernels.kcenter import BLOCK_N, greedy_k_center_triton

    rows = torch.from_numpy(x).to("cuda").half()
    greedy_k_center_triton(rows, 3, first)  # compile
    torch.cuda.synchronize()
    start = time.perf_counter()
    centers = greedy_k_center_triton(rows, k, first)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    n, d = rows.shape
    # Per step: every row once (fp16), the running minimum read and written, per-block results.
    step_bytes = n * d * 2 + n * 4 * 2 + triton.cdiv(n, BLOCK_N) * 12 * 2
    gbs = (k - 1) * step_bytes / seconds / 1e9
    peak = peak_gbs if peak_gbs else get_dram_gbps()
    figures = {"gpu": torch.cuda.get_device_name(), "gbs": round(gbs, 1), "peak_gbs": round(peak, 1),
               "fraction_of_peak": round(gbs / peak, 3)}
    return centers.cpu().numpy(), seconds, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=1792)
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--storage", choices=["float16", "float32"], default="float16",
                        help="ours on the CPU: float32 picks exactly the peer's centers")
    parser.add_argument("--peak_gbs", type=float, default=None, help="device DRAM peak (default: from the driver)")
    parser.add_argument("--no_peers", action="store_true", help="time ours only (no lmms-eval/numpy/torch runs)")
    args = parser.parse_args()

    x = clustered(args.n, args.d, args.clusters, args.seed)
    first = first_center(args.n, args.seed)
    # The load average says how much the other jobs on the machine inflated these wall times.
    result: dict = {"bench": "kcenter", "n": args.n, "d": args.d, "k": args.k, "device": args.device,
                    "cpus": os.cpu_count(), "load_avg_start": round(os.getloadavg()[0], 1)}
    if args.device == "cuda":
        ours, ours_s, figures = run_cuda(x, args.k, first, args.peak_gbs)
        result.update(ours="Triton fused step kernel, fp16 storage (timed on device-resident rows, compiled)",
                      **figures)
    else:
        ours, ours_s = timed(greedy_k_center, x, args.k, args.seed, "cpu", args.storage)
        stream_gbs = (args.k - 1) * args.n * args.d * np.dtype(args.storage).itemsize / ours_s / 1e9
        result.update(ours=f"native, {args.storage} storage ({_core.kcenter_simd_path()})",
                      ours_gbs=round(stream_gbs, 1))
    result["ours_s"] = round(ours_s, 3)
    print(f"ours ({result['ours']}): {ours_s:.2f} s", flush=True)
    radii = {"ours": covering_radius(x, ours)}
    if not args.no_peers:
        contenders = {"peer": lmms_eval_lite_k_center, "numpy": numpy_matvec_k_center, "torch": torch_matvec_k_center}
        for name, fn in contenders.items():
            centers, seconds = timed(fn, x, args.k, first)
            result[f"{name}_s"] = round(seconds, 3)
            radii[name] = covering_radius(x, centers)
            print(f"{name}: {seconds:.2f} s, covering radius {radii[name]:.6f}", flush=True)
            if name == "peer":
                result["same_centers_as_peer"] = bool(np.array_equal(ours, centers))
        result["peer"] = f"lmms-eval Lite k-center (sklearn {version('scikit-learn')} pairwise_distances per step)"
        result["ratio"] = round(result["peer_s"] / ours_s, 1)
        result["numpy"] = "numpy float32 mat-vec per step, precomputed norms"
        result["torch"] = f"torch {version('torch')} CPU, fp16 storage mat-vec per step"
    spread = (max(radii.values()) - min(radii.values())) / min(radii.values())
    result.update(radius={name: round(r, 6) for name, r in radii.items()}, radius_rel_spread=float(f"{spread:.2e}"),
                  agree=bool(spread <= 1e-3), load_avg_end=round(os.getloadavg()[0], 1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
