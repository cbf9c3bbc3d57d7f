"""The contamination index build and lookup against infini-gram 2.6.0 on the same synthetic Zipf corpus.

Both index the same u16 corpus (`bench/zipf_corpus.py`: Zipf tokens over a 50k vocabulary with pasted
phrases of Zipf popularity, log-normal document lengths) with the same number of cores: ours is
`NgramIndex` (local engine, `--threads`, reading the pre-tokenized shards through
`contam.ngram.token_shards.TokenShardSource`), infini-gram its Rust suffix-array indexer (`--cpus`). Both are timed
from already tokenized files to a queryable index (writing the corpus files is not timed), each build in
its own process, in wall and in CPU seconds (steadier on a shared machine). Ours is built `--builds`
times (3) and the median build is reported with every time beside it: one build takes about a second,
so page-cache and page-fault state left by the previous process swings it; infini-gram's single
build takes about 27 s. Peak RSS is our build
process's high-water mark; its anonymous part (without mapped file pages) is polled from /proc.
The check: on 8-grams drawn from the corpus (at random positions: mostly rare) and from the pasted
phrases (frequent to rare), our count equals min(infini-gram's, threshold + 1). Lookups: ours is one
batched `counts` call (hashing included), infini-gram one `count` call per 8-gram.

`--scaling 50M,100M,200M,400M` adds a table (on stderr, and under "scaling" in the JSON) of our build
time and peak RSS at those sizes with the given `--memory`, on prefixes of whole shards of one corpus
generated out of core, to show linear time and flat memory.

`--fsync_cost` instead measures what publishing durably costs (`contam index --fsync`: every new segment and
its folder fsynced before the manifest): `--builds` rounds, each building with and then without, each build in
its own process; the medians, their ratio and the time spent waiting in fsync, without infini-gram.

Prints one JSON line last. Quick (100M tokens, about 40 s on an idle 2-core machine):
    .venv/bin/python bench/bench_contam.py
Full:
    .venv/bin/python bench/bench_contam.py --tokens 100M --scaling 50M,100M,200M,400M --memory 1GB
The cost of fsync:
    .venv/bin/python bench/bench_contam.py --tokens 100M --builds 3 --fsync_cost
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from zipf_corpus import (  # noqa: E402
    PHRASE_LEN,
    SHARD_TOKENS,
    ZipfSpec,
    phrase_bank,
    write_corpus,
    write_infini_gram_files,
)

from fastmmeval.contam.ngram import index as index_module  # noqa: E402
from fastmmeval.contam.ngram.hashing import TEXT_SEED, ngram_hashes  # noqa: E402
from fastmmeval.contam.ngram.index import NgramIndex  # noqa: E402
from fastmmeval.contam.ngram.settings import IndexSettings  # noqa: E402
from fastmmeval.contam.ngram.token_shards import TokenShardSource  # noqa: E402

N = 8
UNITS = {"K": 10**3, "M": 10**6, "G": 10**9, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def parse_size(text: str) -> int:
    """'400M' -> 400_000_000 tokens, '1GB' -> 2**30 bytes, '5000' -> 5000."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]B?)?", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 50M, 1GB)")
    return int(float(match.group(1)) * UNITS.get(match.group(2) or "", 1))


