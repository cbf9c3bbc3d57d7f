"""Short-answer generation with a LLaVA-1.5-architecture model over real photos: fastmmeval's `hf`
backend (continuous batching) against lmms-eval 0.7.3's stock `llava_hf` (batch size 1 only) and
against a static-batch `model.generate` loop, on the same model folder and the same docs.

The model (bench/llava_model.py) has realistic shapes: 224 px images, 256 image tokens per image,
a CLIP ViT tower, a Llama text model; weights drawn at a large scale so greedy choices are not
near-ties. The docs are crops of the photos bundled with scikit-image, scikit-learn and
matplotlib, asked questions of mixed lengths, in two tasks with different `max_new_tokens`; the
model's scaled-up EOS row ends replies after mixed lengths. The same docs are written as a
fastmmeval task (`--include_path`, YAML) and as an lmms-eval task (YAML + utils.py over parquet).

Each contender runs as its own process, with the same thread count (OMP/MKL/torch), and is timed
end to end (process start to its results file written) and generation only (time inside the
model calls: fastmmeval's backend stream `HF.respond`, waits for docs prepared ahead included;
lmms-eval's `generate_until`; the static loop's preprocessing + `generate`). Replies must be
identical per doc. lmms-eval runs from `.venv-peers` (`make peers`); without torchvision there,
transformers uses its Pillow image processors, and the model folder pins `CLIPImageProcessorPil`
so every contender preprocesses identically.

Prints one JSON line last: {"bench": "engine", "ours_s", "peer", "peer_s", "ratio", "agree", ...}
with ratio = peer_s / ours_s (end to end; `ratio_each`: the same round by round), plus
generation-only times, the static baseline and any per-doc mismatches.

`--floor` adds the static batches' prompt forward pass alone (no decoding): a compute floor that
no contender's generation time can go below on this machine.

Usage: python bench/bench_engine.py --n 240 [--repeats 3] [--floor] [--device cuda] [--threads N] [--skip_peer]
       [--model_dir DIR | --build layers=4,hidden=1024]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from engine_contenders import run_ours, run_peer, run_static, static_worker  # noqa: E402
from engine_workload import TASKS, make_docs, write_fastmmeval_tasks, write_lmms_tasks  # noqa: E402

# ----- main -------------------------------------------------------------------------------------


def compare(a: dict[str, str], b: dict[str, str], ids: list[str]) -> list[dict[str, Any]]:
    return [{"id": i, "a": a.get(i), "b": b.get(i)} for i in ids if a.get(i) != b.get(i)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=240, help="docs (split between the two tasks)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="OMP/MKL/torch threads for every contender (default: this machine's cores)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of all contenders (interleaved); times are each one's median")
    parser.add_argument("--batch_size", type=int, default=16, help="fastmmeval --batch_size")
    parser.add_argument("--ours_model_args", default="", help="extra k=v for fastmmeval's hf backend")
    parser.add_argument("--static_batch", type=int, default=8)
    parser.add_argument("--model_dir", default="", help="reuse this model folder (default: build into --work)")
    parser.add_argument("--build", default="", help="k=v,... for build_llava when building (e.g. layers=4,hidden=1024)")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also time the static batches' prompt forward alone: a floor no contender can beat",
    )
    parser.add_argument("--work", default=str(ROOT / "runs" / "bench_engine"))
    parser.add_argument("--peer_python", default=str(ROOT / ".venv-peers" / "bin" / "python"))
    parser.add_argument("--skip_peer", action="store_true", help="skip lmms-eval (CI-sized runs)")
    parser.add_argument("--skip_static", action="store_true")
    parser.add_argument("--skip_ours", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--_static", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._static:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
        static_worker(args)
        return

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if not args.model_dir:
        from llava_model import build_kwargs, build_llava

        kwargs = build_kwargs(args.build)
        # One folder per shape, so a folder built before is reused only for the same shape.
        args.model_dir = str(work / ("model" + "".join(f"-{k}{v}" for k, v in sorted(kwargs.items()))))
        if not (Path(args.model_dir) / "config.json").exists():
            build_llava(args.model_dir, **kwargs)
    args.model_dir = str(Path(args.model_dir).resolve())
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    docs = make_docs(args.n, data, args.seed)
    write_fastmmeval_tasks(docs, data, work / "fm_tasks")
    write_lmms_tasks(docs, data, work / "lmms_tasks")
    ids = [d["id"] for d in docs]

    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(args.threads),
        MKL_NUM_THREADS=str(args.threads),
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(work / "hf_datasets_cache"),
        PYTHONPATH=str(ROOT / "python"),
        NVIDIA_TF32_OVERRIDE="0",
    )  # no TF32 anywhere on GPUs: every contender computes in true fp32
    rounds: list[dict[str, dict[str, Any]]] = []
    for _ in range(args.repeats):
        runs: dict[str, dict[str, Any]] = {}
        if not args.skip_static:
            runs["static"] = run_static(args, work, env)
        if not args.skip_peer:
            runs["peer"] = run_peer(args, work, env, docs)
        if not args.skip_ours:
            runs["ours"] = run_ours(args, work, env)
        for name, r in runs.items():
            print(
                f"{name}: "
                + (f"{r['e2e_s']:.1f} s end to end, {r['gen_s'] or 0:.1f} s generating" if "e2e_s" in r
                   else "no results")
                + (f"; ERROR {r['error']}" if "error" in r else ""),
                file=sys.stderr,
            )
            print("  " + " ".join(r.get("cmd", [])), file=sys.stderr)
        rounds.append(runs)
        if any("error" in r for r in runs.values()):
            break

    mismatches: dict[str, Any] = {}
    checked = [k for k in ("ours", "peer", "static") if runs.get(k, {}).get("replies")]
    for i, a in enumerate(checked):
        for b in checked[i + 1 :]:
            diff = compare(runs[a]["replies"], runs[b]["replies"], ids)
            mismatches[f"{a}_vs_{b}"] = {"n": len(diff), "first": diff[:3]}
    complete = all(len(runs[k]["replies"]) == len(ids) for k in checked)
    agree = len(checked) >= 2 and complete and all(m["n"] == 0 for m in mismatches.values())

    def times(k: str, key: str) -> list[float]:
        return [r[k][key] for r in rounds if r.get(k, {}).get(key) is not None and "error" not in r[k]]

    def e2e(k: str) -> float | None:
        return round(statistics.median(times(k, "e2e_s")), 2) if times(k, "e2e_s") else None

    def gen(k: str) -> float | None:
        return round(statistics.median(times(k, "gen_s")), 2) if times(k, "gen_s") else None

    def ratio(x: float | None, y: float | None) -> float | None:
        return round(x / y, 2) if x and y else None

    tokens = list(runs.get("static", {}).get("new_tokens", {}).values())
    ours_s, peer_s, static_s = e2e("ours"), e2e("peer"), e2e("static")
    line = {
        "bench": "engine",
        "ours_s": ours_s,
        "peer": "lmms-eval 0.7.3 llava_hf (batch 1)",
        "peer_s": peer_s,
        "ratio": ratio(peer_s, ours_s),
        "agree": agree,
        "ours_gen_s": gen("ours"),
        "peer_gen_s": gen("peer"),
        "gen_ratio": ratio(gen("peer"), gen("ours")),
        "static_batch": args.static_batch,
        "static_s": static_s,
        "static_gen_s": gen("static"),
        "static_ratio": ratio(static_s, ours_s),
        "static_gen_ratio": ratio(gen("static"), gen("ours")),
        "prefill_floor_s": round(runs["static"]["floor_s"], 2) if runs.get("static", {}).get("floor_s") else None,
        "rounds": len(rounds),
        "e2e_each": {k: [round(t, 2) for t in times(k, "e2e_s")] for k in ("ours", "peer", "static")},
        "ratio_each": [ratio(r["peer"].get("e2e_s"), r["ours"].get("e2e_s")) for r in rounds
                       if "ours" in r and "peer" in r],  # round by round: lmms-eval over ours
        "compared": checked,
        "mismatches": {k: v["n"] for k, v in mismatches.items()},
        "n": len(docs),
        "max_new_tokens": TASKS,
        "new_tokens": {"mean": round(statistics.mean(tokens), 1), "min": min(tokens), "max": max(tokens)}
        if tokens
        else None,
        "device": args.device,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "image_processor": runs.get("static", {}).get("image_processor"),
        "errors": {k: r["error"].splitlines()[0][:300] for k, r in runs.items() if "error" in r},
    }
    for k, v in mismatches.items():
        if v["n"]:
            print(f"{k}: {v['n']} docs differ, e.g. {json.dumps(v['first'][:2])}", file=sys.stderr)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
