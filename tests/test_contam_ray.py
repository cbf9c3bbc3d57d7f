"""`--engine ray` builds the same index as `--engine local`, byte for byte, on a local 2-worker Ray cluster."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import ray

from fastmmeval.contam.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes
from fastmmeval.contam.index import NgramIndex
from fastmmeval.contam.ray_engine import RayEngineError
from fastmmeval.contam.settings import IndexSettings, TokenBlock
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

    def blocks(self) -> Iterator[TokenBlock]:
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


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray cluster with 2 workers that can import this module (the sources are defined here)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "disabled")  # Ray 2.x would otherwise write a token under ~/.ray
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}},
        )
        yield
        ray.shutdown()


def _sources() -> list[RandomSource]:
    """Four shards; the first (~4M tokens) overflows the memory budget several times."""
    return [RandomSource(f"shard-{i}", seed=i, blocks_n=40 if i == 0 else 6) for i in range(4)]


def _segment_bytes(index: NgramIndex) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((index.path / "seg").glob("*/*.seg"))}


def test_ray_engine_builds_byte_identical_segments(tmp_path: Path, local_ray: None) -> None:
    local = NgramIndex.create(tmp_path / "local", SETTINGS, meta={"engine": "local"})
    on_ray = NgramIndex.create(tmp_path / "ray", SETTINGS, meta={"engine": "ray"})
    local_stats = local.add(_sources(), engine="local", progress=False)
    ray_stats = on_ray.add(_sources(), engine="ray", progress=False)

    assert {k: v for k, v in ray_stats.items() if k != "seconds"} == {
        k: v for k, v in local_stats.items() if k != "seconds"
    }
    local_segments, ray_segments = _segment_bytes(local), _segment_bytes(on_ray)
    assert len(local_segments) == SETTINGS.partitions
    assert ray_segments == local_segments
    reopened = NgramIndex.open(tmp_path / "ray")
    assert {k: v for k, v in reopened.stats().items() if k != "meta"} == {
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
    np.testing.assert_array_equal(reopened.counts(queries), expected)


def test_failed_task_leaves_no_partial_index_and_a_rerun_completes(tmp_path: Path, local_ray: None) -> None:
    index = NgramIndex.create(tmp_path / "idx", SETTINGS, meta={})
    bad = [*_sources()[:2], RandomSource("broken", seed=9, fail_at_block=1)]
    with pytest.raises(FastmmevalError, match="broken: unreadable block 1"):
        index.add(bad, engine="ray", progress=False)

    reopened = NgramIndex.open(tmp_path / "idx")
    assert reopened.stats()["generations"] == 0 and reopened.stats()["tokens"] == 0
    assert not list((tmp_path / "idx").glob("seg/*/*.seg"))
    reopened.add(_sources()[:2], engine="ray", progress=False)
    assert NgramIndex.open(tmp_path / "idx").stats()["generations"] == 1


def test_a_dead_worker_is_a_clear_error(tmp_path: Path, local_ray: None) -> None:
    index = NgramIndex.create(tmp_path / "idx", SETTINGS, meta={})
    with pytest.raises(RayEngineError, match="map of source 'crashing' failed: .*worker died"):
        index.add([RandomSource("crashing", seed=1, fail_at_block=0, crash=True)], engine="ray", progress=False)
    assert NgramIndex.open(tmp_path / "idx").stats()["generations"] == 0


def test_missing_ray_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when it is not installed
    index = NgramIndex.create(tmp_path / "idx", SETTINGS, meta={})
    with pytest.raises(RayEngineError, match=r"pip install 'fastmmeval\[contam\]'"):
        index.add(_sources()[1:], engine="ray", progress=False)
    assert NgramIndex.open(tmp_path / "idx").stats()["generations"] == 0
