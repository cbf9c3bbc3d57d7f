"""Building the n-gram index (`contam.ngram.build`): segments byte-identical whatever the threads, shards and
memory budget, equal to the numpy reference segments, spills merged back to the same counts, the native map
releasing the GIL, and a shard the index already holds skipped when it is added again."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from native_checks import releases_gil
from test_contam_index import ArraySource, build, random_docs, split

from fastmmeval import _core
from fastmmeval.cli import main
from fastmmeval.contam.ngram.build import map_shard, segment_file
from fastmmeval.contam.ngram.hashing import ngram_hashes
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.reference import count_hashes_reference, merge_counts_reference
from fastmmeval.contam.ngram.segment import read_segment_reference, segment_bytes_reference
from fastmmeval.contam.ngram.settings import IndexSettings
from fastmmeval.contam.ngram.token_shards import TokenShardSource, write_token_shard


@pytest.mark.parametrize("dedup", [False, True])
def test_segments_are_byte_identical_whatever_threads_shards_and_memory(tmp_path: Path, dedup: bool) -> None:
    docs = random_docs(4, 3000, vocab=50, max_len=120, dtype=np.uint16)
    docs[7] = np.random.default_rng(4).integers(0, 50, size=150_000, dtype=np.uint16)  # longer than a hand-off
    base = IndexSettings(threshold=10, partition_bits=4, memory_bytes=64 << 20, threads=1, dedup_docs=dedup)
    roomy = build(tmp_path / "roomy", [ArraySource("all", docs, block_docs=500)], base)
    tiny = IndexSettings(threshold=10, partition_bits=4, memory_bytes=1 << 20, threads=2, dedup_docs=dedup)
    spilled = build(tmp_path / "tiny", split(docs, 4, block_docs=37), tiny)
    assert not list((tmp_path / "tiny").rglob("*.run"))  # runs are consumed by the reduce
    assert roomy == spilled and len(roomy) == base.partitions
    assert roomy == reference_segments(docs, base)


def reference_segments(docs: list[np.ndarray], settings: IndexSettings) -> dict[str, bytes]:
    """Each partition's segment as the numpy reference hashes, counts and writes it."""
    lengths = [len(d) for d in docs]
    hashes = ngram_hashes(np.concatenate(docs).astype(np.uint32), np.cumsum([0] + lengths[:-1]))
    doc_of = np.repeat(np.arange(len(docs)), [max(n - 7, 0) for n in lengths]) if settings.dedup_docs else None
    uniq, counts = count_hashes_reference(hashes, settings.cap, doc_of)
    part = (uniq >> np.uint64(63 - settings.partition_bits) >> np.uint64(1)).astype(int)
    return {
        segment_file(p): segment_bytes_reference(
            uniq[part == p],
            counts[part == p],
            n=8,
            threshold=settings.threshold,
            partition_bits=settings.partition_bits,
            partition=p,
            dedup=settings.dedup_docs,
        )
        for p in range(settings.partitions)
    }


@pytest.mark.parametrize("dedup", [False, True])
def test_copies_of_ngrams_saturated_in_the_sample_are_dropped_and_no_count_changes(tmp_path: Path, dedup: bool) -> None:
    # Boilerplate: one of five 16-token phrases inside every document. The map samples its first block,
    # where each phrase's 9 n-grams reach the count cap, and drops their copies from the later blocks;
    # the segments stay the numpy reference's, spilled or not.
    rng = np.random.default_rng(11)
    phrases = rng.integers(0, 5000, size=(5, 16), dtype=np.uint32)

    def words(most: int) -> np.ndarray:
        return rng.integers(0, 5000, size=rng.integers(0, most), dtype=np.uint32)

    docs = [np.concatenate([words(60), phrases[i % 5], words(60)]) for i in range(4000)]
    source = ArraySource("boilerplate", docs, block_docs=1000)  # ~70k windows a block
    for memory in (64 << 20, 1 << 20):
        settings = IndexSettings(threshold=10, partition_bits=4, memory_bytes=memory, threads=2, dedup_docs=dedup)
        assert build(tmp_path / f"ix{memory}", [source], settings) == reference_segments(docs, settings)
    assert map_shard(source, tmp_path / "runs", settings)["dropped"] == 3000 * 9  # the copies after the sample

    # Without boilerplate no n-gram saturates in the sample, and every window is scattered.
    plain = ArraySource("plain", [rng.integers(0, 5000, size=120, dtype=np.uint32) for _ in range(4000)], 1000)
    assert map_shard(plain, tmp_path / "plain", settings)["dropped"] == 0


