"""The index build's map and reduce, shared by the local and the Ray engine: each source's n-grams hashed,
partitioned, sorted and counted into runs (`map_shard`), and each partition's runs merged into one
immutable segment (`reduce_partition`)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fastmmeval import _core
from fastmmeval.contam.ngram.segment import NgramIndexError, read_header
from fastmmeval.contam.ngram.settings import (
    NAMED_MISSING,
    IndexSettings,
    ShardSource,
    TokenBlock,
    check_block,
    missing_image_refs,
)
from fastmmeval.pools import read_ahead


def segment_file(partition: int) -> str:
    """The file name of a partition's segment inside a generation folder."""
    return f"p{partition:05d}.seg"


def safe_name(label: str, key: str | None = None) -> str:
    """A file name for `label`: its last 60 characters made file-safe, then a hash of `key` (default: the
    label) so that distinct keys get distinct names."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", label)[-60:]
    return f"{slug}-{hashlib.blake2b((label if key is None else key).encode(), digest_size=6).hexdigest()}"


def map_shard(source: ShardSource, run_dir: Path, settings: IndexSettings, progress: bool = False) -> dict[str, Any]:
    """Hash, partition, sort and count the n-grams of one source into sorted runs under run_dir/<source name>/,
    spilling whenever `settings.memory_bytes` is reached; returns stats (tokens, docs, windows, missing_images,
    missing_image_refs: the first NAMED_MISSING of those named, runs, and dropped: windows left out as copies of
    n-grams whose counts saturated within a sample)."""
    return map_sources([source], Path(run_dir) / safe_name(source.name), settings, progress)


def map_sources(
    sources: Sequence[ShardSource],
    out: Path,
    settings: IndexSettings,
    progress: bool,
    seg_dir: Path | None = None,
) -> dict[str, Any]:
    """map_shard over several sources sharing one set of partition buckets (fewer, larger runs). With seg_dir,
    a partition that fits in one run has it written there as its segment (`segment_file`), not left in `out`
    to be renamed."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    mapper = _core.NgramMapper(
        str(out / "m-"), settings.n, settings.threshold, settings.partition_bits, settings.dedup_docs,
        settings.memory_bytes, settings.threads,
    )
    tokens = docs = missing = 0
    named: list[str] = []
    # The next block is read on a thread while this one is mapped (GIL released): at most two blocks in memory.
    # The native calls run on this thread, where Ctrl-C stops them within a second.
    with tqdm(desc="map", unit="tok", unit_scale=True, disable=not progress) as bar, _native_errors():
        for source, i, block in read_ahead(_blocks(sources)):
            if block is None:  # the source's last block is mapped
                missing += source.missing_images()
                named += [f"{source.name}: {ref}" for ref in missing_image_refs(source)][: NAMED_MISSING - len(named)]
                continue
            tok, offs = check_block(block, f"{source.name} block {i}")
            mapper.add(tok, offs, int(block.seed))
            tokens += len(tok)
            docs += len(offs)
            bar.update(len(tok))
        runs = mapper.finish("" if seg_dir is None else f"{seg_dir}{os.sep}")
    return {
        "tokens": tokens,
        "docs": docs,
        "windows": mapper.windows,
        "dropped": mapper.dropped,
        "missing_images": missing,
        "missing_image_refs": named,
        "runs": runs,
    }


@contextmanager
def _native_errors() -> Iterator[None]:
    """The native build's failures (a run that cannot be written: the file and why) as NgramIndexError."""
    try:
        yield
    except RuntimeError as e:
        raise NgramIndexError(str(e)) from e


def _blocks(sources: Sequence[ShardSource]) -> Iterator[tuple[ShardSource, int, TokenBlock | None]]:
    """(source, index, block) of every block of every source, and (source, -1, None) after each source."""
    for source in sources:
        for i, block in enumerate(source.blocks()):
            yield source, i, block
        yield source, -1, None


def runs_by_partition(run_dir: Path, settings: IndexSettings) -> list[list[Path]]:
    """The run files under run_dir of each partition, in a stable order."""
    by_part: list[list[Path]] = [[] for _ in range(settings.partitions)]
    for path in sorted(Path(run_dir).glob("*/m*-p*-*.run")):
        by_part[int(path.name.split("-p", 1)[1].split("-", 1)[0])].append(path)
    return by_part


def merge_runs(
    inputs: Sequence[Path], out_path: Path | None, settings: IndexSettings, partition: int
) -> tuple[int, int]:
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


def reduce_partition(run_paths: Sequence[Path], out_path: Path, settings: IndexSettings) -> None:
    """K-way merge the sorted runs of one partition into the immutable segment out_path (atomic rename);
    consumes the runs."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if len(run_paths) == 1:
        # A run is already a segment of the same bytes: one input merges to itself.
        os.replace(run_paths[0], out_path)
        return
    partition = read_header(run_paths[0]).partition if run_paths else 0
    merge_runs(run_paths, out_path, settings, partition)
    for p in run_paths:
        Path(p).unlink(missing_ok=True)
