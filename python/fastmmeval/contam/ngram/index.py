"""An out-of-core index of hashed n-gram counts over a training corpus.

Folder layout: `DIR/manifest.json` (settings, meta, the generations with the shards and segment files of each,
token and document totals) and `DIR/seg/<generation>/p<partition>.seg` (see `contam.ngram.segment` for the
file format).
`add` maps each source into sorted runs under `DIR/tmp/`, reduces them into one new generation of
segments, and publishes it by atomically rewriting the manifest last (with `durable`, only once the
segments and their folders are on disk, so that a power cut cannot leave a published, truncated segment;
without, such a segment is refused by name when the index is opened);
anything a killed build left is swept by the next `add`. `DIR/image_tokens/` keeps the image tokens of the
record shards added, for scans that name training ids (`contam.ngram.image_cache`).
"""

from __future__ import annotations

import collections
import fcntl
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fastmmeval import _core
from fastmmeval.contam.ngram import image_cache, ray_engine, shard_identity
from fastmmeval.contam.ngram.build import map_sources, merge_runs, reduce_partition, runs_by_partition, segment_file
from fastmmeval.contam.ngram.segment import NgramIndexError, read_header
from fastmmeval.contam.ngram.settings import NAMED_MISSING, IndexSettings, ShardSource
from fastmmeval.util import atomic_temps, remove_stale_temps, write_json_atomic

FORMAT = "fastmmeval.ngram-index"
FORMAT_VERSION = 2  # 2: bit-packed segments (segment format 2)
SYNC_THREADS = 16  # fsync waits on the disk, not on a core: more files in flight keep its queue full


