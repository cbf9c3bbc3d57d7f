"""The hashed n-gram index: counts against a Counter reference, streaming audits, corruption and killed
builds (building itself: test_contam_build.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from fastmmeval import _core
from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.reference import (
    reference_counts,
    stream_block_reference,
)
from fastmmeval.contam.ngram.segment import NgramIndexError
from fastmmeval.contam.ngram.settings import IndexSettings, TokenBlock
from fastmmeval.contam.ngram.stream import stream_counts


@dataclass(frozen=True)
class ArraySource:
    """A shard held in memory: a list of token arrays, yielded `block_docs` documents per block."""

    name: str
    docs: Sequence[np.ndarray]
    seed: int = TEXT_SEED
    block_docs: int = 5

    def blocks(self) -> Iterator[TokenBlock]:
        for start in range(0, len(self.docs), self.block_docs):
            chunk = self.docs[start : start + self.block_docs]
            dtype = chunk[0].dtype
            lengths = np.array([len(d) for d in chunk], dtype=np.int64)
            tokens = np.concatenate(chunk).astype(dtype)
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            yield TokenBlock(tokens, offsets, self.seed, [f"{self.name}#{start + i}" for i in range(len(chunk))])

    def missing_images(self) -> int:
        return 0


@dataclass(frozen=True)
class BlockSource:
    """A shard given as ready-made blocks."""

    name: str
    given: Sequence[TokenBlock]

    def blocks(self) -> Iterator[TokenBlock]:
        yield from self.given

    def missing_images(self) -> int:
        return 0


def random_docs(seed: int, n_docs: int, vocab: int, max_len: int, dtype: type = np.uint32) -> list[np.ndarray]:
    """Documents over a small vocabulary (so 8-grams repeat), including empty and shorter-than-8 ones."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(0, max_len)), dtype=dtype) for _ in range(n_docs)]


def split(docs: Sequence[np.ndarray], parts: int, prefix: str = "shard", **kw: object) -> list[ArraySource]:
    return [ArraySource(f"{prefix}{i}", docs[i::parts], **kw) for i in range(parts)]


def expected(counter: dict[int, int], queries: np.ndarray, cap: int) -> np.ndarray:
    return np.array([min(counter.get(int(q), 0), cap) for q in queries], dtype=np.uint8)


def segment_files(index_dir: Path) -> dict[str, bytes]:
    """Partition -> segment bytes of a compacted (single-generation) index."""
    return {p.name: p.read_bytes() for p in sorted((index_dir / "seg").glob("*/p*.seg"))}


SMALL = IndexSettings(threshold=10, partition_bits=3, memory_bytes=4 << 20)


@pytest.mark.parametrize("dedup", [False, True])
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_counts_equal_the_counter_reference_over_shards_adds_and_compact(
    tmp_path: Path, dedup: bool, dtype: type
) -> None:
    settings = IndexSettings(threshold=10, partition_bits=3, memory_bytes=4 << 20, dedup_docs=dedup)
    docs = random_docs(1, 300, vocab=2, max_len=40, dtype=dtype)
    first, second = split(docs[:200], 3, "a"), split(docs[200:], 2, "b")
    index = NgramIndex.create(tmp_path / "ix", settings, {"tokenizer": "words"})
    stats = index.add(first, progress=False)
    assert stats["docs"] == 200 and stats["tokens"] == sum(len(d) for d in docs[:200])
    index.add(second, progress=False)

    ref = reference_counts(first + second, settings)
    assert max(ref.values()) > settings.cap  # the small vocabulary makes frequent n-grams
    absent = np.array([1, 2, 3], dtype=np.uint64)
    queries = np.concatenate([np.array(list(ref), dtype=np.uint64), absent])
    want = expected(ref, queries, settings.cap)
    np.testing.assert_array_equal(index.counts(queries), want)
    np.testing.assert_array_equal(NgramIndex.open(tmp_path / "ix").counts(queries), want)

    index.compact()
    reopened = NgramIndex.open(tmp_path / "ix")
    np.testing.assert_array_equal(reopened.counts(queries), want)
    stats = reopened.stats()
    assert stats["distinct_ngrams"] == len(ref)
    assert stats["frequent_ngrams"] == sum(c > settings.threshold for c in ref.values())
    assert stats["segments"] <= settings.partitions and stats["meta"] == {"tokenizer": "words"}


