"""An out-of-core index of hashed n-gram counts over a training corpus, and a streaming audit without one.

Folder layout: `DIR/manifest.json` (settings, meta, the generations and their segment files, token and
document totals) and `DIR/seg/<generation>/p<partition>.seg` (see `contam.segment` for the file format).
`add` maps each source into sorted runs under `DIR/tmp/`, reduces them into one new generation of
segments, and publishes it by atomically rewriting the manifest last; anything a killed build left is
swept by the next `add`.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import itertools
import os
import queue
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from fastmmeval import _core
from fastmmeval.contam.hashing import ngram_hashes_reference
from fastmmeval.contam.segment import NgramIndexError, read_header
from fastmmeval.results import write_json_atomic

FORMAT = "fastmmeval.ngram-index"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class TokenBlock:
    """Whole documents of one modality: doc i is tokens[doc_offsets[i]:doc_offsets[i+1]] (last ends at len(tokens))."""

    tokens: np.ndarray  # 1-D uint16 or uint32
    doc_offsets: np.ndarray  # 1-D int64, ascending, first 0 (empty docs allowed)
    seed: int  # TEXT_SEED or IMAGE_SEED
    ids: Sequence[str]  # training id of each doc


class ShardSource(Protocol):
    """One shard of a training corpus, read lazily in bounded blocks; picklable."""

    name: str

    def blocks(self) -> Iterator[TokenBlock]:
        """The shard's documents as bounded-size blocks."""
        ...

    def missing_images(self) -> int:
        """Images referenced but unreadable, counted while blocks() ran."""
        ...


@dataclass(frozen=True)
class IndexSettings:
    """How an index counts: n-gram length, the frequency threshold, partitions, memory budget, dedup, threads."""

    n: int = 8
    threshold: int = 10  # an n-gram seen more than `threshold` times is "frequent"; counts saturate at threshold + 1
    partition_bits: int = 8  # partitions by top hash bits
    memory_bytes: int = 1 << 30  # map budget (--memory); peak RSS stays within it + 20%
    dedup_docs: bool = False  # count documents containing an n-gram instead of occurrences
    threads: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.n <= 64:
            raise NgramIndexError(f"IndexSettings.n must be in 1..64, got {self.n}")
        if not 0 <= self.threshold <= 254:
            raise NgramIndexError(f"IndexSettings.threshold must be in 0..254 (counts are uint8), got {self.threshold}")
        if not 0 <= self.partition_bits <= 16:
            raise NgramIndexError(f"IndexSettings.partition_bits must be in 0..16, got {self.partition_bits}")
        if self.memory_bytes < 1 << 20:
            raise NgramIndexError(f"IndexSettings.memory_bytes must be at least 1 MiB, got {self.memory_bytes}")
        if self.threads < 1:
            raise NgramIndexError(f"IndexSettings.threads must be at least 1, got {self.threads}")

    @property
    def cap(self) -> int:
        """The saturated count: every count above the threshold is stored as threshold + 1."""
        return self.threshold + 1

    @property
    def partitions(self) -> int:
        """The number of partitions (and of segment files per generation at most)."""
        return 1 << self.partition_bits


def _check_block(block: TokenBlock, where: str) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.asarray(block.tokens)
    if tokens.dtype not in (np.uint16, np.uint32) or tokens.ndim != 1:
        raise NgramIndexError(f"{where}: tokens must be 1-D uint16 or uint32, not {tokens.dtype} {tokens.shape}")
    offsets = np.ascontiguousarray(block.doc_offsets, dtype=np.int64)
    if offsets.ndim != 1 or (len(offsets) and (offsets[0] != 0 or offsets[-1] > len(tokens))):
        raise NgramIndexError(f"{where}: doc_offsets must start at 0 and end within the {len(tokens)} tokens")
    if len(offsets) > 1 and bool((np.diff(offsets) < 0).any()):
        raise NgramIndexError(f"{where}: doc_offsets must be non-decreasing")
    if len(offsets) == 0 and len(tokens):
        raise NgramIndexError(f"{where}: tokens without documents (doc_offsets is empty)")
    if len(block.ids) != len(offsets):
        raise NgramIndexError(f"{where}: {len(block.ids)} ids for {len(offsets)} documents")
    return np.ascontiguousarray(tokens), offsets


