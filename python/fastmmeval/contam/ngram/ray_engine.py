"""`--engine ray`: the index build's map and reduce steps as Ray tasks, one per shard source and one per partition.

The tasks run exactly the local engine's functions (`index.map_shard`, `index.reduce_partition`), so the
segments are byte-identical to `--engine local`. Each task uses one CPU and `memory_bytes / threads` of
memory, the share one local mapper thread gets. Runs and segments are written under the index folder, so
on a multi-node cluster that folder must be on a filesystem every node mounts, and every node needs
fastmmeval installed (and whatever module defines the shard sources).

The engine attaches to a running cluster when Ray is already initialised or `RAY_ADDRESS` is set, and
otherwise starts a local one with `threads` CPUs for the duration of the build.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fastmmeval.contam.ngram.build import map_shard, reduce_partition, runs_by_partition, segment_file
from fastmmeval.contam.ngram.settings import NAMED_MISSING, IndexSettings, ShardSource
from fastmmeval.errors import FastmmevalError

# A crashed map task is rerun (map_shard starts by clearing its own run folder); a reduce task consumes its
# runs as it goes, so it is never rerun.
MAP_RETRIES = 2
MIN_TASK_MEMORY = 16 << 20
# After a failure, how long running tasks get to stop at their next Python statement before they are killed.
CANCEL_GRACE_S = 60.0


class RayEngineError(FastmmevalError):
    """Ray is missing, or a map or reduce task of an index build failed."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RayEngineError("--engine ray needs the `ray` package: pip install 'fastmmeval[contam]'") from e
    return ray


def _connect(ray: Any, num_cpus: int) -> bool:
    """Attach to the running or configured cluster, else start a local one; True when this call started Ray."""
    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"])
    else:
        # "local": a fresh cluster even if another one runs on this machine (Ray would otherwise attach to it).
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False)
    return True


def _gather(ray: Any, tasks: dict[Any, str], desc: str, progress: bool) -> dict[Any, Any]:
    """Wait for every task, showing finished ones; raise on the first failure, naming the task."""
    results: dict[Any, Any] = {}
    pending = list(tasks)
    with tqdm(total=len(tasks), desc=desc, unit="task", disable=not progress) as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                results[done[0]] = ray.get(done[0])
            except ray.exceptions.RayError as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, FastmmevalError):
                    raise cause from e
                why = f"{type(cause).__name__}: {cause}" if cause is not None else f"{type(e).__name__} (worker died)"
                raise RayEngineError(f"ray engine: {tasks[done[0]]} failed: {why}") from e
            bar.update()
    return results


def _stop(ray: Any, refs: list[Any]) -> None:
    """Cancel every unfinished task and wait until all have ended, so that none writes after the cleanup.

    Running tasks are first interrupted between blocks (no worker is killed); one still running after
    CANCEL_GRACE_S (stuck in native code) is killed."""
    for force in (False, True):
        if not refs:
            return
        for ref in refs:  # a no-op for finished tasks
            ray.cancel(ref, force=force)
        _, refs = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)


def _one_core(source: ShardSource) -> ShardSource:
    """The source as a one-CPU task reads it: images decoded on one thread where it would take every core of
    the node (decode_threads 0), as every task on the node would."""
    if getattr(source, "decode_threads", None) == 0:
        return replace(source, decode_threads=1)  # type: ignore[type-var]
    return source


def run(
    sources: Sequence[ShardSource], run_dir: Path, seg_dir: Path, settings: IndexSettings, progress: bool = True
) -> dict[str, int]:
    """Map every source into sorted runs under `run_dir` and reduce each partition into `seg_dir/p<partition>.seg`
    on Ray; returns the summed map stats (tokens, docs, windows, missing_images, and the first NAMED_MISSING
    missing_image_refs in source order). On failure nothing is left in
    `run_dir` or `seg_dir` and the error names the failed source or partition."""
    ray = _ray()
    run_dir, seg_dir = Path(run_dir), Path(seg_dir)
    share = max(settings.memory_bytes // settings.threads, MIN_TASK_MEMORY)
    task_settings = replace(settings, threads=1, memory_bytes=share)
    started = _connect(ray, settings.threads)
    submitted: list[Any] = []
    try:
        map_task = ray.remote(num_cpus=1, memory=task_settings.memory_bytes, max_retries=MAP_RETRIES)(map_shard)
        maps = {map_task.remote(_one_core(s), run_dir, task_settings): f"map of source {s.name!r}" for s in sources}
        submitted += maps
        done = _gather(ray, maps, "ray map", progress)
        stats = [done[ref] for ref in maps]  # in source order
        seg_dir.mkdir(parents=True, exist_ok=True)
        reduce_task = ray.remote(num_cpus=1, memory=task_settings.memory_bytes, max_retries=0)(reduce_partition)
        reduces = {
            reduce_task.remote(runs, seg_dir / segment_file(p), task_settings): f"reduce of partition {p}"
            for p, runs in enumerate(runs_by_partition(run_dir, settings))
            if runs
        }
        submitted += reduces
        _gather(ray, reduces, "ray reduce", progress)
    except BaseException:
        _stop(ray, submitted)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(seg_dir, ignore_errors=True)
        raise
    finally:
        if started:
            ray.shutdown()
    named = [ref for s in stats for ref in s["missing_image_refs"]][:NAMED_MISSING]
    return {**{k: sum(int(s[k]) for s in stats) for k in ("tokens", "docs", "windows", "missing_images")},
            "missing_image_refs": named}  # fmt: skip