@pytest.mark.parametrize("partition_bits", [0, 8])
def test_large_partitions_with_repeats_of_every_length_match_the_numpy_segments(
    tmp_path: Path, partition_bits: int
) -> None:
    # Partitions of thousands to 700,000 keys (sorted in cache-sized parts): the sort leaves keys out of
    # place for the count step to move, and n-grams repeated 1 to 40 times (runs that straddle 8-key vectors
    # and saturate) sit among distinct ones.
    rng = np.random.default_rng(7)
    docs = list(rng.integers(0, 60_000, size=(700, 1000), dtype=np.uint32))
    phrases = rng.integers(0, 60_000, size=(400, 8), dtype=np.uint32)
    docs += [phrases[i] for i in range(len(phrases)) for _ in range(1 + i % 40)]
    docs += [np.full(9 + i, i, dtype=np.uint32) for i in range(3)]  # a few n-grams repeated within a document
    settings = IndexSettings(threshold=10, partition_bits=partition_bits, memory_bytes=64 << 20, threads=2)
    got = build(tmp_path / "ix", [ArraySource("all", docs, block_docs=97)], settings)
    assert got == reference_segments(docs, settings)
    stats = NgramIndex.open(tmp_path / "ix").stats()
    assert stats["frequent_ngrams"] > 100 and stats["distinct_ngrams"] - stats["frequent_ngrams"] > 600_000


