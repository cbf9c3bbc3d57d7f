"""What the GPU suite's steps share: their command line, their one JSON line, the nvidia-smi sampler, the
k-center rows and distances computed on the device.

Each step script (bench/gpu_kcenter.py, gpu_engine.py, gpu_contam.py) runs as `python bench/gpu_X.py --item N
--out OUT/N.jsonl --work DIR [--device cpu] [--small]` from bench/gpu_suite.sh and writes exactly one line:
{"item": N, "name", "status": "ok" | "skipped" | "error", "reason" (skipped), "error" (error), "seconds", ...}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def step_args(description: str) -> argparse.ArgumentParser:
    """The options every step takes (a step adds its own sizes)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--item", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the JSON line is written here")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (large files; not brought back)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--small", action="store_true", help="rehearsal sizes (seconds on a laptop)")
    parser.add_argument("--budget_s", type=float, default=300.0, help="what the suite gives this step")
    return parser


def run_step(args: argparse.Namespace, name: str, body: Callable[[argparse.Namespace], dict[str, Any]]) -> None:
    """Run `body` and write its figures as the step's JSON line; an exception becomes a line with its error."""
    # The suite's `timeout` sends SIGTERM: exit through `finally` blocks (run_python kills its children there).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    start = time.perf_counter()
    line: dict[str, Any] = {"item": args.item, "name": name, "device": args.device, "small": args.small}
    try:
        got = body(args)
        line.update({"status": "ok", **got})
    except Exception as err:  # the suite goes on with the next step; the error is the figure
        traceback.print_exc()
        line.update(status="error", error=f"{type(err).__name__}: {str(err)[:500]}")
    line["seconds"] = round(time.perf_counter() - start, 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(line) + "\n")
    os.replace(tmp, args.out)
    print(json.dumps(line), flush=True)


def skipped(reason: str) -> dict[str, str]:
    """A part of a step that did not run, and why."""
    return {"status": "skipped", "reason": reason}


class GpuSampler:
    """`nvidia-smi` polled every `every_ms` in the background while in a `with` block; `summary()` gives the
    mean and max utilisation (%) and the max memory used (MiB), or skipped where there is no nvidia-smi."""

    def __init__(self, log: Path, every_ms: int = 200) -> None:
        self.log, self.every_ms, self.proc = log, every_ms, None

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi"):
            query = ["--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
            with self.log.open("w") as f:
                self.proc = subprocess.Popen(["nvidia-smi", *query, f"--loop-ms={self.every_ms}"], stdout=f,
                                             stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def summary(self) -> dict[str, Any]:
        """Utilisation figures of the samples taken."""
        if self.proc is None:
            return skipped("nvidia-smi not found")
        rows = []
        for text in self.log.read_text().splitlines():
            try:
                rows.append([float(v) for v in text.split(",")[:2]])
            except ValueError:
                continue
        if not rows:
            return skipped("nvidia-smi gave no samples")
        util, mem = np.array(rows).T
        return {"samples": len(rows), "every_ms": self.every_ms, "util_mean_pct": round(float(util.mean()), 1),
                "util_max_pct": float(util.max()), "mem_max_mib": float(mem.max())}


def clustered_rows(n: int, d: int, clusters: int, seed: int, device: str) -> Any:
    """(n, d) float16 torch rows around `clusters` random means, each of norm about 1, drawn on `device`
    (the same law as bench_kcenter.clustered, drawn by torch so 1M x 1792 takes a moment on a GPU)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    means = torch.randn(clusters, d, generator=gen, device=device) * (0.8 / d**0.5)
    which = torch.randint(clusters, (n,), generator=gen, device=device)
    rows = torch.empty(n, d, dtype=torch.float16, device=device)
    for lo in range(0, n, 65536):  # in blocks: no (n, d) float32 temporary
        hi = min(lo + 65536, n)
        block = torch.randn(hi - lo, d, generator=gen, device=device) * (0.6 / d**0.5) + means[which[lo:hi]]
        rows[lo:hi] = block.half()
    return rows


def covering_radius_torch(rows: Any, centers: Any) -> float:
    """The largest distance from any row to its nearest center, in float32 on the rows' device."""
    import torch

    idx = torch.as_tensor(np.asarray(centers), dtype=torch.long, device=rows.device)
    c = rows[idx].float()
    c_sq = (c * c).sum(1)
    worst = 0.0
    for lo in range(0, len(rows), 32768):
        b = rows[lo:lo + 32768].float()
        d2 = (b * b).sum(1, keepdim=True) + c_sq[None, :] - 2.0 * (b @ c.T)
        worst = max(worst, float(d2.min(1).values.max()))
    return max(worst, 0.0) ** 0.5


def rel_diff(a: float, b: float) -> float:
    """|a - b| relative to the smaller, as a short float."""
    return float(f"{abs(a - b) / max(min(a, b), 1e-30):.2e}")


def run_python(argv: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `python argv` (this interpreter), output to `log`; (exit status, last JSON line printed or ''). The
    child and everything it starts (e.g. bench_engine's contenders, on the GPU) are killed at the timeout or
    when this process is terminated (the suite's `timeout`)."""
    with log.open("w") as f:
        proc = subprocess.Popen([sys.executable, *argv], stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = 124
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.startswith("{")]
    return rc, lines[-1] if lines else ""


def torch_k_center(rows: Any, k: int, first: int) -> np.ndarray:
    """The torch reference on the rows' device: `rows @ row` per step, fp32 norms and running minimum."""
    import torch

    sq = (rows.float() ** 2).sum(1)
    min_d2 = torch.full((len(rows),), float("inf"), device=rows.device)
    centers = [first]
    for _ in range(k - 1):
        c = centers[-1]
        torch.minimum(min_d2, sq + sq[c] - 2.0 * (rows @ rows[c]).float(), out=min_d2)
        min_d2[centers] = -1.0
        centers.append(int(torch.argmax(min_d2)))
    return np.array(centers, dtype=np.int64)