def build_ours(shards: list[Path], index_dir: Path, threads: int, memory: int, durable: bool = True) -> dict:
    """Build our index of the shards in a child process; its wall and CPU time, peak RSS, index size."""
    shutil.rmtree(index_dir, ignore_errors=True)
    os.sync()  # neither build pays for writing back the other's (or the corpus's) dirty pages
    cmd = [sys.executable, __file__, "--child-build", str(index_dir), *map(str, shards)]
    cmd += ["--threads", str(threads), "--memory", str(memory)] + (["--fsync"] if durable else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


class AnonPeak:
    """Polls this process's anonymous RSS (/proc/self/status RssAnon) on a thread; `peak` in bytes."""

    def __init__(self, every_s: float = 0.01) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(every_s,), daemon=True)
        self._thread.start()

    def _poll(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            with open("/proc/self/status") as f:
                kib = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
            self.peak = max(self.peak, kib * 1024)

    def stop(self) -> int:
        """Stop polling; the peak seen."""
        self._stop.set()
        self._thread.join()
        return self.peak


def cpu_seconds(who: int) -> float:
    """User + system CPU seconds of this process (RUSAGE_SELF) or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def child_build(args: argparse.Namespace) -> None:
    """The build measured by `build_ours`: print wall and CPU seconds, peak RSS and index size as JSON."""
    index_dir, *shards = (Path(p) for p in args.child_build)
    settings = IndexSettings(n=N, threshold=args.threshold, memory_bytes=args.memory, threads=args.threads)
    sources = [TokenShardSource(p) for p in shards]
    synced = {"s": 0.0}
    sync_folder = index_module._sync_folder

    def timed_sync(*a: object) -> None:  # the time spent waiting for fsync, apart from the build's
        start = time.perf_counter()
        sync_folder(*a)
        synced["s"] += time.perf_counter() - start

    index_module._sync_folder = timed_sync
    anon = AnonPeak()
    start, cpu = time.perf_counter(), cpu_seconds(resource.RUSAGE_SELF)
    index = NgramIndex.create(index_dir, settings, meta={"corpus": "bench/zipf_corpus.py"})
    added = index.add(sources, progress=False, durable=args.fsync)
    seconds, cpu = time.perf_counter() - start, cpu_seconds(resource.RUSAGE_SELF) - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    got = {"seconds": seconds, "cpu_s": cpu, "peak_rss": peak, "peak_anon": anon.stop(), "tokens": added["tokens"]}
    got["sync_s"] = synced["s"]
    print(json.dumps({**got, "bytes": index.stats()["bytes"]}))


def build_infini_gram(shards: list[Path], save_dir: Path, cpus: int) -> tuple[float, float, float, int]:
    """Build infini-gram's index of the corpus; (wall seconds, seconds its suffix-array step reports, CPU seconds
    of its processes, index bytes)."""
    shutil.rmtree(save_dir, ignore_errors=True)
    write_infini_gram_files(shards, save_dir)
    empty = save_dir.parent / "empty"
    empty.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "infini_gram.indexing", "--data_dir", str(empty), "--save_dir", str(save_dir)]
    cmd += ["--token_dtype", "u16", "--cpus", str(cpus), "--mem", "16", "--shards", "1", "--ulimit", "20000"]
    os.sync()
    start, cpu = time.perf_counter(), cpu_seconds(resource.RUSAGE_CHILDREN)
    log = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall, cpu = time.perf_counter() - start, cpu_seconds(resource.RUSAGE_CHILDREN) - cpu
    reported = re.search(r"Step 2 \(build_sa\): Done. Took ([\d.]+) seconds", log)
    size = sum(p.stat().st_size for p in save_dir.iterdir())
    return wall, float(reported.group(1)) if reported else wall, cpu, size


def sample_ngrams(shards: list[Path], spec: ZipfSpec, samples: int, seed: int) -> np.ndarray:
    """(samples, 8) u16 8-grams: half at random in-document positions of the corpus, half from the phrases."""
    rng = np.random.default_rng(seed)
    tokens = [np.memmap(p, dtype=np.uint16, mode="r") for p in shards]
    starts = [np.fromfile(p.with_name(p.name + ".offsets"), dtype=np.int64) for p in shards]
    shard_of = np.concatenate([np.full(len(s), i) for i, s in enumerate(starts)])
    begins = np.concatenate(starts)
    lengths = np.concatenate([np.diff(np.append(s, len(t))) for s, t in zip(starts, tokens, strict=True)])
    usable = np.flatnonzero(lengths >= N)
    docs = rng.choice(usable, size=samples - samples // 2, p=lengths[usable] / lengths[usable].sum())
    at = begins[docs] + (rng.random(len(docs)) * (lengths[docs] - N + 1)).astype(np.int64)
    from_corpus = np.stack([np.asarray(tokens[shard_of[d]][a : a + N]) for d, a in zip(docs, at, strict=True)])
    bank = phrase_bank(spec)
    ranks = np.minimum(np.exp(rng.uniform(0, np.log(len(bank)), size=samples // 2)).astype(np.int64), len(bank) - 1)
    shifts = rng.integers(0, PHRASE_LEN - N + 1, size=len(ranks))
    from_phrases = np.stack([bank[r, s : s + N] for r, s in zip(ranks, shifts, strict=True)])
    return np.concatenate([from_corpus, from_phrases]).astype(np.uint16)


def lookup_ours(index_dir: Path, queries: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Our counts of the 8-grams (one batch: hash, then look up), the seconds of the first (cold: segment pages
    not yet mapped) batch and the best of three more (warm)."""
    index = NgramIndex.open(index_dir)
    offsets = np.arange(0, queries.size, N, dtype=np.int64)
    times = []
    for _ in range(4):
        start = time.perf_counter()
        counts = index.counts(ngram_hashes(queries.ravel().astype(np.uint32), offsets, N, TEXT_SEED))
        times.append(time.perf_counter() - start)
    return counts, times[0], min(times[1:])