def _partition_of(hashes: np.ndarray, settings: IndexSettings) -> np.ndarray:
    if settings.partition_bits == 0:
        return np.zeros(len(hashes), np.int64)
    return (hashes >> np.uint64(64 - settings.partition_bits)).astype(np.int64)


# ---------------------------------------------------------------- map and reduce (shared with the Ray engine)


def segment_file(partition: int) -> str:
    """The file name of a partition's segment inside a generation folder."""
    return f"p{partition:05d}.seg"


def _safe_name(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[-60:]
    return f"{slug}-{hashlib.blake2b(name.encode(), digest_size=6).hexdigest()}"


def map_shard(source: ShardSource, run_dir: Path, settings: IndexSettings, progress: bool = False) -> dict[str, Any]:
    """Hash, partition, sort and count the n-grams of one source into sorted runs under run_dir/<source name>/,
    spilling whenever `settings.memory_bytes` is reached; returns stats (tokens, docs, windows, missing_images,
    runs)."""
    return _map_sources([source], Path(run_dir) / _safe_name(source.name), settings, progress)


def _map_sources(
    sources: Sequence[ShardSource], out: Path, settings: IndexSettings, progress: bool
) -> dict[str, Any]:
    """map_shard over several sources sharing one set of partition buckets (fewer, larger runs)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    mapper = _core.NgramMapper(
        str(out / "m-"), settings.n, settings.threshold, settings.partition_bits, settings.dedup_docs,
        settings.memory_bytes, settings.threads,
    )
    tokens = docs = missing = 0
    # One block is mapped (GIL released) while the next is read: at most two blocks in memory.
    with (
        ThreadPoolExecutor(1) as pool,
        tqdm(desc="map", unit="tok", unit_scale=True, disable=not progress) as bar,
    ):
        pending = None
        for source in sources:
            for i, block in enumerate(source.blocks()):
                tok, offs = _check_block(block, f"{source.name} block {i}")
                if pending is not None:
                    pending.result()
                pending = pool.submit(mapper.add, tok, offs, int(block.seed))
                tokens += len(tok)
                docs += len(offs)
                bar.update(len(tok))
            missing += source.missing_images()
        if pending is not None:
            pending.result()
        runs = pool.submit(mapper.finish).result()
    return {"tokens": tokens, "docs": docs, "windows": mapper.windows, "missing_images": missing, "runs": runs}


def runs_by_partition(run_dir: Path, settings: IndexSettings) -> list[list[Path]]:
    """The run files under run_dir of each partition, in a stable order."""
    by_part: list[list[Path]] = [[] for _ in range(settings.partitions)]
    for path in sorted(Path(run_dir).glob("*/m*-p*-*.run")):
        by_part[int(path.name.split("-p", 1)[1].split("-", 1)[0])].append(path)
    return by_part


def _merge(inputs: Sequence[Path], out_path: Path | None, settings: IndexSettings, partition: int) -> tuple[int, int]:
    """Merge sorted count files of one partition (summing saturated counts) into out_path (None: count only);
    returns (entries, frequent)."""
    tmp = None if out_path is None else out_path.with_name(f".{out_path.name}.tmp")
    try:
        entries, frequent = _core.merge_segments(
            [str(p) for p in inputs],
            None if tmp is None else str(tmp),
            settings.n,
            settings.threshold,
            settings.partition_bits,
            partition,
            settings.dedup_docs,
        )
    except (ValueError, RuntimeError) as e:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise NgramIndexError(str(e)) from e
    if tmp is not None:
        os.replace(tmp, out_path)
    return entries, frequent


def reduce_partition(run_paths: Sequence[Path], out_path: Path, settings: IndexSettings) -> int:
    """K-way merge the sorted runs of one partition into the immutable segment out_path (atomic rename);
    consumes the runs and returns the number of entries."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if len(run_paths) == 1:
        # A run is already a segment of the same bytes: one input merges to itself.
        os.replace(run_paths[0], out_path)
        return read_header(out_path).entries
    partition = read_header(run_paths[0]).partition if run_paths else 0
    entries, _ = _merge(run_paths, out_path, settings, partition)
    for p in run_paths:
        Path(p).unlink(missing_ok=True)
    return entries


# ---------------------------------------------------------------- the index


def _load_manifest(path: Path) -> dict[str, Any]:
    import json

    try:
        return json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise NgramIndexError(f"{path}: not an n-gram index (no manifest.json)") from e
    except (OSError, ValueError) as e:
        raise NgramIndexError(f"{path / 'manifest.json'}: unreadable manifest ({e})") from e


class NgramIndex:
    """An on-disk n-gram count index: create or open, add shards, compact, look up counts."""

    def __init__(self, path: Path, manifest: dict[str, Any], segments: dict[int, list[Any]]) -> None:
        self.path = path
        self._manifest = manifest
        self.settings = IndexSettings(**manifest["settings"])
        self.meta: dict[str, Any] = manifest["meta"]
        self._segments = segments

    @classmethod
    def create(cls, path: Path | str, settings: IndexSettings, meta: dict[str, Any]) -> NgramIndex:
        """A new empty index at `path` (an error if `path` exists and is not empty)."""
        path = Path(path)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise NgramIndexError(f"{path}: exists and is not an empty folder; refusing to create an index there")
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "settings": asdict(settings),
            "meta": meta,
            "next_generation": 1,
            "generations": [],
            "totals": {"tokens": 0, "docs": 0, "windows": 0, "missing_images": 0},
        }
        (path / "seg").mkdir(parents=True, exist_ok=True)
        write_json_atomic(path / "manifest.json", manifest)
        return cls(path, manifest, {})

    @classmethod
    def open(cls, path: Path | str, verify: bool = True) -> NgramIndex:
        """The index at `path`, checking every segment's header (and, with verify, its checksum)."""
        path = Path(path)
        manifest = _load_manifest(path)
        if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
            raise NgramIndexError(
                f"{path / 'manifest.json'}: format {manifest.get('format')} v{manifest.get('version')}, "
                f"expected {FORMAT} v{FORMAT_VERSION}"
            )
        known = {f.name for f in fields(IndexSettings)}
        unknown = sorted(set(manifest["settings"]) - known)
        if unknown:
            raise NgramIndexError(f"{path / 'manifest.json'}: unknown settings {unknown}")
        settings = IndexSettings(**manifest["settings"])
        segments: dict[int, list[Any]] = collections.defaultdict(list)
        for gen in manifest["generations"]:
            for part, rel in gen["segments"].items():
                segments[int(part)].append(_open_segment(path / rel, settings, int(part), verify))
        return cls(path, manifest, dict(segments))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path / ".lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise NgramIndexError(f"{self.path}: another process is writing this index") from e
            yield

    def _sweep(self) -> None:
        """Delete what a killed add or compact left: runs, temp files, unpublished segment folders."""
        shutil.rmtree(self.path / "tmp", ignore_errors=True)
        live = {Path(rel).parent.name for gen in self._manifest["generations"] for rel in gen["segments"].values()}
        for d in (self.path / "seg").iterdir():
            if d.name not in live:
                shutil.rmtree(d, ignore_errors=True)

    def _publish(self, manifest: dict[str, Any]) -> None:
        write_json_atomic(self.path / "manifest.json", manifest)
        self._manifest = manifest
        segments: dict[int, list[Any]] = collections.defaultdict(list)
        for gen in manifest["generations"]:
            for part, rel in gen["segments"].items():
                segments[int(part)].append(_open_segment(self.path / rel, self.settings, int(part), verify=False))
        self._segments = dict(segments)

    def add(self, sources: Sequence[ShardSource], engine: str = "local", progress: bool = True) -> dict[str, Any]:
        """Append the sources as one new generation of segments, published atomically; returns stats
        (tokens, docs, windows, missing_images, seconds)."""
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise NgramIndexError(f"source name {dup!r} appears twice in one add()")
        start = time.perf_counter()
        with self._locked():
            self._sweep()
            gen_id = self._manifest["next_generation"]
            gen_name = f"g{gen_id:06d}"
            run_dir = self.path / "tmp" / gen_name
            seg_dir = self.path / "seg" / gen_name
            if engine == "local":
                stats = self._add_local(sources, run_dir, seg_dir, progress)
            elif engine == "ray":
                from fastmmeval.contam import ray_engine

                stats = ray_engine.run(sources, run_dir, seg_dir, self.settings, progress=progress)
            else:
                raise NgramIndexError(f"unknown engine {engine!r} (expected 'local' or 'ray')")
            segs = {
                str(p): f"seg/{gen_name}/{segment_file(p)}"
                for p in range(self.settings.partitions)
                if (seg_dir / segment_file(p)).exists()
            }
            counted = {k: int(stats[k]) for k in ("tokens", "docs", "windows", "missing_images")}
            manifest = dict(self._manifest)
            manifest["generations"] = [
                *self._manifest["generations"],
                {"id": gen_id, "kind": "add", "sources": names, **counted, "segments": segs},
            ]
            manifest["next_generation"] = gen_id + 1
            manifest["totals"] = {k: self._manifest["totals"][k] + v for k, v in counted.items()}
            self._publish(manifest)
            shutil.rmtree(self.path / "tmp", ignore_errors=True)
        return {**counted, "seconds": time.perf_counter() - start}

    def _add_local(
        self, sources: Sequence[ShardSource], run_dir: Path, seg_dir: Path, progress: bool
    ) -> dict[str, Any]:
        stats = _map_sources(sources, run_dir / "local", self.settings, progress)
        seg_dir.mkdir(parents=True, exist_ok=True)
        by_part = runs_by_partition(run_dir, self.settings)
        jobs = [(runs, seg_dir / segment_file(p)) for p, runs in enumerate(by_part) if runs]
        merges = [job for job in jobs if len(job[0]) > 1]
        with tqdm(total=len(jobs), desc="reduce", unit="part", disable=not progress) as bar:
            for runs, out in jobs:  # a single run is renamed into place: cheaper here than on a pool
                if len(runs) == 1:
                    reduce_partition(runs, out, self.settings)
                    bar.update()
            if merges:
                with ThreadPoolExecutor(self.settings.threads) as pool:
                    for _ in pool.map(lambda job: reduce_partition(job[0], job[1], self.settings), merges):
                        bar.update()
        return stats

    def compact(self) -> None:
        """Merge all segments of each partition into one (a new generation replacing all others)."""
        with self._locked():
            self._sweep()
            gens = self._manifest["generations"]
            if len(gens) <= 1:
                return
            gen_id = self._manifest["next_generation"]
            gen_name = f"c{gen_id:06d}"
            seg_dir = self.path / "seg" / gen_name
            seg_dir.mkdir(parents=True)
            by_part: dict[int, list[Path]] = collections.defaultdict(list)
            for gen in gens:
                for part, rel in gen["segments"].items():
                    by_part[int(part)].append(self.path / rel)
            with ThreadPoolExecutor(self.settings.threads) as pool:
                list(pool.map(lambda p: _merge(by_part[p], seg_dir / segment_file(p), self.settings, p), by_part))
            old_dirs = {(self.path / rel).parent for gen in gens for rel in gen["segments"].values()}
            manifest = dict(self._manifest)
            manifest["generations"] = [
                {
                    "id": gen_id,
                    "kind": "compact",
                    "sources": [s for gen in gens for s in gen["sources"]],
                    **{k: sum(gen[k] for gen in gens) for k in ("tokens", "docs", "windows", "missing_images")},
                    "segments": {str(p): f"seg/{gen_name}/{segment_file(p)}" for p in sorted(by_part)},
                }
            ]
            manifest["next_generation"] = gen_id + 1
            self._publish(manifest)
            for d in old_dirs:
                shutil.rmtree(d, ignore_errors=True)

    def counts(self, hashes: np.ndarray) -> np.ndarray:
        """The stored count of each query hash: uint8, summed over segments, saturated at threshold + 1, 0 if absent."""
        hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        sorted_q = hashes[order]
        parts = _partition_of(sorted_q, self.settings)
        present, starts = np.unique(parts, return_index=True)
        ends = np.searchsorted(parts, present, side="right")
        got = np.zeros(len(hashes), np.uint8)
        for p, lo, hi in zip(present.tolist(), starts.tolist(), ends.tolist(), strict=True):
            for seg in self._segments.get(p, ()):
                seg.lookup(sorted_q[lo:hi], got[lo:hi], self.settings.cap)
        result = np.empty_like(got)
        result[order] = got
        return result

    def stats(self) -> dict[str, Any]:
        """Totals (tokens, docs, windows, missing images), distinct and frequent n-grams, segments, bytes,
        settings and meta."""
        distinct = frequent = 0
        for p, segs in self._segments.items():
            if len(segs) == 1:
                distinct += segs[0].entries
                frequent += segs[0].frequent
            else:
                e, f = _merge([Path(s.path) for s in segs], None, self.settings, p)
                distinct += e
                frequent += f
        segs = [s for ss in self._segments.values() for s in ss]
        return {
            **self._manifest["totals"],
            "distinct_ngrams": distinct,
            "frequent_ngrams": frequent,
            "generations": len(self._manifest["generations"]),
            "segments": len(segs),
            "bytes": sum(os.path.getsize(s.path) for s in segs),
            "settings": asdict(self.settings),
            "meta": self.meta,
        }


