"""The segment file of an n-gram index: sorted hashes with saturated counts, bit-packed, checksummed.

Layout (little-endian), shared by the native writer (`cpp/ngram/segment.cpp`, `cpp/ngram/blocks.cpp`) and
the numpy reference here:

- a 72-byte header: magic `FMMNGSEG`, u32 version, u32 n, u32 threshold, u32 partition_bits,
  u32 partition, u32 block_entries, u64 entries, u64 frequent (entries with count > threshold),
  u64 payload_bytes (everything after the header), u64 flags (bit 0: counts are documents containing,
  not occurrences), u64 checksum;
- blocks of `block_entries` entries (the last may be shorter), each a 16-byte head (u64 first hash,
  u8 gap bits g, u8 count bits c, 6 zero bytes) and then either
  - packed (g + c <= 56): one field of g + c bits per entry, `gap << c | (count - 1)` with
    gap = hash[i] - hash[i - 1] - 1 (0 for the first entry), least significant bit first, in u64 words;
  - raw (g = 64, c = 8, when the gaps are too wide to pack): the block's u64 hashes, then its u8
    counts, zero-padded to 8 bytes;
- the sparse index: the first hash of every block (u64), then every block's byte offset in the payload (u64).

checksum = XXH3-64 of (header bytes 0..64 + XXH3-64 of the payload), so a flipped byte anywhere is caught on
open.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from fastmmeval.errors import FastmmevalError

MAGIC = b"FMMNGSEG"
VERSION = 2
HEADER = struct.Struct("<8sIIIIIIQQQQQ")
BLOCK_ENTRIES = 256
BLOCK_HEAD = struct.Struct("<QBB6x")
RAW_GAP_BITS = 64
MAX_PACKED_BITS = 56
FLAG_DEDUP = 1


class NgramIndexError(FastmmevalError):
    """An index folder or segment file is missing, corrupt, or does not match the index settings."""


@dataclass(frozen=True)
class SegmentHeader:
    """The fields of a segment header."""

    n: int
    threshold: int
    partition_bits: int
    partition: int
    entries: int
    frequent: int
    payload_bytes: int
    checksum: int
    dedup: bool
    block_entries: int = BLOCK_ENTRIES


def _padded(nbytes: int) -> int:
    return (nbytes + 7) & ~7


def _header_fields(h: SegmentHeader, checksum: int) -> bytes:
    return HEADER.pack(
        MAGIC, VERSION, h.n, h.threshold, h.partition_bits, h.partition, h.block_entries,
        h.entries, h.frequent, h.payload_bytes, FLAG_DEDUP if h.dedup else 0, checksum,
    )


def _checksum(header: bytes, payload_digest: int) -> int:
    return xxhash.xxh3_64_intdigest(header[:64] + payload_digest.to_bytes(8, "little"))


def _block_reference(hashes: np.ndarray, counts: np.ndarray) -> bytes:
    """One block of sorted unique `hashes` (<u8) with `counts` (>= 1), packed or raw."""
    gaps = np.concatenate([[0], np.diff(hashes) - 1]).astype(np.uint64)
    less_one = counts.astype(np.uint64) - 1
    g, c = int(np.bitwise_or.reduce(gaps)).bit_length(), int(np.bitwise_or.reduce(less_one)).bit_length()
    if g + c > MAX_PACKED_BITS:
        raw = hashes.tobytes() + counts.tobytes()
        return BLOCK_HEAD.pack(int(hashes[0]), RAW_GAP_BITS, 8) + raw + b"\0" * (_padded(len(raw)) - len(raw))
    fields = (gaps << np.uint64(c)) | less_one
    bits = (fields[:, None] >> np.arange(g + c, dtype=np.uint64)) & np.uint64(1)
    packed = np.packbits(bits.astype(np.uint8).ravel(), bitorder="little").tobytes()
    words = -(-len(hashes) * (g + c) // 64)
    return BLOCK_HEAD.pack(int(hashes[0]), g, c) + packed + b"\0" * (8 * words - len(packed))


def _unblock_reference(data: bytes, at: int, m: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(hashes, counts, byte size) of the block of m entries at offset `at` of `data`."""
    first, g, c = BLOCK_HEAD.unpack_from(data, at)
    at += BLOCK_HEAD.size
    if g == RAW_GAP_BITS:
        hashes = np.frombuffer(data, dtype="<u8", count=m, offset=at).astype(np.uint64)
        counts = np.frombuffer(data, dtype=np.uint8, count=m, offset=at + 8 * m).copy()
        return hashes, counts, BLOCK_HEAD.size + _padded(9 * m)
    nbytes = 8 * -(-m * (g + c) // 64)
    bits = np.unpackbits(np.frombuffer(data, np.uint8, nbytes, at), bitorder="little")[: m * (g + c)]
    fields = (bits.reshape(m, g + c).astype(np.uint64) << np.arange(g + c, dtype=np.uint64)).sum(1, dtype=np.uint64)
    gaps = (fields >> np.uint64(c)) + np.uint64(1)
    gaps[0] = 0
    hashes = np.uint64(first) + np.cumsum(gaps, dtype=np.uint64)
    counts = (fields & np.uint64((1 << c) - 1)).astype(np.uint8) + 1
    return hashes, counts, BLOCK_HEAD.size + nbytes


def segment_bytes_reference(
    hashes: np.ndarray, counts: np.ndarray, *, n: int, threshold: int, partition_bits: int, partition: int, dedup: bool
) -> bytes:
    """The exact bytes of the segment holding sorted unique `hashes` (uint64) with `counts` (uint8), in numpy."""
    hashes = np.asarray(hashes, dtype="<u8")
    counts = np.asarray(counts, dtype=np.uint8)
    blocks, firsts, offsets, at = [], [], [], 0
    for start in range(0, len(hashes), BLOCK_ENTRIES):
        block = _block_reference(hashes[start : start + BLOCK_ENTRIES], counts[start : start + BLOCK_ENTRIES])
        blocks.append(block)
        firsts.append(hashes[start])
        offsets.append(at)
        at += len(block)
    payload = b"".join(blocks) + np.array(firsts + offsets, dtype="<u8").tobytes()
    frequent = int((counts > threshold).sum())
    header = SegmentHeader(n, threshold, partition_bits, partition, len(hashes), frequent, len(payload), 0, dedup)
    zero = _header_fields(header, 0)
    return _header_fields(header, _checksum(zero, xxhash.xxh3_64_intdigest(payload))) + payload


def read_header(path: Path) -> SegmentHeader:
    """The header of segment `path`; NgramIndexError naming the file if it is not a segment of this format."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER.size)
    except OSError as e:
        raise NgramIndexError(f"{path}: cannot read segment ({e.strerror})") from e
    if raw[:8] != MAGIC:
        raise NgramIndexError(f"{path}: not an n-gram index segment (bad magic {raw[:8]!r})")
    if len(raw) >= 12 and (version := int.from_bytes(raw[8:12], "little")) != VERSION:
        raise NgramIndexError(f"{path}: segment format version {version}, this fastmmeval reads {VERSION}")
    if len(raw) < HEADER.size:
        raise NgramIndexError(f"{path}: truncated segment header ({len(raw)} bytes)")
    _, _, n, threshold, pbits, partition, block, entries, frequent, payload, flags, checksum = HEADER.unpack(raw)
    dedup = bool(flags & FLAG_DEDUP)
    return SegmentHeader(n, threshold, pbits, partition, entries, frequent, payload, checksum, dedup, block)


def read_segment_reference(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(hashes uint64, counts uint8) of segment `path` after verifying its checksum, in numpy."""
    header = read_header(path)
    data = Path(path).read_bytes()
    if len(data) != HEADER.size + header.payload_bytes:
        want = HEADER.size + header.payload_bytes
        raise NgramIndexError(f"{path}: segment is {len(data)} bytes, its header says {want}")
    if _checksum(data[: HEADER.size], xxhash.xxh3_64_intdigest(data[HEADER.size :])) != header.checksum:
        raise NgramIndexError(f"{path}: segment checksum mismatch (the file is corrupt)")
    hashes, counts, pos = [], [], HEADER.size
    for start in range(0, header.entries, header.block_entries):
        h, c, size = _unblock_reference(data, pos, min(header.block_entries, header.entries - start))
        hashes.append(h)
        counts.append(c)
        pos += size
    if not hashes:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    return np.concatenate(hashes), np.concatenate(counts)
