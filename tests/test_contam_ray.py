"""`--engine ray` builds the same index as `--engine local`, byte for byte, on a local 2-worker Ray cluster.

The Ray builds run in a separate driver process (`drive`); the checks run here."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray

from fastmmeval.contam.ngram import ray_engine
from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.ray_engine import RayEngineError
from fastmmeval.contam.ngram.settings import IndexSettings, TokenBlock
from fastmmeval.errors import FastmmevalError

# A small budget (16 MiB per Ray task, the share of one thread) so both engines spill several sorted runs.
SETTINGS = IndexSettings(threshold=10, partition_bits=4, memory_bytes=32 << 20, threads=2)


@dataclass(frozen=True)
class RandomSource:
    """A seeded shard: u16 text blocks and u32 image blocks, with empty, short and repeated documents."""

    name: str
    seed: int
    blocks_n: int = 3
    fail_at_block: int | None = None
    crash: bool = False
    stubborn_s: float = 0.0  # sleeps this long before its first block, carrying on through interrupts

    def blocks(self) -> Iterator[TokenBlock]:
        until = time.monotonic() + self.stubborn_s
        while (left := until - time.monotonic()) > 0:
            with contextlib.suppress(KeyboardInterrupt):  # what a graceful Ray cancel raises
                time.sleep(left)
        rng = np.random.default_rng(self.seed)
        phrase = rng.integers(0, 300, size=40)
        for b in range(self.blocks_n):
            if b == self.fail_at_block:
                if self.crash:
                    os._exit(3)
                raise FastmmevalError(f"{self.name}: unreadable block {b}")
            lengths = rng.choice([0, 3, 7, 8, 9, 200, 2000], size=300)
            tokens = rng.integers(0, 300, size=int(lengths.sum()))
            for start in np.cumsum(lengths)[lengths >= 200][::4] - 200:
                tokens[start : start + 40] = phrase  # the same 33 windows in many documents: frequent n-grams
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            dtype, seed = (np.uint16, TEXT_SEED) if b % 2 == 0 else (np.uint32, IMAGE_SEED)
            yield TokenBlock(tokens.astype(dtype), offsets, seed, [f"{self.name}#{b}.{d}" for d in range(len(lengths))])

    def missing_images(self) -> int:
        return 0


def _sources() -> list[RandomSource]:
    """Four shards; the first (~4M tokens) overflows the memory budget several times."""
    return [RandomSource(f"shard-{i}", seed=i, blocks_n=40 if i == 0 else 6) for i in range(4)]


def _segment_bytes(index: NgramIndex) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((index.path / "seg").glob("*/*.seg"))}


def drive(plan_file: str) -> None:
    """The driver process: on a fresh local 2-worker Ray cluster, add each step's sources to its index (created
    if absent) with `--engine ray`, its tasks given `grace_s` to stop when cancelled; `settle_s` later, prints one
    JSON line per step: the stats or the error, the seconds the add took, the index after, and the files left
    in its temporary folder."""
    plan = json.loads(Path(plan_file).read_text())
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    print(f"ray session: {ray._private.worker._global_node.get_session_dir_path()}", file=sys.stderr, flush=True)
    for step in plan:
        path = Path(step["index"])
        index = NgramIndex.open(path) if path.exists() else NgramIndex.create(path, SETTINGS, meta={"engine": "ray"})
        ray_engine.CANCEL_GRACE_S = step["grace_s"]
        start = time.perf_counter()
        try:
            outcome = {"stats": index.add([RandomSource(**s) for s in step["sources"]], engine="ray", progress=False)}
        except FastmmevalError as e:
            outcome = {"error": type(e).__name__, "message": str(e)}
        outcome["seconds"] = time.perf_counter() - start
        time.sleep(step["settle_s"])
        after = NgramIndex.open(path).stats()
        outcome |= {
            "generations": after["generations"],
            "segments": len(list(path.glob("seg/*/*.seg"))),
            "leftovers": len(list(path.glob("tmp/**/*"))),
        }
        print(json.dumps(outcome), flush=True)
    ray.shutdown()


def _ray_log_tails(session: Path) -> str:
    """The warnings and errors at the ends of the logs that say why a raylet, the GCS or the driver died."""
    logs = session / "logs"
    files = [logs / name for name in ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err")]
    files += sorted(logs.glob("python-core-driver-*.log"))
    loud = re.compile(r"^\[[\d\- :,]+ [WECF] |Check failed|\*\*\*")  # warnings, errors and crash traces
    tails = {f.name: [ln for ln in f.read_text(errors="replace").splitlines() if loud.search(ln)] for f in files}
    return "".join(f"\n--- {name}\n" + "\n".join(lines[-20:]) for name, lines in tails.items() if lines)


def _on_ray(
    tmp_path: Path, steps: list[tuple[Path, list[RandomSource]]], grace_s: float = 60.0, settle_s: float = 0.0
) -> list[dict[str, Any]]:
    """Runs the steps in a separate driver process (`drive`) and returns its outcomes.

    Ray ends its driver process (status 1) when the cluster fails under it, e.g. when the GCS is lost; in a
    separate driver that fails this test, with Ray's logs in the message, instead of ending the test run.
    A driver ended by one of Ray's own internal checks (seen here, rarely, as "Tried to complete task that was
    not pending" right after a forced cancel: a race inside Ray, not in the engine) is run once more, on a new
    cluster and fresh index folders."""
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            [
                {"index": str(i), "sources": [asdict(s) for s in srcs], "grace_s": grace_s, "settle_s": settle_s}
                for i, srcs in steps
            ]
        )
    )
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parent), "RAY_AUTH_MODE": "disabled"}
    # RAY_AUTH_MODE: Ray 2.x would otherwise write a token under ~/.ray.
    for attempt in (1, 2):
        for index, _ in steps:
            shutil.rmtree(index, ignore_errors=True)
        done = subprocess.run(
            [sys.executable, "-c", f"import test_contam_ray; test_contam_ray.drive({str(plan)!r})"],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        outcomes = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode == 0 and len(outcomes) == len(steps):
            return outcomes
        if attempt == 2 or "You have likely discovered a bug in Ray" not in done.stderr:
            break
    session = re.search(r"ray session: (\S+)", done.stderr)
    pytest.fail(
        f"the Ray driver exited with {done.returncode} after {len(outcomes)} of {len(steps)} steps"
        f"\n--- driver stderr\n{done.stderr[-4000:]}" + (_ray_log_tails(Path(session[1])) if session else "")
    )


def test_ray_engine_builds_byte_identical_segments(tmp_path: Path) -> None:
    local = NgramIndex.create(tmp_path / "local", SETTINGS, meta={"engine": "local"})
    local_stats = local.add(_sources(), engine="local", progress=False)
    [outcome] = _on_ray(tmp_path, [(tmp_path / "ray", _sources())])

    assert {k: v for k, v in outcome["stats"].items() if k != "seconds"} == {
        k: v for k, v in local_stats.items() if k != "seconds"
    }
    on_ray = NgramIndex.open(tmp_path / "ray")
    local_segments, ray_segments = _segment_bytes(local), _segment_bytes(on_ray)
    assert len(local_segments) == SETTINGS.partitions
    assert ray_segments == local_segments
    assert {k: v for k, v in on_ray.stats().items() if k != "meta"} == {
        k: v for k, v in local.stats().items() if k != "meta"
    }

    # The counts are the corpus's, saturated at threshold + 1, for frequent, rare and absent n-grams alike.
    hashes = np.concatenate(
        [
            ngram_hashes(block.tokens, block.doc_offsets, SETTINGS.n, block.seed)
            for source in _sources()
            for block in source.blocks()
        ]
    )
    uniq, counts = np.unique(hashes, return_counts=True)
    assert (counts > SETTINGS.threshold).any() and (counts == 1).any()
    queries = np.concatenate([uniq, np.array([1, 2, 3], dtype=np.uint64)])
    expected = np.concatenate([np.minimum(counts, SETTINGS.cap), [0, 0, 0]]).astype(np.uint8)
    np.testing.assert_array_equal(on_ray.counts(queries), expected)


def test_failed_task_leaves_no_partial_index_and_a_rerun_completes(tmp_path: Path) -> None:
    bad = [*_sources()[:2], RandomSource("broken", seed=9, fail_at_block=1)]
    failed, rerun = _on_ray(tmp_path, [(tmp_path / "idx", bad), (tmp_path / "idx", _sources()[:2])])

    assert failed["error"] == "FastmmevalError" and "broken: unreadable block 1" in failed["message"]
    assert failed["generations"] == 0 and failed["segments"] == 0
    assert "stats" in rerun and rerun["generations"] == 1 and rerun["segments"] > 0


def test_a_task_that_ignores_the_cancel_is_killed_before_the_cleanup(tmp_path: Path) -> None:
    # "stubborn" would write its runs 8 s after it starts; "broken" fails at once, so the build is cancelled.
    # The runs are looked for after 9.5 s more, when the stubborn task would have written them.
    stubborn = RandomSource("stubborn", seed=2, stubborn_s=8.0)
    broken = RandomSource("broken", seed=9, fail_at_block=0)
    [failed] = _on_ray(tmp_path, [(tmp_path / "idx", [stubborn, broken])], grace_s=1.0, settle_s=9.5)

    assert failed["error"] == "FastmmevalError" and "broken: unreadable block 0" in failed["message"]
    assert failed["seconds"] < 8.0  # the grace period and a kill (1.4-1.7 s here), not the stubborn task's 8 s
    assert failed["leftovers"] == 0 and failed["generations"] == 0 and failed["segments"] == 0


def test_a_dead_worker_is_a_clear_error(tmp_path: Path) -> None:
    [crashed] = _on_ray(tmp_path, [(tmp_path / "idx", [RandomSource("crashing", seed=1, fail_at_block=0, crash=True)])])

    assert crashed["error"] == "RayEngineError"
    assert re.search("map of source 'crashing' failed: .*worker died", crashed["message"])
    assert crashed["generations"] == 0


def test_missing_ray_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when it is not installed
    index = NgramIndex.create(tmp_path / "idx", SETTINGS, meta={})
    with pytest.raises(RayEngineError, match=r"pip install 'fastmmeval\[contam\]'"):
        index.add(_sources()[1:], engine="ray", progress=False)
    assert NgramIndex.open(tmp_path / "idx").stats()["generations"] == 0


def test_a_ray_task_decodes_images_on_its_one_cpu(tmp_path: Path) -> None:
    from fastmmeval.contam.readers.shards import RecordSource
    from fastmmeval.contam.readers.text_tokens import WordTokenizer

    shard = tmp_path / "train.json"
    shard.write_text("[]")
    every_core = RecordSource(shard, "llava", WordTokenizer())
    assert ray_engine._one_core(every_core).decode_threads == 1  # not every core of the node, in every task
    three = RecordSource(shard, "llava", WordTokenizer(), decode_threads=3)
    assert ray_engine._one_core(three) is three  # asked for explicitly