def _open_segment(path: Path, settings: IndexSettings, partition: int, verify: bool) -> Any:
    header = read_header(path)
    expected = (settings.n, settings.threshold, settings.partition_bits, partition, settings.dedup_docs)
    got = (header.n, header.threshold, header.partition_bits, header.partition, header.dedup)
    if got != expected:
        raise NgramIndexError(
            f"{path}: segment is for (n, threshold, partition_bits, partition, dedup)={got}, "
            f"the index expects {expected}"
        )
    try:
        return _core.NgramSegment(str(path), verify)
    except (ValueError, RuntimeError) as e:
        raise NgramIndexError(str(e)) from e


# ---------------------------------------------------------------- streaming audits


def stream_counts(
    query_hashes: np.ndarray, sources: Sequence[ShardSource], settings: IndexSettings, max_ids: int = 3,
    progress: bool = False,
) -> tuple[np.ndarray, list[list[str]]]:
    """Counts (uint8, saturated like the index) of each query hash in the corpus streamed past it, and up to
    max_ids training ids of documents containing it (the first ones in corpus order)."""
    queries = np.ascontiguousarray(query_hashes, dtype=np.uint64)
    uniq, inverse = np.unique(queries, return_inverse=True)
    streams = [
        _core.NgramStream(uniq, settings.n, settings.threshold, settings.dedup_docs, max_ids)
        for _ in range(settings.threads)
    ]
    free: queue.SimpleQueue = queue.SimpleQueue()
    for s in streams:
        free.put(s)
    hits: list[tuple[int, int, int, str]] = []  # (block number, doc, query, id)

    def work(stream: Any, number: int, block: TokenBlock, tok: np.ndarray, offs: np.ndarray) -> None:
        try:
            found = stream.process(tok, offs, int(block.seed))
        finally:
            free.put(stream)
        hits.extend((number, int(d), int(q), str(block.ids[int(d)])) for q, d in found)

    number = itertools.count()
    with (
        ThreadPoolExecutor(settings.threads) as pool,
        tqdm(desc="stream", unit="tok", unit_scale=True, disable=not progress) as bar,
    ):
        futures = []
        for source in sources:
            for i, block in enumerate(source.blocks()):
                tok, offs = _check_block(block, f"{source.name} block {i}")
                stream = free.get()  # at most `threads` blocks in flight
                for f in [f for f in futures if f.done()]:
                    f.result()  # raises a worker's error now rather than at the end
                    futures.remove(f)
                futures.append(pool.submit(work, stream, next(number), block, tok, offs))
                bar.update(len(tok))
        for f in futures:
            f.result()
    total = np.zeros(len(uniq), np.int64)
    for s in streams:
        total += s.counts
    ids_of: list[list[str]] = [[] for _ in range(len(uniq))]
    for _, _, q, doc_id in sorted(hits):
        if len(ids_of[q]) < max_ids:
            ids_of[q].append(doc_id)
    counts = np.minimum(total, settings.cap).astype(np.uint8)
    return counts[inverse], [list(ids_of[q]) for q in inverse]


