"""API clients under a rate limit: fastmmeval's `--model openai` against lmms-eval 0.7.3's `openai`
(thread pool, `num_concurrent`) and `async_openai` (asyncio, `num_cpus`) on the same requests.

The server is `fastmmeval serve` over a tiny random-weight chat LM (`--model hf`, continuous
batching), in its own process. In front of it runs the fault proxy (`fastmmeval.testing.faults`),
adding `--latency` seconds to every forwarded request and answering 429 with `Retry-After` to any
request that arrives while `--limit` are in flight: a stand-in for a hosted API with a concurrency
quota. Every client is configured with the same `--concurrency` (ours `max_concurrency`, the
peers' `num_concurrent` / `num_cpus`), above the limit, so how a client handles 429s decides its
speed. Each client runs as its own process (lmms-eval from `.venv-peers`, built by `make peers`)
and is timed around its generate call alone (imports and construction excluded); ours writes to a
fresh response cache, as a first run would.

A request counts as completed when the client returned text for it (lmms-eval marks failures with
`[LMMS_EVAL_REQUEST_FAILED`); `agree` is true when every client that completed a request returned
the same text (greedy decoding). Per client the proxy's counts are reported too: requests it saw
and the 429s it sent.

Prints one JSON line last: {"bench": "api", "ours_s", "peer", "peer_s", "ratio", "agree", ...} with
peer_s the faster peer's wall time and ratio = peer_s / ours_s.

Usage: python bench/bench_api.py [--n 500] [--tokens 8] [--concurrency 32] [--limit 16]
       [--latency 0.25] [--retry_after 1] [--repeats 1] [--skip_peers] [--work DIR]
(also its own client driver: --driver {ours,openai,async_openai} --url URL --prompts FILE --out FILE)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEER_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
PEER_FAILED = "[LMMS_EVAL_REQUEST_FAILED"
SERVED_NAME = "tiny"
KEY_ENV = "BENCH_API_KEY"
WORDS = ["cat", "dog", "horse", "bird", "rocket", "moon", "coffee", "mat", "fox", "tiger", "stop", "image"]


def make_prompts(n: int, tokens: int) -> list[dict[str, Any]]:
    """`n` distinct short questions (deterministic), each asking for up to `tokens` tokens."""
    out = []
    for i in range(n):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
        out.append({"text": f"Question {i}: is a {a} bigger than a {b}? Answer yes or no.", "max_tokens": tokens})
    return out


# ---- client drivers (each runs in its own process; lmms-eval's in .venv-peers) ----


Answers = Callable[[], list[str | None]]
Usage = Callable[[], dict[str, Any]]


def drive_ours(prompts: list[dict[str, Any]], url: str, concurrency: int, cache: Path) -> tuple[Answers, Usage]:
    """fastmmeval's `openai` backend, built from model_args as `fastmmeval run` builds it, with an
    empty response cache at `cache`; returns the call to time and the backend's usage counts."""
    from fastmmeval.models import MODELS
    from fastmmeval.protocol import GenerationSettings, Message, Request, TextPart

    os.environ[KEY_ENV] = "sk-bench"
    shutil.rmtree(cache, ignore_errors=True)
    args = {"base_url": url, "model": SERVED_NAME, "api_key_env": KEY_ENV, "max_concurrency": str(concurrency),
            "cache_dir": str(cache)}
    model = MODELS.get("openai").from_args(args)
    requests = [
        Request(id=f"q{i}", kind="generate", messages=(Message("user", (TextPart(p["text"]),)),),
                generation=GenerationSettings(max_new_tokens=p["max_tokens"]))
        for i, p in enumerate(prompts)
    ]
    return lambda: [r.text if r.error is None else None for r in model.generate(requests)], model.usage


