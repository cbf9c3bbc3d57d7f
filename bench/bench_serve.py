"""`fastmmeval serve` under load: many concurrent clients, valid and invalid requests mixed.

The server is the real `fastmmeval serve` command in its own process, bound to 127.0.0.1, over
`image-echo` (fastmmeval.testing.echo_model: answers instantly, says what it was sent), so what is
measured is the server, not a model. `--clients` asyncio clients (aiohttp, one connection each) send
requests back to back for `--seconds` (or until `--max_requests`), each drawn from a seeded mix: valid
chat completions (text, or a small PNG), valid loglikelihood requests, and, with probability
`--invalid`, an invalid one (NaN temperature, no model, an unknown model, 20 000 nested brackets, a
bad data URL, an image declaring 50 000 x 50 000 pixels, an unknown path). Each request has a client
timeout of `--timeout` seconds; one that gets no answer in time counts as unanswered.

Reported: p50 / p99 latency of valid requests after the warm-up (`--warmup` seconds), requests per
second, 5xx answers to valid requests (must be 0), invalid requests answered with anything but a 4xx
(must be 0), unanswered requests (must be 0), tracebacks on the server's stderr (must be 0), and the
server's RSS after the warm-up and at the end (the end must be within 10% of after warm-up).

Prints one JSON line last: {"bench": "serve", "ok", "p50_ms", "p99_ms", "valid_5xx", ...}; exits 1
when a check fails.

Usage: python bench/bench_serve.py [--seconds 60] [--clients 200] [--invalid 0.25] [--warmup 10]
       [--max_requests 10000000] [--timeout 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL = "image-echo"
RSS_GROWTH_LIMIT = 0.10


def _png(side: int) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (side, side), (side * 7 % 256, 90, 30)).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def _declared_bomb() -> str:
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")
    header = (50_000).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _chat(content: Any, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8, **fields}


def request_mix() -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """(valid, invalid) requests as (path, body bytes)."""
    chat, ll = "/v1/chat/completions", "/v1/loglikelihood"
    images = [_png(side) for side in (8, 32, 64)]
    valid = [(chat, json.dumps(_chat(f"question {i}: is a cat bigger than a dog?", temperature=0)).encode())
             for i in range(8)]
    valid += [(chat, json.dumps(_chat([{"type": "image_url", "image_url": {"url": url}},
                                       {"type": "text", "text": "What is in the image?"}])).encode())
              for url in images]
    valid += [(ll, json.dumps({"model": MODEL, "messages": [{"role": "user", "content": f"cat or dog {i}?"}],
                               "continuations": ["cat", "dog"]}).encode()) for i in range(4)]
    body = json.dumps(_chat("hi")).encode()
    invalid = [
        (chat, body[:-1] + b', "temperature": NaN}'),
        (chat, json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()),
        (chat, json.dumps({**_chat("hi"), "model": "gpt-4o"}).encode()),
        (chat, body[:-1] + b', "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"),
        (chat, json.dumps(_chat([{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}])).encode()),
        (chat, json.dumps(_chat([{"type": "image_url", "image_url": {"url": _declared_bomb()}}])).encode()),
        ("/v1/nowhere", body),
    ]
    return valid, invalid


@dataclass
class Tally:
    """What the clients saw."""

    latencies_ms: list[float] = field(default_factory=list)  # valid requests, after the warm-up
    sent: int = 0
    valid: int = 0
    invalid: int = 0
    valid_5xx: int = 0
    valid_not_200: int = 0
    invalid_not_4xx: int = 0
    unanswered: int = 0


async def drive(url: str, args: argparse.Namespace, warm_end: float, end: float, tally: Tally) -> None:
    """Run the clients until `end` or `args.max_requests` requests, tallying every answer."""
    import aiohttp

    valid, invalid = request_mix()
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    connector = aiohttp.TCPConnector(limit=args.clients, force_close=False)
    async with aiohttp.ClientSession(url, timeout=timeout, connector=connector,
                                     headers={"Content-Type": "application/json"}) as session:

        async def client(index: int) -> None:
            rng = random.Random(args.seed * 100_003 + index)
            while time.monotonic() < end and tally.sent < args.max_requests:
                is_valid = rng.random() >= args.invalid
                path, body = rng.choice(valid if is_valid else invalid)
                tally.sent += 1
                start = time.monotonic()
                try:
                    async with session.post(path, data=body) as response:
                        await response.read()
                        status = response.status
                except (TimeoutError, aiohttp.ClientError):
                    tally.unanswered += 1
                    continue
                if is_valid:
                    tally.valid += 1
                    tally.valid_5xx += status >= 500
                    tally.valid_not_200 += status != 200
                    if start >= warm_end:
                        tally.latencies_ms.append((time.monotonic() - start) * 1000)
                else:
                    tally.invalid += 1
                    tally.invalid_not_4xx += not 400 <= status < 500

        await asyncio.gather(*(client(i) for i in range(args.clients)))


def rss_mb(pid: int) -> float:
    """The resident set size of process `pid`, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def start_server() -> tuple[subprocess.Popen[str], str, list[str]]:
    """`fastmmeval serve` over image-echo on a free loopback port: the process, its URL, and its stderr
    lines (collected by a thread until it exits)."""
    env = {**os.environ, "COLUMNS": "400"}  # the "serving ... at URL" line unwrapped
    process = subprocess.Popen([sys.executable, __file__, "--serve_child"], stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    lines: list[str] = []
    while "serving" not in (line := process.stderr.readline()):
        if not line:
            raise RuntimeError("the server exited before serving: " + "".join(lines))
        lines.append(line)
    url = line.split(" at ")[1].split()[0].removesuffix("/v1")
    threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    return process, url, lines


def percentile(values: list[float], q: float) -> float:
    """The `q`-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the bench and print its report; the JSON line is the last line and is returned."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--invalid", type=float, default=0.25, help="share of invalid requests")
    parser.add_argument("--warmup", type=float, default=None, help="seconds (default: a sixth of --seconds, <= 10)")
    parser.add_argument("--max_requests", type=int, default=10_000_000)
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout per request, seconds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warmup = min(10.0, args.seconds / 6) if args.warmup is None else args.warmup
    process, url, server_err = start_server()
    tally = Tally()
    try:
        start = time.monotonic()
        warm_end, end = start + warmup, start + args.seconds
        rss: dict[str, float] = {}

        async def run() -> None:
            async def sample_after_warmup() -> None:
                await asyncio.sleep(max(0.0, warm_end - time.monotonic()))
                rss["warm"] = rss_mb(process.pid)

            sampler = asyncio.create_task(sample_after_warmup())
            await drive(url, args, warm_end, end, tally)
            await sampler

        asyncio.run(run())
        elapsed = time.monotonic() - start
        rss["end"] = rss_mb(process.pid)
    finally:
        process.terminate()
        code = process.wait(timeout=30)
    tracebacks = sum("Traceback" in line for line in server_err)
    growth = rss["end"] / rss["warm"] - 1
    report = {
        "bench": "serve", "model": f"{MODEL} (fastmmeval.testing.echo_model)", "clients": args.clients,
        "seconds": round(elapsed, 1), "warmup_s": warmup, "requests": tally.sent,
        "answered": tally.valid + tally.invalid, "unanswered": tally.unanswered, "valid": tally.valid,
        "invalid": tally.invalid, "rps": round((tally.valid + tally.invalid) / elapsed, 1),
        "p50_ms": round(percentile(tally.latencies_ms, 0.50), 2),
        "p99_ms": round(percentile(tally.latencies_ms, 0.99), 2),
        "valid_5xx": tally.valid_5xx, "valid_not_200": tally.valid_not_200, "invalid_not_4xx": tally.invalid_not_4xx,
        "server_tracebacks": tracebacks, "server_exit": code, "rss_warm_mb": round(rss["warm"], 1),
        "rss_end_mb": round(rss["end"], 1), "rss_growth": round(growth, 4),
    }
    report["ok"] = (tally.valid_5xx == tally.valid_not_200 == tally.invalid_not_4xx == tally.unanswered == tracebacks
                    == 0 and code == 0 and growth <= RSS_GROWTH_LIMIT)
    print(f"{report['answered']} requests answered in {elapsed:.1f} s by {args.clients} clients "
          f"({report['rps']}/s); valid p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms; "
          f"RSS {report['rss_warm_mb']} -> {report['rss_end_mb']} MiB")
    print(json.dumps(report))
    return report


def serve_child() -> int:
    """`fastmmeval serve --model image-echo` on a free loopback port (image-echo registered first)."""
    from fastmmeval.cli import main as cli_main
    from fastmmeval.models import MODELS
    from fastmmeval.testing.echo_model import ImageEcho

    MODELS.register(MODEL)(ImageEcho)
    return cli_main(["serve", "--model", MODEL, "--host", "127.0.0.1", "--port", "0"])


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve_child"]:
        sys.exit(serve_child())
    sys.exit(0 if main()["ok"] else 1)