@pytest.mark.parametrize("dedup", [False, True])
def test_counts_at_the_threshold_boundary_saturate_at_threshold_plus_one(tmp_path: Path, dedup: bool) -> None:
    grams = [np.arange(k * 100, k * 100 + 8, dtype=np.uint32) for k in range(3)]
    # n-gram k occurs 10 + k times: in separate documents (so dedup counts the same) split over two adds.
    docs = [grams[k] for k in range(3) for _ in range(10 + k)]
    rng = np.random.default_rng(0)
    rng.shuffle(docs)
    settings = IndexSettings(threshold=10, partition_bits=2, memory_bytes=4 << 20, dedup_docs=dedup)
    index = NgramIndex.create(tmp_path / "ix", settings, {})
    index.add([ArraySource("x", docs[:17])], progress=False)
    index.add([ArraySource("y", docs[17:])], progress=False)
    queries = ngram_hashes(np.concatenate(grams), np.array([0, 8, 16]))
    np.testing.assert_array_equal(index.counts(queries), [10, 11, 11])
    assert index.stats()["frequent_ngrams"] == 2
    counts, _ = stream_counts(queries, [ArraySource("x", docs)], settings)
    np.testing.assert_array_equal(counts, [10, 11, 11])


def test_dedup_counts_documents_not_occurrences(tmp_path: Path) -> None:
    doc = np.tile(np.arange(8, dtype=np.uint32), 5)  # each 8-gram of the cycle 5 times, in one document
    query = ngram_hashes(np.arange(8, dtype=np.uint32), np.array([0]))
    for dedup, want in [(False, 10), (True, 2)]:
        settings = IndexSettings(threshold=20, partition_bits=0, memory_bytes=4 << 20, dedup_docs=dedup)
        index = NgramIndex.create(tmp_path / f"ix{dedup}", settings, {})
        index.add([ArraySource("s", [doc, doc])], progress=False)
        assert index.counts(query)[0] == want
        assert reference_counts([ArraySource("s", [doc, doc])], settings)[int(query[0])] == want


def test_many_generations_merge_exactly(tmp_path: Path) -> None:
    settings = IndexSettings(threshold=10, partition_bits=1, memory_bytes=4 << 20)
    sources = [ArraySource(f"s{i}", random_docs(10 + i, 30, vocab=2, max_len=30)) for i in range(12)]
    index = NgramIndex.create(tmp_path / "ix", settings, {})
    for source in sources:
        index.add([source], progress=False)
    ref = reference_counts(sources, settings)
    queries = np.array(list(ref), dtype=np.uint64)
    want = expected(ref, queries, settings.cap)
    before = index.stats()
    assert before["segments"] == 12 * 2  # 12 generations of 2 partitions: stats merge them to count
    np.testing.assert_array_equal(index.counts(queries), want)
    index.compact()
    after = NgramIndex.open(tmp_path / "ix")
    np.testing.assert_array_equal(after.counts(queries), want)
    assert after.stats()["segments"] == 2
    for key in ("distinct_ngrams", "frequent_ngrams", "tokens", "docs", "windows"):
        assert after.stats()[key] == before[key]
    assert before["distinct_ngrams"] == len(ref)


def test_adversarial_documents_empty_short_and_empty_sources(tmp_path: Path) -> None:
    docs = [np.zeros(0, np.uint16), np.arange(7, dtype=np.uint16), np.arange(8, dtype=np.uint16),
            np.zeros(0, np.uint16), np.full(9, 65535, np.uint16)]
    sources = [ArraySource("a", docs, block_docs=2), ArraySource("empty", []), ArraySource("b", docs[:2])]
    index = NgramIndex.create(tmp_path / "ix", SMALL, {})
    stats = index.add(sources, progress=False)
    assert stats["windows"] == 1 + 2 and stats["docs"] == 7
    ref = reference_counts(sources, SMALL)
    queries = np.array(list(ref), dtype=np.uint64)
    np.testing.assert_array_equal(index.counts(queries), expected(ref, queries, SMALL.cap))
    assert len(index.counts(np.zeros(0, np.uint64))) == 0


def test_text_and_image_ngrams_of_the_same_tokens_do_not_collide(tmp_path: Path) -> None:
    tokens = np.arange(8, dtype=np.uint32)
    index = NgramIndex.create(tmp_path / "ix", SMALL, {})
    index.add([ArraySource("img", [tokens], seed=IMAGE_SEED)], progress=False)
    text_q = ngram_hashes(tokens, np.array([0]), seed=TEXT_SEED)
    image_q = ngram_hashes(tokens, np.array([0]), seed=IMAGE_SEED)
    np.testing.assert_array_equal(index.counts(np.concatenate([text_q, image_q])), [0, 1])