@pytest.mark.parametrize("size", [1, 5000, 300_000, 1_500_000])
def test_the_sort_and_count_of_a_partition_equals_numpy_unique(size: int) -> None:
    # Below 2^19 keys a partition is sorted in cache; above, split first by its top bits into parts.
    rng = np.random.default_rng(size)
    keys = rng.integers(0, 1 << 56, size=size, dtype=np.uint64) | np.uint64(0x2A << 56)  # partition 42 of 256
    keys = np.concatenate([keys, keys[: size // 10], np.repeat(keys[: size // 100], 20)])
    rng.shuffle(keys)
    want_keys, want_counts = np.unique(keys, return_counts=True)
    got_keys, got_counts = _core.sort_counts(keys, bits=56, cap=11)
    np.testing.assert_array_equal(got_keys, want_keys)
    np.testing.assert_array_equal(got_counts, np.minimum(want_counts, 11))


@pytest.mark.parametrize("top", [0, 20, 36])
def test_keys_sharing_their_top_bits_far_beyond_chance_are_still_sorted_and_counted(top: int) -> None:
    # Not hashes: the top bits, which the fast path sorts by, say little, so it falls back to a full sort.
    rng = np.random.default_rng(top)
    keys = rng.integers(0, 1 << (56 - top), size=700_000, dtype=np.uint64)
    keys = np.concatenate([keys, keys[:5000]])
    want_keys, want_counts = np.unique(keys, return_counts=True)
    got_keys, got_counts = _core.sort_counts(keys, bits=56, cap=11)
    np.testing.assert_array_equal(got_keys, want_keys)
    np.testing.assert_array_equal(got_counts, np.minimum(want_counts, 11))


def test_a_tiny_memory_budget_spills_runs_and_merges_them_to_the_same_counts(tmp_path: Path) -> None:
    docs = random_docs(5, 2000, vocab=20, max_len=200)
    settings = IndexSettings(threshold=10, partition_bits=2, memory_bytes=1 << 20, threads=2)
    run_dir = tmp_path / "runs"
    from fastmmeval.contam.ngram.build import map_shard, reduce_partition, runs_by_partition

    stats = map_shard(ArraySource("s", docs, block_docs=100), run_dir, settings)
    by_part = runs_by_partition(run_dir, settings)
    assert all(len(runs) > 2 for runs in by_part)  # several spills per partition
    for p, runs in enumerate(by_part):
        parts = [read_segment_reference(r) for r in runs]
        want_h, want_c = merge_counts_reference(parts, settings.cap)
        reduce_partition(runs, tmp_path / f"p{p}.seg", settings)
        got_h, got_c = read_segment_reference(tmp_path / f"p{p}.seg")
        np.testing.assert_array_equal(got_h, want_h)
        np.testing.assert_array_equal(got_c, want_c)
    assert stats["windows"] == sum(max(len(d) - 7, 0) for d in docs)


def test_partitions_that_never_spilled_are_written_straight_to_their_segments(tmp_path: Path) -> None:
    docs = random_docs(6, 300, vocab=20, max_len=100)
    tokens, offsets = np.concatenate(docs), np.cumsum([0] + [len(d) for d in docs[:-1]])

    def mapper() -> _core.NgramMapper:
        return _core.NgramMapper(str(tmp_path / "runs" / "m-"), 8, 10, 2, False, 64 << 20, 2)

    (tmp_path / "runs").mkdir()
    as_runs = mapper()
    as_runs.add(tokens, offsets, 0)
    runs = as_runs.finish()
    assert [Path(r).name for r in runs] == [f"m-p{p:05d}-000000.run" for p in range(4)]

    seg_dir = tmp_path / "seg"
    seg_dir.mkdir()
    as_segments = mapper()
    as_segments.add(tokens, offsets, 0)
    segments = as_segments.finish(alone_prefix=f"{seg_dir}/")
    assert segments == [str(seg_dir / segment_file(p)) for p in range(4)]
    assert [Path(s).read_bytes() for s in segments] == [Path(r).read_bytes() for r in runs]


def test_map_releases_the_gil(tmp_path: Path) -> None:
    tokens = np.random.default_rng(0).integers(0, 1000, size=2_000_000, dtype=np.uint32)
    mapper = _core.NgramMapper(str(tmp_path / "m-"), 8, 10, 4, False, 64 << 20)
    assert releases_gil(lambda: mapper.add(tokens, np.array([0]), 0))


TEXTS = [" ".join(f"w{(i * 7 + k) % 40}" for k in range(30)) for i in range(20)]


def llava_shard(path: Path, texts: list[str]) -> Path:
    """A LLaVA shard of one single-turn conversation per text."""
    path.write_text(json.dumps([{"id": f"r{i}", "conversations": [{"from": "human", "value": t}]}
                                for i, t in enumerate(texts)]))  # fmt: skip
    return path


def contam(*args: str) -> int:
    return main(["contam", *args, "--no_progress"])


def test_adding_a_shard_again_skips_it_and_leaves_the_index_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard, index = llava_shard(tmp_path / "train.json", TEXTS), tmp_path / "ix"
    assert contam("index", "--index", str(index), str(shard)) == 0
    stats, manifest = NgramIndex.open(index).stats(), (index / "manifest.json").read_bytes()
    capsys.readouterr()
    # Named another way, from another folder, it is the same file (a killed add run again, a repeated command).
    monkeypatch.chdir(tmp_path)
    assert contam("add", "--index", "ix", "./train.json") == 0
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if "skipped" in line]
    assert len(skipped) == 1 and skipped[0].startswith("train.json: already in the index (generation g000001, added ")
    assert "nothing added" in out
    assert NgramIndex.open(index).stats() == stats and (index / "manifest.json").read_bytes() == manifest


def test_a_shard_that_changed_is_added_and_one_given_twice_in_an_add_counts_once(tmp_path: Path) -> None:
    index = NgramIndex.create(tmp_path / "ix", IndexSettings(), {})
    source = TokenShardSource(tmp_path / "t.u32")
    write_token_shard(source.path, [np.arange(20, dtype=np.uint32)])
    first = index.add([source, replace(source, name="again")], progress=False)
    assert first["docs"] == 1
    assert first["skipped"] == [f"again: the same shard as {source.path}, given before it in this add; skipped"]
    write_token_shard(source.path, [np.arange(20, dtype=np.uint32)] * 2)  # another size
    assert index.add([source], progress=False)["docs"] == 2
    os.utime(source.offsets_path, ns=(1, 1))  # its offsets file's modification time changed
    assert index.add([source], progress=False)["docs"] == 2
    assert index.add([source], progress=False)["generation"] is None
    assert index.stats()["docs"] == 5 and index.stats()["generations"] == 3


def test_compact_keeps_the_shards_it_holds_and_an_index_without_identities_still_adds(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    shard, other = llava_shard(tmp_path / "a.json", TEXTS), llava_shard(tmp_path / "b.json", TEXTS[:5])
    index = tmp_path / "ix"
    assert contam("index", "--index", str(index), str(shard)) == 0
    assert contam("add", "--index", str(index), str(other)) == 0
    assert main(["contam", "compact", "--index", str(index)]) == 0
    capsys.readouterr()
    assert contam("add", "--index", str(index), str(other)) == 0
    assert f"{other}: already in the index (generation c000003, added " in capsys.readouterr().out
    # An index written before shards had identities: its shards cannot be recognized, so one added again is
    # added (with a warning), and recognized from then on.
    manifest = json.loads((index / "manifest.json").read_text())
    for gen in manifest["generations"]:
        del gen["shards"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    docs = NgramIndex.open(index).stats()["docs"]
    assert contam("add", "--index", str(index), str(shard)) == 0
    assert f"warning: {shard}: a shard of this name is in the index (generation c000003, written before" in (
        capsys.readouterr().err
    )
    assert NgramIndex.open(index).stats()["docs"] == docs + len(TEXTS)
    assert contam("add", "--index", str(index), str(shard)) == 0
    assert f"{shard}: already in the index (generation g000004, added " in capsys.readouterr().out
