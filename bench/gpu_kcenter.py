"""GPU suite steps 1 and 4: greedy k-center at n = 1M, d = 1792, k = 200, fp16 storage.

Step 1 (`--item 1`) times the Triton kernel (`fastmmeval.triton_kernels.kcenter`) on device-resident rows,
gives GB/s against the card's peak (4.8 TB/s, H200) with bench_kcenter.run_cuda's traffic model, and checks
the covering radius against a torch mat-vec loop on the same device and against the CPU path
(`fastmmeval._core`) on a subsample of the rows (the CPU at full size is step 4). Step 4 (`--item 4`) times
the CPU path on all rows at `--threads` and, with a GPU, checks its radius against Triton's on the same rows.
With `--device cpu` the Triton kernel runs interpreted (TRITON_INTERPRET=1) at `--small` sizes and step 1
says skipped: its figures are not the GPU's.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from gpu_common import clustered_rows, covering_radius_torch, rel_diff, run_step, skipped, step_args, torch_k_center

PEAK_GBS = 4800.0  # H200 HBM3e


def triton_k_center(rows: Any, k: int, first: int) -> tuple[np.ndarray, float]:
    """Centers from the Triton kernel (compiled first, then timed) and its seconds."""
    import torch

    from fastmmeval.triton_kernels.kcenter import greedy_k_center_triton

    greedy_k_center_triton(rows, 3, first)  # compile
    sync = torch.cuda.synchronize if rows.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    centers = greedy_k_center_triton(rows, k, first)
    sync()
    return centers.cpu().numpy(), time.perf_counter() - start


def step_bytes(n: int, d: int) -> int:
    """Bytes one step moves, as bench_kcenter.run_cuda counts them: every fp16 row, the running minimum read
    and written, the per-block results."""
    from fastmmeval.triton_kernels.kcenter import BLOCK_N

    return n * d * 2 + n * 4 * 2 + -(-n // BLOCK_N) * 12 * 2


def cpu_k_center(rows: np.ndarray, k: int, first: int, threads: int) -> tuple[np.ndarray, float]:
    """Centers from the native CPU path (fp16 storage, `threads` cores) and its seconds."""
    from fastmmeval import _core

    start = time.perf_counter()
    centers = _core.greedy_k_center(rows, k, first, float16=True, threads=threads)
    return np.asarray(centers), time.perf_counter() - start


def sizes(args: Any) -> tuple[int, int, int, int]:
    """(n, d, k, CPU subsample rows) of this run."""
    if args.small:
        return 1024, 32, 5, 512
    return args.n, args.d, args.k, args.cpu_subsample


def triton_step(args: Any) -> dict[str, Any]:
    """Step 1's figures."""
    import torch

    from fastmmeval.lite.kcenter import first_center

    torch.backends.cuda.matmul.allow_tf32 = False
    n, d, k, sub = sizes(args)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch sees no CUDA device")
    rows = clustered_rows(n, d, 64, args.seed, args.device)
    first = first_center(n, args.seed)
    ours, seconds = triton_k_center(rows, k, first)
    start = time.perf_counter()
    ref = torch_k_center(rows, k, first)
    ref_s = time.perf_counter() - start
    r_ours, r_ref = covering_radius_torch(rows, ours), covering_radius_torch(rows, ref)
    out: dict[str, Any] = {"n": n, "d": d, "k": k, "storage": "float16", "triton_s": round(seconds, 4),
                           "torch_ref_s": round(ref_s, 4), "radius_triton": round(r_ours, 6),
                           "radius_torch": round(r_ref, 6), "radius_rel_vs_torch": rel_diff(r_ours, r_ref),
                           "same_centers_as_torch": bool(np.array_equal(ours, ref))}
    gbs = (k - 1) * step_bytes(n, d) / seconds / 1e9
    if args.device == "cuda":
        out.update(gpu=torch.cuda.get_device_name(), gbs=round(gbs, 1), peak_gbs=PEAK_GBS,
                   fraction_of_peak=round(gbs / PEAK_GBS, 3))
    # The CPU path on the first `sub` rows (the full-size CPU run is step 4), against Triton on those rows.
    part = rows[:sub].contiguous()
    sub_first = first_center(sub, args.seed)
    cpu_centers, cpu_s = cpu_k_center(part.cpu().numpy(), k, sub_first, args.threads)
    tri_centers, _ = triton_k_center(part, k, sub_first)
    r_cpu, r_tri = covering_radius_torch(part, cpu_centers), covering_radius_torch(part, tri_centers)
    out.update(cpu_subsample={"n": sub, "note": f"CPU path on the first {sub} rows; all rows: step 4",
                              "cpu_s": round(cpu_s, 3), "radius_cpu": round(r_cpu, 6), "radius_triton": round(r_tri, 6),
                              "radius_rel": rel_diff(r_cpu, r_tri)})
    out["agree"] = bool(out["radius_rel_vs_torch"] <= 1e-3 and out["cpu_subsample"]["radius_rel"] <= 1e-3)
    if args.device != "cuda":
        out.update(skipped("Triton on CUDA needs --device cuda: ran interpreted (TRITON_INTERPRET=1) at --small "
                           "sizes, so no GB/s"))
    return out


def cpu_step(args: Any) -> dict[str, Any]:
    """Step 4's figures."""
    import torch

    from fastmmeval.lite.kcenter import first_center

    torch.backends.cuda.matmul.allow_tf32 = False
    n, d, k, _ = sizes(args)
    gpu = args.device == "cuda" and torch.cuda.is_available()
    rows = clustered_rows(n, d, 64, args.seed, "cuda" if gpu else "cpu")  # drawn on the GPU: seconds, not minutes
    host = rows.cpu().numpy()
    first = first_center(n, args.seed)
    centers, seconds = cpu_k_center(host, k, first, args.threads)
    out: dict[str, Any] = {"n": n, "d": d, "k": k, "threads": args.threads, "cpus": os.cpu_count(),
                           "cpu_s": round(seconds, 3),
                           "stream_gbs": round((k - 1) * n * d * 2 / seconds / 1e9, 1)}
    out["radius_cpu"] = round(covering_radius_torch(rows, centers), 6)
    if gpu:
        tri, _ = triton_k_center(rows, k, first)
        out["radius_triton"] = round(covering_radius_torch(rows, tri), 6)
        out["radius_rel_vs_triton"] = rel_diff(out["radius_cpu"], out["radius_triton"])
        out["agree"] = out["radius_rel_vs_triton"] <= 1e-3
    else:
        out["triton_compare"] = skipped("no CUDA device: the radius is checked against Triton in step 1 only")
    return out


def main() -> None:
    parser = step_args(__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=1792)
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--cpu_subsample", type=int, default=100_000, help="rows of step 1's CPU comparison")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.item == 1:
        run_step(args, "triton_kcenter", triton_step)
    else:
        run_step(args, "cpu_kcenter", cpu_step)


if __name__ == "__main__":
    main()