@pytest.mark.parametrize("dedup", [False, True])
def test_stream_counts_equal_index_counts_and_name_the_first_documents(tmp_path: Path, dedup: bool) -> None:
    settings = IndexSettings(threshold=10, partition_bits=3, memory_bytes=4 << 20, dedup_docs=dedup)
    docs = random_docs(2, 200, vocab=3, max_len=30, dtype=np.uint16)
    sources = split(docs, 3)
    index = NgramIndex.create(tmp_path / "ix", settings, {})
    index.add(sources, progress=False)
    ref = reference_counts(sources, settings)
    queries = np.concatenate([np.array(list(ref)[:300], dtype=np.uint64), [5, 5], np.array(list(ref)[:2], np.uint64)])
    counts, ids = stream_counts(queries, sources, settings, max_ids=3)
    np.testing.assert_array_equal(counts, index.counts(queries))
    np.testing.assert_array_equal(counts, expected(ref, queries, settings.cap))

    # The expected ids: the first 3 documents containing each query, in source then block order.
    ordered = [(s.name, i, d) for s in sources for i, d in enumerate(s.docs)]
    for q, got in zip(queries, ids, strict=True):
        want = []
        for name, i, doc in ordered:
            if len(want) < 3 and int(q) in set(ngram_hashes(doc.astype(np.uint32), np.array([0])).tolist()):
                want.append(f"{name}#{i}")
        assert got == want


def test_stream_block_matches_its_reference() -> None:
    settings = IndexSettings(threshold=3, partition_bits=0, memory_bytes=4 << 20)
    docs = random_docs(3, 40, vocab=2, max_len=20)
    block = next(ArraySource("s", docs, block_docs=40).blocks())
    queries = np.unique(ngram_hashes(block.tokens, block.doc_offsets))[:10]
    ref_counts, ref_docs = stream_block_reference(queries, block, settings)
    stream = _core.NgramStream(queries, 8, 3, False, 100)
    hits = stream.process(block.tokens, block.doc_offsets, TEXT_SEED)
    np.testing.assert_array_equal(stream.counts, np.minimum(ref_counts, 4))
    assert [set(hits[hits[:, 0] == q, 1].tolist()) for q in range(len(queries))] == ref_docs


def build(path: Path, sources: Sequence[ArraySource], settings: IndexSettings) -> dict[str, bytes]:
    index = NgramIndex.create(path, settings, {})
    index.add(sources, progress=False)
    return segment_files(path)


@pytest.mark.parametrize("where", [0, 100, -1000, -3])
def test_a_flipped_byte_is_an_error_naming_the_segment(tmp_path: Path, where: int) -> None:
    build(tmp_path / "ix", [ArraySource("s", random_docs(6, 500, vocab=9, max_len=50))], SMALL)
    victim = sorted((tmp_path / "ix" / "seg").rglob("*.seg"))[1]
    data = bytearray(victim.read_bytes())
    data[where] ^= 0x10
    victim.write_bytes(bytes(data))
    with pytest.raises(NgramIndexError, match=victim.name):
        NgramIndex.open(tmp_path / "ix")


def test_a_truncated_segment_and_a_missing_manifest_are_clear_errors(tmp_path: Path) -> None:
    build(tmp_path / "ix", [ArraySource("s", random_docs(6, 100, vocab=9, max_len=50))], SMALL)
    victim = sorted((tmp_path / "ix" / "seg").rglob("*.seg"))[0]
    victim.write_bytes(victim.read_bytes()[:-8])
    with pytest.raises(NgramIndexError, match=rf"{victim.name}.*truncated"):
        NgramIndex.open(tmp_path / "ix")
    with pytest.raises(NgramIndexError, match="no manifest.json"):
        NgramIndex.open(tmp_path)


