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
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from engine_workload import TASKS, make_docs, write_fastmmeval_tasks, write_lmms_tasks  # noqa: E402

OURS_LAUNCHER = """
import atexit, json, sys, time
from fastmmeval.models.hf import HF
spent = [0.0]
inner = HF.respond
def timed(self, requests, batch_size):
    answers = inner(self, requests, batch_size)
    while True:
        t = time.perf_counter()
        try:
            response = next(answers)
        except StopIteration:
            return
        finally:
            spent[0] += time.perf_counter() - t
        yield response
HF.respond = timed
timer_path = sys.argv[1]
atexit.register(lambda: open(timer_path, "w").write(json.dumps({"gen_s": spent[0]})))
from fastmmeval.cli import main
sys.exit(main(sys.argv[2:]))
"""

LMMS_LAUNCHER = """
import atexit, json, sys, time
spent = [0.0]
def wrap(cls):
    inner = cls.generate_until
    def timed(self, requests):
        t = time.perf_counter()
        try:
            return inner(self, requests)
        finally:
            spent[0] += time.perf_counter() - t
    cls.generate_until = timed
import lmms_eval.models.simple.llava_hf as simple
wrap(simple.LlavaHf)
try:
    import lmms_eval.models.chat.llava_hf as chat
    wrap(chat.LlavaHf)
except ImportError:
    pass
timer_path = sys.argv[1]
atexit.register(lambda: open(timer_path, "w").write(json.dumps({"gen_s": spent[0]})))
sys.argv = ["lmms_eval", *sys.argv[2:]]
from lmms_eval.cli.dispatch import main  # what `python -m lmms_eval` runs
main()
"""


def run_timed(cmd: list[str], env: dict[str, str], log: Path, results_glob: str) -> dict[str, Any]:
    """Run `cmd`; end-to-end time is from just before the process starts to the newest file
    matching `results_glob` (its results) being written."""
    start_wall = time.time()
    with log.open("w") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    exit_s = time.time() - start_wall
    found = sorted(glob.glob(results_glob, recursive=True), key=os.path.getmtime)
    out: dict[str, Any] = {"rc": proc.returncode, "exit_s": exit_s, "log": str(log)}
    if found and os.path.getmtime(found[-1]) >= start_wall:
        out["e2e_s"] = os.path.getmtime(found[-1]) - start_wall
        out["results"] = found[-1]
    else:
        tail = [x for x in log.read_text(errors="replace").strip().splitlines() if x.strip()][-15:]
        last = next((x for x in reversed(tail) if "error" in x.lower()), tail[-1] if tail else "")
        out["error"] = f"no results file (rc={proc.returncode}): {last.strip()}\n" + "\n".join(tail)
    return out


def read_timer(path: Path) -> float | None:
    try:
        return float(json.loads(path.read_text())["gen_s"])
    except (OSError, ValueError, KeyError):
        return None


def run_ours(args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict[str, Any]:
    out_dir = work / "out_ours"
    shutil.rmtree(out_dir, ignore_errors=True)
    model_args = f"pretrained={args.model_dir},dtype={args.dtype}"
    if args.device != "cpu":
        model_args += f",device={args.device}"
    if args.ours_model_args:
        model_args += "," + args.ours_model_args
    timer = work / "ours_timer.json"
    timer.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-c",
        OURS_LAUNCHER,
        str(timer),
        "run",
        "--model",
        "hf",
        "--model_args",
        model_args,
        "--tasks",
        ",".join(TASKS),
        "--include_path",
        str(work / "fm_tasks"),
        "--batch_size",
        str(args.batch_size),
        "--output_path",
        str(out_dir),
        "--no_progress",
        "--bootstrap_iters",
        "0",
    ]
    res = run_timed(cmd, env, work / "ours.log", str(out_dir / "**" / "results.json"))
    res["cmd"] = [str(Path(sys.executable).parent / "fastmmeval")] + cmd[4:]  # the same run without the timer
    res["gen_s"] = read_timer(timer)
    if "results" in res:
        replies, errors = {}, {}
        for task in TASKS:
            for line in (Path(res["results"]).parent / "samples" / f"{task}.jsonl").read_text().splitlines():
                s = json.loads(line)
                if s.get("failed"):
                    errors[s["doc_id"]] = s["failed"]
                else:
                    replies[s["doc_id"]] = s["response"]
        res["replies"] = replies
        if errors:
            res["error"] = f"{len(errors)} docs failed, e.g. {next(iter(errors.values()))}"
    return res