def lookup_infini_gram(save_dir: Path, queries: np.ndarray) -> tuple[np.ndarray, float]:
    """infini-gram's count of each 8-gram (one call each) and the seconds of the second (warm) pass."""
    from infini_gram.engine import InfiniGramEngine

    engine = InfiniGramEngine(index_dir=str(save_dir), eos_token_id=0, version=4, token_dtype="u16")
    as_lists = [[int(t) for t in q] for q in queries]
    for _ in range(2):
        start = time.perf_counter()
        counts = [engine.count(input_ids=q)["count"] for q in as_lists]
        seconds = time.perf_counter() - start
    return np.array(counts, dtype=np.int64), seconds


def scaling_table(args: argparse.Namespace, shards: list[Path], workdir: Path) -> list[dict]:
    """Our build time and peak RSS on growing prefixes (whole shards) of one out-of-core corpus."""
    sizes = sorted(parse_size(s) for s in args.scaling.split(","))
    rows = []
    print(f"\nscaling, --memory {args.memory / (1 << 30):g} GiB, {args.threads} threads", file=sys.stderr)
    print("| tokens | build s | CPU s | M tokens/s | s per 100M tokens | peak RSS MiB | anon MiB |", file=sys.stderr)
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |", file=sys.stderr)
    for size in sizes:
        got = build_ours(shards[: -(-size // SHARD_TOKENS)], workdir / "ours-scaling", args.threads, args.memory)
        row = {
            "tokens": got["tokens"],
            "seconds": round(got["seconds"], 2),
            "cpu_s": round(got["cpu_s"], 2),
            "mtok_per_s": round(got["tokens"] / got["seconds"] / 1e6, 1),
            "peak_rss_mib": round(got["peak_rss"] / (1 << 20)),
            "peak_anon_mib": round(got["peak_anon"] / (1 << 20)),
        }
        rows.append(row)
        print(
            f"| {row['tokens']:,} | {row['seconds']} | {row['cpu_s']} | {row['mtok_per_s']} | "
            f"{got['seconds'] / got['tokens'] * 1e8:.2f} | {row['peak_rss_mib']} | {row['peak_anon_mib']} |",
            file=sys.stderr,
        )
    shutil.rmtree(workdir / "ours-scaling", ignore_errors=True)
    return rows


def fsync_cost(args: argparse.Namespace) -> None:
    """Print the JSON line of `--fsync_cost`: median build seconds with and without fsync, and their ratio."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_contam_"))
    try:
        shards = write_corpus(ZipfSpec(tokens=args.tokens, seed=args.seed), workdir / "zipf")
        runs: dict[bool, list[float]] = {True: [], False: []}
        waits = []
        for _ in range(args.builds):
            for durable in (True, False):
                got = build_ours(shards, workdir / "ours", args.threads, args.memory, durable)
                runs[durable].append(got["seconds"])
                waits += [got["sync_s"]] if durable else []
        index_mib = got["bytes"] / (1 << 20)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    with_s, without_s = (sorted(runs[d])[len(runs[d]) // 2] for d in (True, False))
    print(
        json.dumps(
            {
                "bench": "contam_fsync",
                "tokens": got["tokens"],
                "threads": args.threads,
                "index_mib": round(index_mib, 1),
                "fsync_s": round(with_s, 3),
                "no_fsync_s": round(without_s, 3),
                "fsync_s_each": [round(s, 3) for s in runs[True]],
                "no_fsync_s_each": [round(s, 3) for s in runs[False]],
                "cost_pct": round(100 * (with_s / without_s - 1), 1),
                "sync_wait_s_each": [round(s, 3) for s in waits],
                "sync_wait_pct_of_no_fsync": round(100 * sorted(waits)[len(waits) // 2] / without_s, 1),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=parse_size, default=parse_size("100M"), help="corpus size in tokens")
    parser.add_argument("--threads", type=int, default=2, help="cores for both builds")
    parser.add_argument("--memory", type=parse_size, default=parse_size("1GB"), help="our build's memory budget")
    parser.add_argument("--threshold", type=int, default=10)
    parser.add_argument("--samples", type=int, default=2000, help="8-grams whose counts are compared")
    parser.add_argument("--scaling", default="", help="comma-separated sizes, e.g. 50M,100M,200M,400M")
    parser.add_argument("--builds", type=int, default=3,
                        help="our builds (each in a fresh process and folder); the median is reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None, help="corpus cache (default: a temporary folder)")
    parser.add_argument("--fsync_cost", action="store_true", help="time our builds with and without fsync only")
    parser.add_argument("--fsync", action="store_true", help=argparse.SUPPRESS)  # of a child build
    parser.add_argument("--child-build", nargs="+", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_build:
        child_build(args)
        return
    if args.fsync_cost:
        fsync_cost(args)
        return

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_contam_"))
    try:
        biggest = max([args.tokens, *(parse_size(s) for s in args.scaling.split(",") if s)])
        spec = ZipfSpec(tokens=biggest, seed=args.seed)
        every_shard = write_corpus(spec, workdir / "zipf")
        shards = every_shard[: -(-args.tokens // SHARD_TOKENS)]
        peer_wall, peer_s, peer_cpu, peer_bytes = build_infini_gram(shards, workdir / "infini", args.threads)
        builds = [build_ours(shards, workdir / "ours", args.threads, args.memory) for _ in range(args.builds)]
        ours = sorted(builds, key=lambda b: b["seconds"])[len(builds) // 2]  # the median build
        queries = sample_ngrams(shards, spec, args.samples, args.seed + 1)
        our_counts, our_cold_s, our_lookup_s = lookup_ours(workdir / "ours", queries)
        peer_counts, peer_lookup_s = lookup_infini_gram(workdir / "infini", queries)
        cap = args.threshold + 1
        agree = bool(np.array_equal(our_counts, np.minimum(peer_counts, cap)))
        shutil.rmtree(workdir / "infini", ignore_errors=True)
        scaling = scaling_table(args, every_shard, workdir) if args.scaling else []
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    ours_s = ours["seconds"]
    print(
        json.dumps(
            {
                "bench": "contam_index",
                "tokens": ours["tokens"],
                "threads": args.threads,
                "ours_s": round(ours_s, 3),
                "ours_s_each": [round(b["seconds"], 3) for b in builds],
                "peer": f"infini-gram {version('infini-gram')}",
                "peer_s": round(peer_s, 3),
                "peer_wall_s": round(peer_wall, 3),
                "ratio": round(peer_s / ours_s, 1),
                "ours_mtok_per_s": round(ours["tokens"] / ours_s / 1e6, 2),
                "peer_mtok_per_s": round(ours["tokens"] / peer_s / 1e6, 2),
                "ours_cpu_s": round(ours["cpu_s"], 3),
                "peer_cpu_s": round(peer_cpu, 3),
                "cpu_ratio": round(peer_cpu / ours["cpu_s"], 1),
                "build_target_30x_met": peer_s / ours_s >= 30,
                "ours_peak_rss_mib": round(ours["peak_rss"] / (1 << 20)),
                "ours_peak_anon_mib": round(ours["peak_anon"] / (1 << 20)),
                "ours_index_mib": round(ours["bytes"] / (1 << 20), 1),
                "peer_index_mib": round(peer_bytes / (1 << 20), 1),
                "lookup_us_ours": round(our_lookup_s / len(queries) * 1e6, 3),
                "lookup_us_ours_cold": round(our_cold_s / len(queries) * 1e6, 3),
                "lookup_us_peer": round(peer_lookup_s / len(queries) * 1e6, 2),
                "lookup_ratio": round(peer_lookup_s / our_lookup_s, 1),
                "lookup_target_100x_met": peer_lookup_s / our_lookup_s >= 100,
                "samples": len(queries),
                "samples_frequent": int((peer_counts > args.threshold).sum()),
                "samples_rare": int(((peer_counts >= 1) & (peer_counts <= args.threshold)).sum()),
                "agree": agree,
                "scaling": scaling,
            }
        )
    )


if __name__ == "__main__":
    main()