def test_bad_input_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    index = NgramIndex.create(tmp_path / "ix", SMALL, {})
    # An index that holds nothing yet is taken up again by a create with the same settings, not by another.
    assert NgramIndex.create(tmp_path / "ix", SMALL, {}).stats()["generations"] == 0
    with pytest.raises(NgramIndexError, match=r"ix: already holds an index; add shards to it with `fastmmeval contam"):
        NgramIndex.create(tmp_path / "ix", replace(SMALL, n=SMALL.n + 1), {})
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(NgramIndexError, match="other: exists and is not an empty folder"):
        NgramIndex.create(tmp_path / "other", SMALL, {})
    with pytest.raises(NgramIndexError, match="appears twice"):
        index.add([ArraySource("s", []), ArraySource("s", [])], progress=False)
    with pytest.raises(NgramIndexError, match="uint16 or uint32"):
        index.add([ArraySource("s", [np.arange(10, dtype=np.int64)])], progress=False)
    bad_offsets = TokenBlock(np.arange(20, dtype=np.uint32), np.array([0, 9, 4]), TEXT_SEED, ["a", "b", "c"])
    assert NgramIndex.open(tmp_path / "ix").stats()["tokens"] == 0
    with pytest.raises(NgramIndexError, match="s block 0: doc_offsets must be non-decreasing"):
        index.add([BlockSource("s", [bad_offsets])], progress=False)
    too_few_ids = replace(bad_offsets, doc_offsets=np.array([0, 4, 9]), ids=["a", "b"])
    with pytest.raises(NgramIndexError, match="2 ids for 3 documents"):
        stream_counts(np.zeros(1, np.uint64), [BlockSource("s", [too_few_ids])], SMALL)
    with pytest.raises(NgramIndexError, match="threshold"):
        IndexSettings(threshold=300)
    with pytest.raises(NgramIndexError, match=r"^--threads must be at least 1, got 0$"):  # the flag, not the field
        IndexSettings(threads=0)
    with pytest.raises(NgramIndexError, match=r"^--memory must be at least 1MB"):
        IndexSettings(memory_bytes=1000)
    assert NgramIndex.open(tmp_path / "ix").stats()["tokens"] == 0  # nothing was published


KILLED_BUILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_contam_index import ArraySource, random_docs
    from fastmmeval.contam.ngram import index as ix

    where = sys.argv[2]
    if where == "publish":  # every segment written, none published
        ix.NgramIndex._publish = lambda *args: os.kill(os.getpid(), signal.SIGKILL)

    class Hanging(ArraySource):
        def blocks(self):
            yield from ArraySource.blocks(self)
            if where == "map":
                Path(sys.argv[1], "mapped").touch()
                signal.pause()

    docs = random_docs(8, 400, vocab=4, max_len=60)
    ix.NgramIndex.open(sys.argv[1]).add([Hanging("more", docs)], progress=False)
    """
)


@pytest.mark.parametrize("where", ["map", "publish"])
def test_a_build_killed_midway_leaves_the_index_as_before_and_a_rerun_completes(tmp_path: Path, where: str) -> None:
    path = tmp_path / "ix"
    before = [ArraySource("first", random_docs(7, 300, vocab=4, max_len=60))]
    index = NgramIndex.create(path, SMALL, {})
    index.add(before, progress=False)
    script = tmp_path / "killed.py"
    script.write_text(KILLED_BUILD.format(tests=str(Path(__file__).parent)))
    proc = subprocess.Popen([sys.executable, str(script), str(path), where])
    if where == "map":
        deadline = time.time() + 60
        while not (path / "mapped").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # the mappers finish their blocks and spill
        proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    (path / "mapped").unlink(missing_ok=True)
    assert any((path / "tmp").rglob("*")) or len(list((path / "seg").iterdir())) > 1  # debris was left

    ref_before = reference_counts(before, SMALL)
    queries = np.array(list(ref_before), dtype=np.uint64)
    reopened = NgramIndex.open(path)
    np.testing.assert_array_equal(reopened.counts(queries), expected(ref_before, queries, SMALL.cap))
    assert reopened.stats()["generations"] == 1

    more = [ArraySource("more", random_docs(8, 400, vocab=4, max_len=60))]
    reopened.add(more, progress=False)
    assert not (path / "tmp").exists() and len(list((path / "seg").iterdir())) == 2
    ref = reference_counts(before + more, SMALL)
    queries = np.array(list(ref), dtype=np.uint64)
    np.testing.assert_array_equal(NgramIndex.open(path).counts(queries), expected(ref, queries, SMALL.cap))


def test_two_writers_are_refused(tmp_path: Path) -> None:
    import fcntl

    index = NgramIndex.create(tmp_path / "ix", SMALL, {})
    with open(tmp_path / "ix" / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(NgramIndexError, match="another process"):
            index.add([ArraySource("s", [])], progress=False)
    assert os.path.exists(tmp_path / "ix" / "manifest.json")
