"""GPU suite step 3: the contamination index build on 1B u16 tokens at --threads 1, 2, 4, 8, 16, --memory 16GB.

The corpus is bench/zipf_corpus.py's law (Zipf tokens, pasted Zipf-popular phrases, log-normal documents),
generated on all cores, one seeded stream per shard (so not byte-identical to `write_corpus`'s single stream),
in its shard layout. Each build is bench/bench_contam.py's `build_ours` (a fresh process; wall seconds, peak
RSS). Builds run from the most threads down and stop (the rest skipped, with the reason) once the step's
budget would not hold the next one. Figures: tokens/s, scaling efficiency t1 / (threads x t) (against the
fewest threads that ran, named), peak RSS; lookups/s on the most-threads index: one batched `counts` call,
and the same queries split over that many threads.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from gpu_common import run_step, skipped, step_args

sys.path.insert(0, str(Path(__file__).resolve().parent))

GIB = 1 << 30


def write_shard(path: Path, spec: Any, tokens: int, index: int) -> Path:
    """One shard of `tokens` tokens from its own seeded stream, in zipf_corpus's layout."""
    import zipf_corpus as z

    rng = np.random.default_rng([spec.seed, 2, index])
    cdfs = (z._zipf_cdf(spec.vocab, spec.exponent), z._zipf_cdf(z.PHRASES, 1.0))
    bank = z.phrase_bank(spec)
    with open(path, "wb") as tok_f, open(path.with_name(path.name + ".offsets"), "wb") as off_f:
        for begin in range(0, tokens, z.CHUNK_TOKENS):
            chunk, offsets = z._chunk(rng, spec, min(z.CHUNK_TOKENS, tokens - begin), cdfs, bank)
            chunk.tofile(tok_f)
            (offsets + begin).tofile(off_f)
    return path


def write_corpus_parallel(spec: Any, folder: Path, shard_tokens: int, workers: int) -> list[Path]:
    """The corpus as shards under `folder`, written by `workers` processes; the shard token files in order."""
    folder.mkdir(parents=True, exist_ok=True)
    sizes = [min(shard_tokens, spec.tokens - lo) for lo in range(0, spec.tokens, shard_tokens)]
    paths = [folder / f"shard-{i:05d}.u16" for i in range(len(sizes))]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(write_shard, paths, [spec] * len(sizes), sizes, range(len(sizes))))


def lookups(index_dir: Path, queries: np.ndarray, threads: int) -> dict[str, Any]:
    """Lookups per second: one batched call (best of 3), and the queries split over `threads` threads."""
    from bench_contam import N

    from fastmmeval.contam.ngram.hashing import TEXT_SEED, ngram_hashes
    from fastmmeval.contam.ngram.index import NgramIndex

    index = NgramIndex.open(index_dir)
    hashes = ngram_hashes(queries.ravel().astype(np.uint32), np.arange(0, queries.size, N, dtype=np.int64), N,
                          TEXT_SEED)
    index.counts(hashes)  # maps the segments' pages
    one = []
    for _ in range(3):
        start = time.perf_counter()
        index.counts(hashes)
        one.append(time.perf_counter() - start)
    parts = np.array_split(hashes, threads)
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        list(pool.map(index.counts, parts))
        split_s = time.perf_counter() - start
    return {"queries": len(hashes), "per_s_one_call": round(len(hashes) / min(one)),
            "threads": threads, "per_s_threads": round(len(hashes) / split_s)}


def contam_step(args: Any) -> dict[str, Any]:
    """Step 3's figures."""
    from bench_contam import build_ours, parse_size, sample_ngrams
    from zipf_corpus import ZipfSpec

    deadline = time.monotonic() + args.budget_s - 10
    tokens = parse_size("2M") if args.small else parse_size(args.tokens)
    memory = parse_size("64MB") if args.small else parse_size(args.memory)
    threads = [1, 2] if args.small else [int(t) for t in args.threads.split(",")]
    spec = ZipfSpec(tokens=tokens, seed=0)
    start = time.perf_counter()
    shards = write_corpus_parallel(spec, args.work / "contam" / "zipf", 25_000_000, os.cpu_count() or 1)
    out: dict[str, Any] = {"tokens": tokens, "memory_bytes": memory, "cpus": os.cpu_count(),
                           "corpus_s": round(time.perf_counter() - start, 1), "builds": {}}
    index_dir, ran = args.work / "contam" / "index", {}
    for t in sorted(threads, reverse=True):  # most threads first: the slow 1-thread build is the one skipped
        left = deadline - time.monotonic()
        expected = min(ran.values(), default=0.0) * 2.2  # the next build has half the threads
        if ran and left < expected + 5:
            out["builds"][str(t)] = skipped(f"step budget: {left:.0f} s left, about {expected:.0f} s needed")
            continue
        got = build_ours(shards, index_dir, t, memory)
        ran[t] = got["seconds"]
        out["builds"][str(t)] = {
            "seconds": round(got["seconds"], 2), "cpu_s": round(got["cpu_s"], 2),
            "mtok_per_s": round(got["tokens"] / got["seconds"] / 1e6, 1),
            "peak_rss_mib": round(got["peak_rss"] / (1 << 20)), "peak_anon_mib": round(got["peak_anon"] / (1 << 20)),
            "index_mib": round(got["bytes"] / (1 << 20), 1)}
        if "lookups" not in out:  # on the index of the most threads, before the next build replaces it
            queries = sample_ngrams(shards, spec, 2000 if args.small else args.samples, 1)
            out["lookups"] = lookups(index_dir, queries, t)
    base = min(ran)  # 1 where it ran: efficiency = (base x t_base) / (threads x t)
    for t, seconds in ran.items():
        out["builds"][str(t)]["efficiency"] = round(base * ran[base] / (t * seconds), 2)
    out["efficiency_base_threads"] = base
    return out


def main() -> None:
    parser = step_args(__doc__)
    parser.add_argument("--tokens", default="1G", help="corpus size (bench_contam sizes: 1G = 1e9 tokens)")
    parser.add_argument("--memory", default="16GB")
    parser.add_argument("--threads", default="1,2,4,8,16")
    parser.add_argument("--samples", type=int, default=200_000, help="8-grams looked up")
    run_step(parser.parse_args(), "contam_build", contam_step)


if __name__ == "__main__":
    main()
