"""The segment file format (`contam/ngram/segment.py`, `cpp/ngram/blocks.cpp`): the native reader and writer against
the numpy reference on the blocks' edge cases (gaps of zero, gaps too wide to pack, the largest counts and
hashes, short last blocks), lookups that name the file when a block is corrupt, and format-1 files refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_contam_index import ArraySource, random_docs

from fastmmeval import _core
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.segment import (
    BLOCK_ENTRIES,
    HEADER,
    MAX_PACKED_BITS,
    NgramIndexError,
    read_header,
    read_segment_reference,
    segment_bytes_reference,
)
from fastmmeval.contam.ngram.settings import IndexSettings

THRESHOLD = 254  # counts up to 255: count fields of 8 bits


def edge_entries() -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique hashes with counts 1..255 covering every kind of block."""
    rng = np.random.default_rng(3)
    runs = [
        np.arange(2 * BLOCK_ENTRIES, dtype=np.uint64),  # consecutive from 0: gaps of zero bits
        # gaps of exactly 2^47 - 1 with 8-bit counts: 48 + 8 bits, the widest packed field
        np.uint64(1 << 50) + np.arange(BLOCK_ENTRIES, dtype=np.uint64) * np.uint64(1 << 47),
        # gaps of 2^48 with 8-bit counts do not pack: a raw block
        np.uint64(1 << 60) + np.arange(BLOCK_ENTRIES, dtype=np.uint64) * np.uint64((1 << 48) + 1),
        np.sort(rng.choice(1 << 62, size=5 * BLOCK_ENTRIES + 17, replace=False)).astype(np.uint64) + np.uint64(3 << 62),
        np.array([2**64 - 2, 2**64 - 1], dtype=np.uint64),  # the largest hashes, in a short last block
    ]
    hashes = np.unique(np.concatenate(runs))
    assert hashes.dtype == np.uint64
    counts = rng.integers(1, THRESHOLD + 2, size=len(hashes)).astype(np.uint8)
    counts[: 2 * BLOCK_ENTRIES] = 1
    return hashes, counts


def write_reference(path: Path, hashes: np.ndarray, counts: np.ndarray, dedup: bool = False) -> Path:
    path.write_bytes(
        segment_bytes_reference(hashes, counts, n=8, threshold=THRESHOLD, partition_bits=0, partition=0, dedup=dedup)
    )
    return path


def block_kinds(path: Path) -> list[tuple[int, int]]:
    """(gap bits, count bits) of every block, read from the heads the index points to."""
    header, data = read_header(path), path.read_bytes()
    blocks = -(-header.entries // BLOCK_ENTRIES)
    offsets = np.frombuffer(data, "<u8", blocks, len(data) - 8 * blocks)
    return [(data[HEADER.size + o + 8], data[HEADER.size + o + 9]) for o in offsets.tolist()]


def test_every_kind_of_block_round_trips_through_the_native_reader_and_writer(tmp_path: Path) -> None:
    hashes, counts = edge_entries()
    ref = write_reference(tmp_path / "ref.seg", hashes, counts, dedup=True)
    kinds = block_kinds(ref)
    assert kinds[0] == (0, 0) and (47, 8) in kinds and (64, 8) in kinds
    assert all(g + c <= MAX_PACKED_BITS or g == 64 for g, c in kinds)

    # A merge of one input decodes every block natively and encodes it again: the same bytes.
    merged = tmp_path / "merged.seg"
    assert _core.merge_segments([str(ref)], str(merged), 8, THRESHOLD, 0, 0, True) == (
        len(hashes), int((counts > THRESHOLD).sum()),
    )
    assert merged.read_bytes() == ref.read_bytes()
    got_h, got_c = read_segment_reference(merged)
    np.testing.assert_array_equal(got_h, hashes)
    np.testing.assert_array_equal(got_c, counts)


def test_a_segment_too_big_to_hold_its_sparse_index_in_memory_is_written_the_same(tmp_path: Path) -> None:
    # A writer keeps 4,096 blocks' index entries in memory and spills the rest to a side file: a segment of
    # more blocks than that (and a short last block) comes out byte for byte as the numpy reference.
    rng = np.random.default_rng(5)
    hashes = np.unique(rng.integers(0, 2**63, size=4100 * BLOCK_ENTRIES + 77, dtype=np.uint64))
    counts = rng.integers(1, THRESHOLD + 2, size=len(hashes)).astype(np.uint8)
    ref = write_reference(tmp_path / "big.seg", hashes, counts)
    merged = tmp_path / "merged.seg"
    _core.merge_segments([str(ref)], str(merged), 8, THRESHOLD, 0, 0, False)
    assert merged.read_bytes() == ref.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.seg", "merged.seg"]  # no spill file left


def test_lookups_find_every_entry_and_nothing_else(tmp_path: Path) -> None:
    hashes, counts = edge_entries()
    segment = _core.NgramSegment(str(write_reference(tmp_path / "s.seg", hashes, counts)))
    absent = np.setdiff1d(np.concatenate([hashes - np.uint64(1), hashes + np.uint64(1)]), hashes)
    queries = np.sort(np.concatenate([hashes, absent]))
    out = np.zeros(len(queries), np.uint8)
    segment.lookup(queries, out, 255)
    want = np.zeros(len(queries), np.uint8)
    want[np.searchsorted(queries, hashes)] = counts
    np.testing.assert_array_equal(out, want)


def test_a_corrupt_block_head_is_an_error_naming_the_file_even_unverified(tmp_path: Path) -> None:
    hashes, counts = edge_entries()
    path = write_reference(tmp_path / "bad.seg", hashes, counts)
    data = bytearray(path.read_bytes())
    data[HEADER.size + 8] = 60  # the first block's gap bits: no such block
    path.write_bytes(bytes(data))
    segment = _core.NgramSegment(str(path), verify=False)
    with pytest.raises(ValueError, match=r"bad\.seg: segment block 0 is corrupt"):
        segment.lookup(hashes[:1], np.zeros(1, np.uint8), 255)
    with pytest.raises(ValueError, match=r"bad\.seg: segment block header is corrupt"):
        _core.merge_segments([str(path)], None, 8, THRESHOLD, 0, 0, False)


def test_an_index_or_segment_of_format_1_is_refused_naming_the_file_and_both_versions(tmp_path: Path) -> None:
    index = NgramIndex.create(tmp_path / "ix", IndexSettings(partition_bits=1), {})
    index.add([ArraySource("s", random_docs(1, 50, vocab=9, max_len=40))], progress=False)
    segment = sorted((tmp_path / "ix" / "seg").rglob("*.seg"))[0]
    data = bytearray(segment.read_bytes())
    data[8:12] = (1).to_bytes(4, "little")  # the header's format version
    segment.write_bytes(bytes(data))
    with pytest.raises(NgramIndexError, match=rf"{segment.name}: segment format version 1, this fastmmeval reads 2"):
        read_header(segment)
    with pytest.raises(ValueError, match=rf"{segment.name}: segment format version 1, expected 2"):
        _core.NgramSegment(str(segment))
    manifest = tmp_path / "ix" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 1}))
    with pytest.raises(NgramIndexError, match=r"manifest\.json: format fastmmeval\.ngram-index v1, expected .* v2"):
        NgramIndex.open(tmp_path / "ix")