def drive_lmms(kind: str, prompts: list[dict[str, Any]], url: str, concurrency: int) -> Answers:
    """lmms-eval's chat `openai` or `async_openai` class, called as its evaluator calls it; returns
    the call to time."""
    from lmms_eval.api.instance import Instance

    if kind == "openai":
        from lmms_eval.models.chat.openai import OpenAICompatible as Cls

        model = Cls(model=SERVED_NAME, base_url=url, api_key="sk-bench", num_concurrent=concurrency)
    else:
        from lmms_eval.models.chat.async_openai import AsyncOpenAIChat as Cls

        model = Cls(model=SERVED_NAME, base_url=url, api_key="sk-bench", num_cpus=concurrency)
    model.task_dict = {"bench": {"test": prompts}}

    def doc_to_messages(doc: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": doc["text"]}]}]

    instances = [
        Instance("generate_until", (p["text"], doc_to_messages, {"max_new_tokens": p["max_tokens"], "temperature": 0},
                                    i, "bench", "test"), idx=0, metadata={"task": "bench", "doc_id": i, "repeats": 1})
        for i, p in enumerate(prompts)
    ]

    def run() -> list[str | None]:
        texts = [getattr(r, "text", r) for r in model.generate_until(instances)]
        return [None if t.startswith(PEER_FAILED) else t for t in texts]

    return run


def driver_main(args: argparse.Namespace) -> None:
    """Run one client over the prompts; write its texts (None = failed) and its wall time."""
    prompts = json.loads(Path(args.prompts).read_text())
    usage: Usage = dict
    if args.driver == "ours":
        out = Path(args.out)
        run, usage = drive_ours(prompts, args.url, args.concurrency, out.with_name(f"{out.stem}_cache"))
    else:
        run = drive_lmms(args.driver, prompts, args.url, args.concurrency)
    start = time.perf_counter()
    texts = run()
    wall = time.perf_counter() - start
    Path(args.out).write_text(json.dumps({"texts": texts, "wall_s": wall, "usage": usage()}))


# ---- the bench ----


def free_port() -> int:
    """A TCP port free on localhost right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: Path, work: Path, env: dict[str, str], concurrency: int) -> tuple[subprocess.Popen, str]:
    """`fastmmeval serve` over the model in its own process; returns it and its /v1 URL once it answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "fastmmeval", "serve", "--model", "hf", "--model_args",
           f"pretrained={model_dir},max_batch_size={concurrency}", "--port", str(port),
           "--served_model_name", SERVED_NAME, "--max_batch", str(concurrency)]
    log = (work / "server.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"fastmmeval serve exited ({proc.returncode}); see {work / 'server.log'}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"fastmmeval serve did not answer within 180 s; see {work / 'server.log'}")


