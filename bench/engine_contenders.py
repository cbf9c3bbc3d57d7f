"""The engine bench's three contenders, each run as its own timed process: fastmmeval's `hf` backend
(`run_ours`), lmms-eval 0.7.3's `llava_hf` from `.venv-peers` (`run_peer`), and a static-batch
`model.generate` loop (`run_static`, which runs `static_worker` in a child of bench_engine.py)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine_workload import TASKS

ROOT = Path(__file__).resolve().parent.parent
ENGINE_BENCH = Path(__file__).resolve().parent / "bench_engine.py"  # runs static_worker with --_static

OURS_LAUNCHER = """
import atexit, json, sys, time
from fastmmeval.models.local.hf import HF
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
        str(ENGINE_BENCH),
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
