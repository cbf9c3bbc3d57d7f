"""GPU suite step 2: the engine on CUDA (bf16 and fp32) on a LLaVA-1.5-architecture model of realistic width.

The model is bench/llava_model.py's `build_llava` with random weights: 2048 hidden, 12 text layers, an
8-layer 1024-wide CLIP tower on 336 px images (576 image tokens). The docs are bench/engine_workload.py's
short-answer tasks over crops of seeded synthetic images (the GPU machine has no photo packages), and each
contender is timed by bench/bench_engine.py, run once per contender so that its GPU utilisation (nvidia-smi,
sampled in the background) is its own: ours (continuous batching) with the static-batch `generate` loop at
batch 8 (the bench checks their replies are identical), the static loop at batch 32, and the batch-1 loop
(`--static_batch 1`) on the first `--batch1_n` docs. Replies of every static run are compared here with the
batch-8 run's, doc by doc. Runs go in priority order and are skipped (with the reason) once the step's
budget is spent. Figures: docs/s and generated tokens/s over generation time (e2e: process start to results).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from gpu_common import GpuSampler, run_python, run_step, skipped, step_args

HERE = Path(__file__).resolve().parent
REALISTIC = dict(hidden=2048, intermediate=5632, layers=12, heads=16, kv_heads=16, vision_layers=8,
                 vision_hidden=1024, vision_intermediate=4096, vision_heads=16, image_size=336, patch=14)
SMALL = dict(hidden=64, intermediate=128, layers=1, heads=2, kv_heads=2, vision_layers=1, vision_hidden=32,
             vision_intermediate=64, vision_heads=2, image_size=56, patch=14)


def synthetic_photos() -> list[tuple[str, np.ndarray]]:
    """Seeded 480 x 640 RGB images (gradients, discs, noise) standing in for engine_workload.photos()."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:480, 0:640].astype(np.float32)
    out = []
    for i in range(12):
        image = np.stack([(xx * rng.uniform(0.1, 0.4) + yy * rng.uniform(0.1, 0.4) + rng.uniform(0, 255)) % 256
                          for _ in range(3)], axis=-1)
        for _ in range(6):
            cy, cx, r = rng.uniform(0, 480), rng.uniform(0, 640), rng.uniform(20, 160)
            image[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.uniform(0, 255, size=3)
        image += rng.normal(0, 12, size=image.shape)
        out.append((f"synthetic {i}", np.clip(image, 0, 255).astype(np.uint8)))
    return out


def bench_engine_main(argv: list[str]) -> None:
    """bench_engine.main() on synthetic photos and without the lmms-eval task files (pyarrow), for argv."""
    sys.path.insert(0, str(HERE))
    import bench_engine
    import engine_workload

    engine_workload.photos = synthetic_photos
    bench_engine.write_lmms_tasks = lambda *a: None
    sys.argv = [str(HERE / "bench_engine.py"), *argv]
    bench_engine.main()


def replies(work: Path) -> dict[str, str]:
    """The static run's replies in `work` (doc id -> reply), empty without one."""
    path = work / "static.json"
    return json.loads(path.read_text())["replies"] if path.exists() else {}


def one_run(args: Any, name: str, dtype: str, extra: list[str], deadline: float) -> dict[str, Any]:
    """One bench_engine run (its own --work), timed and sampled; its figures."""
    left = deadline - time.monotonic()
    if left < 20:
        return skipped(f"step budget spent ({left:.0f} s left)")
    work = args.work / "engine" / f"{dtype}-{name}"
    argv = ["--_bench", "--model_dir", str(args.model_dir), "--device", args.device, "--dtype", dtype,
            "--skip_peer", "--work", str(work), "--batch_size", str(args.batch_size), *extra]
    work.mkdir(parents=True, exist_ok=True)
    with GpuSampler(work / "nvidia-smi.csv") as gpu:
        rc, last = run_python([str(Path(__file__).resolve()), *argv], work / "bench.log", left - 5)
    if not last:
        tail = (work / "bench.log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
        return {"status": "error", "error": f"exit {rc}: {tail[0][:300]}"}
    got = json.loads(last)
    out: dict[str, Any] = {"status": "ok" if not got["errors"] else "error", "gpu": gpu.summary()}
    tokens = json.loads((work / "static.json").read_text())["new_tokens"] if (work / "static.json").exists() else {}
    n = got["n"]
    for who in ("ours", "static"):
        gen, e2e = got[f"{who}_gen_s"], got[f"{who}_s"]
        if gen:
            out[who] = {"gen_s": gen, "e2e_s": e2e, "docs_per_s": round(n / gen, 2),
                        "docs_per_s_e2e": round(n / e2e, 2)}
            if tokens:  # the static run's token counts stand for ours too where their replies agree
                out[who]["gen_tokens_per_s"] = round(sum(tokens.values()) / gen, 1)
    out.update(n=n, static_batch=got["static_batch"], errors=got["errors"], new_tokens=got["new_tokens"])
    if got["compared"] == ["ours", "static"]:
        out.update(agree=got["agree"], mismatches=got["mismatches"])
    return out


def engine_step(args: Any) -> dict[str, Any]:
    """Step 2's figures."""
    deadline = time.monotonic() + args.budget_s - 10
    sys.path.insert(0, str(HERE))
    from llava_model import build_llava

    shape = SMALL if args.small else REALISTIC
    n, n1 = (6, 2) if args.small else (args.n, args.batch1_n)
    args.model_dir = args.work / "engine" / "model"
    start = time.perf_counter()
    build_llava(args.model_dir, **shape)
    out: dict[str, Any] = {"model": {**shape, "image_tokens": (shape["image_size"] // shape["patch"]) ** 2,
                                     "build_s": round(time.perf_counter() - start, 1)}, "n": n, "batch1_n": n1}
    dtypes = ["float32"] if args.small else ["float32", "bfloat16"]
    plan = [(dtype, name, extra) for dtype in dtypes for name, extra in
            [("ours_vs_static8", ["--n", str(n), "--static_batch", "8"]),
             ("static32", ["--n", str(n), "--static_batch", "32", "--skip_ours"]),
             ("batch1", ["--n", str(n1), "--static_batch", "1", "--skip_ours"])]]
    for dtype, name, extra in plan:
        if args.small and name == "static32":  # keeps the rehearsal short: the batch-8 run's code path
            got = skipped("--small: the same code path as the batch-8 run")
        else:
            got = one_run(args, name, dtype, extra, deadline)
        print(f"{dtype} {name}: {json.dumps(got)[:300]}", flush=True)
        out.setdefault(dtype, {})[name] = got
    for dtype in dtypes:
        base = replies(args.work / "engine" / f"{dtype}-ours_vs_static8")
        for name in ("static32", "batch1"):
            other = replies(args.work / "engine" / f"{dtype}-{name}")
            if base and other:
                out[dtype][name]["differ_from_static8"] = sum(base.get(i) != r for i, r in other.items())
    if "bfloat16" not in dtypes:
        out["bfloat16"] = skipped("--small runs float32 only")
    fp32 = out["float32"]
    out["fp32_identical"] = bool(fp32["ours_vs_static8"].get("agree")) and all(
        fp32[k].get("differ_from_static8") == 0 for k in ("static32", "batch1") if fp32[k]["status"] != "skipped")
    if not any(run.get("status") == "ok" for runs in map(out.get, dtypes) for run in runs.values()):
        raise RuntimeError("no engine run finished: " + json.dumps({d: out[d] for d in dtypes})[:400])
    if args.device != "cuda":
        out["gpu_note"] = "CPU rehearsal: no CUDA figures"
    return out


def main() -> None:
    if sys.argv[1:2] == ["--_bench"]:
        bench_engine_main(sys.argv[2:])
        return
    parser = step_args(__doc__)
    parser.add_argument("--n", type=int, default=1000, help="docs")
    parser.add_argument("--batch1_n", type=int, default=100, help="docs of the batch-1 loop (the first ones)")
    parser.add_argument("--batch_size", type=int, default=32, help="ours: fastmmeval --batch_size")
    run_step(parser.parse_args(), "engine_cuda", engine_step)


if __name__ == "__main__":
    main()