def warm_up(url: str, tokens: int) -> None:
    """A few direct requests, so no client pays the model's first-call costs."""
    body = json.dumps({"model": SERVED_NAME, "max_tokens": tokens, "temperature": 0,
                       "messages": [{"role": "user", "content": "warm up"}]}).encode()
    for _ in range(3):
        request = urllib.request.Request(url + "/chat/completions", data=body,
                                         headers={"Content-Type": "application/json", "Authorization": "Bearer x"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            reply.read()


def run_client(driver: str, label: str, python: Path, url: str, concurrency: int, work: Path, env: dict[str, str],
               proxy: Any = None) -> dict[str, Any]:
    """Run one client's driver process; its completions, wall time and (behind the proxy) the proxy's counts."""
    out = work / f"{label}.json"
    before = proxy.stats if proxy else None
    cmd = [str(python), str(Path(__file__).resolve()), "--driver", driver, "--url", url,
           "--prompts", str(work / "prompts.json"), "--out", str(out), "--concurrency", str(concurrency)]
    with (work / f"{label}.log").open("w") as log:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if rc != 0 or not out.exists():
        return {"error": f"driver exited {rc}; see {work / (label + '.log')}"}
    written = json.loads(out.read_text())
    texts = written["texts"]
    result = {
        "wall_s": round(written["wall_s"], 3),
        "completed": sum(t is not None for t in texts),
        "failed": sum(t is None for t in texts),
        "texts": texts,
    }
    if written["usage"]:
        result["usage"] = written["usage"]
    if proxy:
        after = proxy.stats
        result["proxy_requests"] = after.requests - before.requests
        result["proxy_429"] = after.faults["429_limit"] - before.faults["429_limit"]
    return result


def agreement(runs: list[dict[str, Any]], n: int) -> int:
    """How many requests got different texts from the runs that completed them (0: all agree)."""
    differ = 0
    for i in range(n):
        answers = {r["texts"][i] for r in runs if "texts" in r and r["texts"][i] is not None}
        differ += len(answers) > 1
    return differ


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One client's repeated runs: its best wall time, every wall time, and its worst counts."""
    if any("error" in r for r in runs):
        return {"error": next(r["error"] for r in runs if "error" in r)}
    out: dict[str, Any] = {"wall_s": min(r["wall_s"] for r in runs), "walls_s": [r["wall_s"] for r in runs],
                           "completed": min(r["completed"] for r in runs), "failed": max(r["failed"] for r in runs)}
    for key in ("proxy_requests", "proxy_429"):
        if key in runs[0]:
            out[key] = max(r[key] for r in runs)
    if "usage" in runs[0]:
        out["usage"] = min(runs, key=lambda r: r["wall_s"])["usage"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=500, help="requests")
    p.add_argument("--tokens", type=int, default=8, help="max_tokens per request")
    p.add_argument("--concurrency", type=int, default=32, help="every client's configured concurrency")
    p.add_argument("--limit", type=int, default=16, help="proxy: requests in flight above which it answers 429")
    p.add_argument("--latency", type=float, default=0.25, help="proxy: seconds added to every forwarded request")
    p.add_argument("--retry_after", type=float, default=1.0, help="proxy: Retry-After of its 429s")
    p.add_argument("--repeats", type=int, default=1, help="rounds of all clients (best wall time reported)")
    p.add_argument("--skip_peers", action="store_true", help="run ours only")
    p.add_argument("--work", default="", help="folder for the model, logs and outputs (default: a temp folder)")
    p.add_argument("--driver", choices=["ours", "openai", "async_openai"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--prompts", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.driver:
        driver_main(args)
        return

    from fastmmeval.testing.faults import start_proxy
    from fastmmeval.testing.random_init import write_tiny_chat_lm

    work = Path(args.work or tempfile.mkdtemp(prefix="bench_api_"))
    work.mkdir(parents=True, exist_ok=True)
    # One torch thread per process: with OpenMP's spinning workers on a busy 2-core machine the
    # server ran 10-30x slower from one run to the next.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    model_dir = work / "tiny_lm"
    if not (model_dir / "config.json").exists():
        write_tiny_chat_lm(model_dir, seed=0)
    (work / "prompts.json").write_text(json.dumps(make_prompts(args.n, args.tokens)))
    server, server_url = start_server(model_dir, work, env, args.concurrency)
    clients = [("ours", Path(sys.executable))]
    if not args.skip_peers:
        if not PEER_PYTHON.exists():
            raise SystemExit(f"{PEER_PYTHON} is missing: run `make peers` (or pass --skip_peers)")
        clients += [("openai", PEER_PYTHON), ("async_openai", PEER_PYTHON)]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in clients}
    try:
        warm_up(server_url, args.tokens)
        with start_proxy(server_url, latency_s=args.latency, max_concurrency=args.limit,
                         retry_after=args.retry_after) as proxy:
            for round_ in range(args.repeats):
                for name, python in clients:
                    run = run_client(name, f"{name}_{round_}", python, proxy.url, args.concurrency, work, env, proxy)
                    runs[name].append(run)
                    print(name, {k: v for k, v in run.items() if k != "texts"}, file=sys.stderr)
        runs["ours_direct"] = [run_client("ours", "ours_direct", Path(sys.executable), server_url, args.limit,
                                          work, env)]
    finally:
        server.terminate()
        server.wait(timeout=30)

    differ = agreement([r for client in runs.values() for r in client], args.n)
    results = {name: summarize(client) for name, client in runs.items()}
    ours = results["ours"]
    peers = {k: v for k, v in results.items() if k in ("openai", "async_openai") and "wall_s" in v}
    fastest = min(peers, key=lambda k: peers[k]["wall_s"]) if peers else None
    peer_s = peers[fastest]["wall_s"] if fastest else None
    line = {
        "bench": "api",
        "n": args.n,
        "ours_s": ours.get("wall_s"),
        "peer": f"lmms-eval 0.7.3 {fastest}" if fastest else None,
        "peer_s": peer_s,
        "ratio": round(peer_s / ours["wall_s"], 2) if peer_s and ours.get("wall_s") else None,
        "agree": differ == 0,
        "differing_requests": differ,
        "settings": {"concurrency": args.concurrency, "limit": args.limit, "latency_s": args.latency,
                     "retry_after_s": args.retry_after, "max_tokens": args.tokens, "repeats": args.repeats},
        **results,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