def run_peer(args: argparse.Namespace, work: Path, env: dict[str, str], docs: list[dict[str, Any]]) -> dict[str, Any]:
    python = Path(args.peer_python)
    if not python.exists():
        return {"error": f"{python} not found: run `make peers` first"}
    out_dir = work / "out_lmms"
    shutil.rmtree(out_dir, ignore_errors=True)
    timer = work / "lmms_timer.json"
    timer.unlink(missing_ok=True)
    device_map = args.device
    cmd = [
        str(python),
        "-c",
        LMMS_LAUNCHER,
        str(timer),
        "--model",
        "llava_hf",
        "--model_args",
        f"pretrained={args.model_dir},device={args.device},device_map={device_map}",
        "--tasks",
        ",".join(TASKS),
        "--include_path",
        str(work / "lmms_tasks"),
        "--batch_size",
        "1",
        "--output_path",
        str(out_dir),
        "--log_samples",
        "--verbosity",
        "WARNING",
    ]
    # lmms-eval exits 0 even when it crashes: the results file is the proof it finished.
    res = run_timed(cmd, env, work / "lmms.log", str(out_dir / "**" / "*_results.json"))
    res["cmd"] = [str(python), "-m", "lmms_eval"] + cmd[4:]
    res["gen_s"] = read_timer(timer)
    if "results" in res:
        ids = {task: [d["id"] for d in docs if d["task"] == task] for task in TASKS}
        replies = {}
        for task in TASKS:
            for path in glob.glob(str(Path(res["results"]).parent / f"*_samples_{task}.jsonl")):
                for line in Path(path).read_text().splitlines():
                    s = json.loads(line)
                    # `resps` (the raw reply) is logged only where it differs from `filtered_resps`.
                    reply = s["resps"] if "resps" in s else s["filtered_resps"]
                    while isinstance(reply, list):
                        reply = reply[0]
                    replies[ids[task][int(s["doc_id"])]] = reply
        res["replies"] = replies
        if len(replies) != len(docs):
            res["error"] = f"lmms-eval logged {len(replies)} of {len(docs)} samples"
    return res


def run_static(args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict[str, Any]:
    out = work / "static.json"
    out.unlink(missing_ok=True)
    Path(str(out) + ".floor").unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_static",
        str(out),
        "--model_dir",
        str(args.model_dir),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--static_batch",
        str(args.static_batch),
        "--work",
        str(work),
    ] + (["--floor"] if args.floor else [])
    res = run_timed(cmd, env, work / "static.log", str(out))
    res["cmd"] = cmd
    if "results" in res:
        data = json.loads(out.read_text())
        res.update(
            gen_s=data["gen_s"],
            replies=data["replies"],
            new_tokens=data["new_tokens"],
            image_processor=data["image_processor"],
        )
        floor = Path(str(out) + ".floor")
        if floor.exists():
            res["floor_s"] = json.loads(floor.read_text())["floor_s"]
    return res


def static_worker(args: argparse.Namespace) -> None:
    """The static baseline: per task, batches of `static_batch` docs in dataset order, each
    preprocessed by the model's own processor (left padding) and decoded by `model.generate`
    until every row is done. Writes replies, token counts and timings to `args._static`."""
    import torch
    from PIL import Image
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    dtype = getattr(torch, args.dtype)
    model = LlavaForConditionalGeneration.from_pretrained(args.model_dir, dtype=dtype).to(args.device).eval()
    processor = AutoProcessor.from_pretrained(args.model_dir)
    tok = processor.tokenizer
    tok.padding_side = "left"
    work = Path(args.work)
    replies, new_tokens = {}, {}
    gen_s = 0.0
    batches = []  # with --floor: every batch's model inputs, for the forward-only timing
    for task, max_new in TASKS.items():
        rows = [json.loads(line) for line in (work / "data" / f"{task}.jsonl").read_text().splitlines()]
        for start in range(0, len(rows), args.static_batch):
            chunk = rows[start : start + args.static_batch]
            images = [Image.open(work / "data" / r["image"]).convert("RGB") for r in chunk]
            _sync(args.device)
            t = time.perf_counter()
            texts = [
                processor.apply_chat_template(
                    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": r["question"]}]}],
                    add_generation_prompt=True,
                    tokenize=False,
                )
                for r in chunk
            ]
            inputs = processor(images=images, text=texts, padding=True, return_tensors="pt").to(args.device, dtype)
            with torch.inference_mode():
                out = model.generate(
                    **inputs,
                    do_sample=False,
                    max_new_tokens=max_new,
                    pad_token_id=tok.pad_token_id,
                    eos_token_id=tok.eos_token_id,
                )
            new = out[:, inputs["input_ids"].shape[1] :].tolist()  # .tolist() waits for the device
            for r, ids in zip(chunk, new, strict=True):
                ids = ids[: ids.index(tok.eos_token_id)] if tok.eos_token_id in ids else ids
                replies[r["id"]] = tok.decode(ids, skip_special_tokens=True)
                new_tokens[r["id"]] = len(ids)
            gen_s += time.perf_counter() - t
            if args.floor:
                batches.append(inputs)
    Path(args._static).write_text(
        json.dumps(
            {
                "gen_s": gen_s,
                "replies": replies,
                "new_tokens": new_tokens,
                "image_processor": type(processor.image_processor).__name__,
            }
        )
    )
    if args.floor:  # after the results (not part of end to end): the prompts' forward pass alone
        floor_s = 0.0
        for inputs in batches:
            _sync(args.device)
            t = time.perf_counter()
            with torch.inference_mode():
                model(**inputs, logits_to_keep=1)
            _sync(args.device)
            floor_s += time.perf_counter() - t
        Path(args._static + ".floor").write_text(json.dumps({"floor_s": floor_s}))


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


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