# ---------------------------------------------------------------- references (pure Python / numpy)


def reference_counts(sources: Sequence[ShardSource], settings: IndexSettings) -> collections.Counter:
    """Pure-Python Counter of every n-gram hash in the sources (unsaturated; documents containing it with
    dedup_docs), for tests."""
    counts: collections.Counter = collections.Counter()
    for source in sources:
        for block in source.blocks():
            tokens = np.asarray(block.tokens, dtype=np.uint32)
            bounds = [int(o) for o in block.doc_offsets] + [len(tokens)]
            for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
                doc = ngram_hashes_reference(tokens[begin:end], [0], settings.n, int(block.seed)).tolist()
                counts.update(set(doc) if settings.dedup_docs else doc)
    return counts


def count_hashes_reference(
    hashes: np.ndarray, cap: int, doc_of: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique hashes and their counts saturated at cap (uint8), in numpy; with doc_of (the document of
    each hash) a hash counts once per document. The numpy twin of one map spill."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    if doc_of is not None:
        pairs = np.unique(np.stack([hashes, np.asarray(doc_of, np.uint64)], axis=1), axis=0)
        hashes = pairs[:, 0]
    uniq, counts = np.unique(hashes, return_counts=True)
    return uniq, np.minimum(counts, cap).astype(np.uint8)


def merge_counts_reference(parts: Sequence[tuple[np.ndarray, np.ndarray]], cap: int) -> tuple[np.ndarray, np.ndarray]:
    """The numpy twin of a k-way merge: sorted unique hashes with counts summed and saturated at cap."""
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    hashes = np.concatenate([h for h, _ in parts]).astype(np.uint64)
    counts = np.concatenate([c for _, c in parts]).astype(np.int64)
    uniq, inverse = np.unique(hashes, return_inverse=True)
    summed = np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64)
    return uniq, np.minimum(summed, cap).astype(np.uint8)


def stream_block_reference(
    queries: np.ndarray, block: TokenBlock, settings: IndexSettings
) -> tuple[np.ndarray, list[set[int]]]:
    """Occurrences (documents containing, with dedup) of each sorted query hash in one block, and the set of
    documents containing each; the reference of one streaming step."""
    tokens = np.asarray(block.tokens, dtype=np.uint32)
    bounds = [int(o) for o in block.doc_offsets] + [len(tokens)]
    counts = np.zeros(len(queries), np.int64)
    docs: list[set[int]] = [set() for _ in range(len(queries))]
    where = {int(h): i for i, h in enumerate(queries)}
    for d, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        doc = ngram_hashes_reference(tokens[begin:end], [0], settings.n, int(block.seed)).tolist()
        for h in set(doc) if settings.dedup_docs else doc:
            if h in where:
                counts[where[h]] += 1
                docs[where[h]].add(d)
    return counts, docs