def _partition_of(hashes: np.ndarray, settings: IndexSettings) -> np.ndarray:
    if settings.partition_bits == 0:
        return np.zeros(len(hashes), np.int64)
    return (hashes >> np.uint64(64 - settings.partition_bits)).astype(np.int64)


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

    def __init__(self, path: Path, manifest: dict[str, Any], segments: dict[int, list[Any]] | None) -> None:
        self.path = path
        self._manifest = manifest
        self.settings = IndexSettings(**manifest["settings"])
        self.meta: dict[str, Any] = manifest["meta"]
        self._segments = segments  # None: not mapped yet (see _mapped)

    @classmethod
    def create(cls, path: Path | str, settings: IndexSettings, meta: dict[str, Any]) -> NgramIndex:
        """A new empty index at `path` (an error if `path` exists and is not empty). An index there that holds
        nothing yet, made with the same settings and meta (by a build that failed or was killed before it
        published anything), is taken up again instead."""
        path = Path(path)
        if (path / "manifest.json").is_file():
            found = _load_manifest(path)
            same = found.get("settings") == asdict(settings) and found.get("meta") == meta
            if same and found.get("generations") == [] and found.get("format") == FORMAT:
                return cls.open(path)
            raise NgramIndexError(
                f"{path}: already holds an index; add shards to it with `fastmmeval contam add --index {path}`, "
                "or give a new folder"
            )
        # A create killed before its manifest was in place leaves `seg/` and the manifest's temporary file.
        leftovers = {path / "seg", *atomic_temps(path / "manifest.json")}
        if path.exists() and (not path.is_dir() or any(p not in leftovers for p in path.iterdir())):
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
        try:
            (path / "seg").mkdir(parents=True, exist_ok=True)
            write_json_atomic(path / "manifest.json", manifest)
        except OSError as e:
            raise NgramIndexError(f"{path}: cannot create an index there ({e})") from e
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
        return cls(path, manifest, _open_segments(path, manifest, verify))

    @contextmanager
    def _locked(self, what: str) -> Iterator[None]:
        """Holds the index's write lock while `what` runs; an OSError on the way (a full disk, a read-only
        folder) is one error saying so."""
        try:
            with open(self.path / ".lock", "w") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError as e:
                    raise NgramIndexError(f"{self.path}: another process is writing this index") from e
                yield
        except OSError as e:
            raise NgramIndexError(
                f"{self.path}: {what} stopped ({e}); the index keeps every generation published before, "
                "and the next add sweeps what this one left"
            ) from e

    def _sweep(self) -> None:
        """Delete what a killed add or compact left: runs, temp files, unpublished segment folders."""
        shutil.rmtree(self.path / "tmp", ignore_errors=True)
        remove_stale_temps(self.path / "manifest.json")
        image_cache.sweep(self.image_cache().folder)
        live = {Path(rel).parent.name for gen in self._manifest["generations"] for rel in gen["segments"].values()}
        for d in (self.path / "seg").iterdir():
            if d.name not in live:
                shutil.rmtree(d, ignore_errors=True)

    def _publish(self, manifest: dict[str, Any], seg_dir: Path, durable: bool) -> None:
        """Make `manifest` the index's, once the segments it names in `seg_dir` are on disk (when `durable`)."""
        if durable:
            _sync_folder(seg_dir, SYNC_THREADS)
            _sync_folder(seg_dir.parent, 0)
        write_json_atomic(self.path / "manifest.json", manifest)
        if durable:
            _sync_folder(self.path, 0)  # the manifest's rename
        self._manifest = manifest
        self._segments = None

    @property
    def _mapped(self) -> dict[int, list[Any]]:
        """Every partition's segments, mapped on first use after an add or compact: publishing does not wait
        to map them while the build's memory is still being unmapped (both need the memory-map lock)."""
        if self._segments is None:
            self._segments = _open_segments(self.path, self._manifest, verify=False)
        return self._segments

    def image_cache(self, write: bool = False) -> image_cache.ImageTokenCache:
        """The index's image-token cache, to write while adding shards or to read while scanning."""
        return image_cache.ImageTokenCache(self.path.absolute() / image_cache.CACHE_FOLDER, write)

    def add(
        self,
        sources: Sequence[ShardSource],
        engine: str = "local",
        progress: bool = True,
        keep_image_tokens: bool = True,
        durable: bool = False,
    ) -> dict[str, Any]:
        """Append the sources as one new generation of segments, published atomically (with `durable`, only once
        they are on disk); a source whose shard the index already holds (same identity, `shard_identity`) is
        skipped, and when every one is, nothing is published. Returns stats (tokens, docs, windows,
        missing_images, missing_image_refs: the first NAMED_MISSING of those named, seconds, the `generation`
        published or None, and lines naming the shards `skipped` and those added `unrecognized`). With
        keep_image_tokens, record shards' image tokens are kept in the image cache as they are tokenized."""
        if keep_image_tokens:
            sources = [image_cache.with_image_cache(s, self.image_cache(write=True)) for s in sources]
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise NgramIndexError(f"source name {dup!r} appears twice in one add()")
        start = time.perf_counter()
        with self._locked("add"):
            self._sweep()
            plan = shard_identity.plan_add(sources, self._manifest["generations"])
            told = {"skipped": plan.skipped, "unrecognized": plan.unrecognized}
            if not plan.sources:
                nothing = dict.fromkeys(("tokens", "docs", "windows", "missing_images"), 0)
                return {**nothing, "missing_image_refs": [], "generation": None, **told,
                        "seconds": time.perf_counter() - start}  # fmt: skip
            sources, names = plan.sources, [s.name for s in plan.sources]
            gen_id = self._manifest["next_generation"]
            gen_name = f"g{gen_id:06d}"
            run_dir = self.path / "tmp" / gen_name
            seg_dir = self.path / "seg" / gen_name
            if engine == "local":
                stats = self._add_local(sources, run_dir, seg_dir, progress)
            elif engine == "ray":
                stats = ray_engine.run(sources, run_dir, seg_dir, self.settings, progress=progress)
            else:
                raise NgramIndexError(f"unknown engine {engine!r} (expected 'local' or 'ray')")
            segs = {
                str(p): f"seg/{gen_name}/{segment_file(p)}"
                for p in range(self.settings.partitions)
                if (seg_dir / segment_file(p)).exists()
            }
            counted = {k: int(stats[k]) for k in ("tokens", "docs", "windows", "missing_images")}
            named = list(stats["missing_image_refs"])[:NAMED_MISSING]
            manifest = dict(self._manifest)
            manifest["generations"] = [
                *self._manifest["generations"],
                {"id": gen_id, "kind": "add", "sources": names, "shards": shard_identity.stamped(plan.shards),
                 **counted, "missing_image_refs": named, "segments": segs},  # fmt: skip
            ]
            manifest["next_generation"] = gen_id + 1
            manifest["totals"] = {k: self._manifest["totals"][k] + v for k, v in counted.items()}
            self._publish(manifest, seg_dir, durable)
            shutil.rmtree(self.path / "tmp", ignore_errors=True)
        return {**counted, "missing_image_refs": named, "generation": gen_name, **told,
                "seconds": time.perf_counter() - start}  # fmt: skip

    def _add_local(
        self, sources: Sequence[ShardSource], run_dir: Path, seg_dir: Path, progress: bool
    ) -> dict[str, Any]:
        seg_dir.mkdir(parents=True, exist_ok=True)
        stats = map_sources(sources, run_dir / "local", self.settings, progress, seg_dir)
        by_part = runs_by_partition(run_dir, self.settings)
        jobs = [(runs, seg_dir / segment_file(p)) for p, runs in enumerate(by_part) if runs]
        merges = [job for job in jobs if len(job[0]) > 1]
        with tqdm(total=len(jobs), desc="reduce", unit="part", disable=not progress) as bar:
            for runs, out in jobs:  # a lone run spilled before the end: renamed here, cheaper than on a pool
                if len(runs) == 1:
                    reduce_partition(runs, out, self.settings)
                    bar.update()
            if merges:
                with ThreadPoolExecutor(self.settings.threads) as pool:
                    for _ in pool.map(lambda job: reduce_partition(job[0], job[1], self.settings), merges):
                        bar.update()
        return stats

    def compact(self, durable: bool = False) -> None:
        """Merge all segments of each partition into one (a new generation replacing all others), published
        (with `durable`) once the merged segments are on disk."""
        with self._locked("compact"):
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
                list(pool.map(lambda p: merge_runs(by_part[p], seg_dir / segment_file(p), self.settings, p), by_part))
            old_dirs = {(self.path / rel).parent for gen in gens for rel in gen["segments"].values()}
            manifest = dict(self._manifest)
            manifest["generations"] = [
                {
                    "id": gen_id,
                    "kind": "compact",
                    "sources": [s for gen in gens for s in gen["sources"]],
                    "shards": [shard for gen in gens for shard in shard_identity.shards_of(gen)],
                    **{k: sum(gen[k] for gen in gens) for k in ("tokens", "docs", "windows", "missing_images")},
                    "missing_image_refs": _named_missing(gens),
                    "segments": {str(p): f"seg/{gen_name}/{segment_file(p)}" for p in sorted(by_part)},
                }
            ]
            manifest["next_generation"] = gen_id + 1
            self._publish(manifest, seg_dir, durable)
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
            for seg in self._mapped.get(p, ()):
                seg.lookup(sorted_q[lo:hi], got[lo:hi], self.settings.cap)
        result = np.empty_like(got)
        result[order] = got
        return result

    def stats(self) -> dict[str, Any]:
        """Totals (tokens, docs, windows, missing images), distinct and frequent n-grams, segments, bytes,
        the image cache's entries and bytes, settings and meta."""
        distinct = frequent = 0
        for p, segs in self._mapped.items():
            if len(segs) == 1:
                distinct += segs[0].entries
                frequent += segs[0].frequent
            else:
                e, f = merge_runs([Path(s.path) for s in segs], None, self.settings, p)
                distinct += e
                frequent += f
        segs = [s for ss in self._mapped.values() for s in ss]
        return {
            **self._manifest["totals"],
            "missing_image_refs": _named_missing(self._manifest["generations"]),
            "distinct_ngrams": distinct,
            "frequent_ngrams": frequent,
            "generations": len(self._manifest["generations"]),
            "segments": len(segs),
            "bytes": sum(os.path.getsize(s.path) for s in segs),
            "image_cache": image_cache.usage(self.image_cache().folder),
            "settings": asdict(self.settings),
            "meta": self.meta,
        }


def _named_missing(generations: list[dict[str, Any]]) -> list[str]:
    """The first NAMED_MISSING unreadable images the generations name (indexes built before they were named
    name none)."""
    return [ref for gen in generations for ref in gen.get("missing_image_refs", [])][:NAMED_MISSING]


def _sync_folder(folder: Path, threads: int) -> None:
    """fsync the files of a folder (on `threads` threads; 0: no files, the folder only), then the folder."""
    def sync(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if threads:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(sync, [p for p in folder.iterdir() if p.is_file()]))
    sync(folder)


def _open_segments(path: Path, manifest: dict[str, Any], verify: bool) -> dict[int, list[Any]]:
    """The segments of the index at path, by partition, each header checked (and with verify its checksum)."""
    settings = IndexSettings(**manifest["settings"])
    segments: dict[int, list[Any]] = collections.defaultdict(list)
    for gen in manifest["generations"]:
        for part, rel in gen["segments"].items():
            segments[int(part)].append(_open_segment(path / rel, settings, int(part), verify))
    return dict(segments)


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
