"""The segment file of an n-gram index: sorted hashes with saturated counts, checksummed.

Layout (little-endian), shared by the native writer (`cpp/ngram/segment.cpp`) and the reference here:

- a 64-byte header: magic `FMMNGSEG`, u32 version, u32 n, u32 threshold, u32 partition_bits,
  u32 partition, u32 block_entries, u64 entries, u64 frequent (entries with count > threshold),
  u64 checksum, u64 flags (bit 0: counts are documents containing, not occurrences);
- blocks of `block_entries` entries (the last may be shorter): the block's u64 hashes, then its u8
  counts, zero-padded to 8 bytes;
- the sparse index: the first hash of every block (u64).

checksum = XXH3-64 of (header bytes 0..48 + header bytes 56..64 + XXH3-64 of everything after the header),
so a flipped byte anywhere is caught on open.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from fastmmeval.errors import FastmmevalError

MAGIC = b"FMMNGSEG"
VERSION = 1
HEADER = struct.Struct("<8sIIIIIIQQQQ")
BLOCK_ENTRIES = 4096
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
    checksum: int
    dedup: bool
    block_entries: int = BLOCK_ENTRIES


def _padded(nbytes: int) -> int:
    return (nbytes + 7) & ~7


def segment_size(entries: int, block_entries: int = BLOCK_ENTRIES) -> int:
    """The byte size of a segment holding `entries` entries."""
    full, rest = divmod(entries, block_entries)
    blocks = full + (rest > 0)
    return HEADER.size + full * _padded(9 * block_entries) + _padded(9 * rest) + 8 * blocks


def _header_fields(h: SegmentHeader, checksum: int) -> bytes:
    return HEADER.pack(
        MAGIC, VERSION, h.n, h.threshold, h.partition_bits, h.partition, h.block_entries,
        h.entries, h.frequent, checksum, FLAG_DEDUP if h.dedup else 0,
    )


def _checksum(header: bytes, payload_digest: int) -> int:
    return xxhash.xxh3_64_intdigest(header[:48] + header[56:64] + payload_digest.to_bytes(8, "little"))


def segment_bytes_reference(
    hashes: np.ndarray, counts: np.ndarray, *, n: int, threshold: int, partition_bits: int, partition: int, dedup: bool
) -> bytes:
    """The exact bytes of the segment holding sorted unique `hashes` (uint64) with `counts` (uint8), in numpy."""
    hashes = np.asarray(hashes, dtype="<u8")
    counts = np.asarray(counts, dtype=np.uint8)
    parts, firsts = [], []
    for start in range(0, len(hashes), BLOCK_ENTRIES):
        h, c = hashes[start : start + BLOCK_ENTRIES], counts[start : start + BLOCK_ENTRIES]
        raw = h.tobytes() + c.tobytes()
        parts.append(raw + b"\0" * (_padded(len(raw)) - len(raw)))
        firsts.append(h[0])
    payload = b"".join(parts) + np.array(firsts, dtype="<u8").tobytes()
    header = SegmentHeader(
        n, threshold, partition_bits, partition, len(hashes), int((counts > threshold).sum()), 0, dedup
    )
    zero = _header_fields(header, 0)
    return _header_fields(header, _checksum(zero, xxhash.xxh3_64_intdigest(payload))) + payload


def read_header(path: Path) -> SegmentHeader:
    """The header of segment `path`; NgramIndexError naming the file if it is not a segment of this format."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER.size)
    except OSError as e:
        raise NgramIndexError(f"{path}: cannot read segment ({e.strerror})") from e
    if len(raw) < HEADER.size:
        raise NgramIndexError(f"{path}: truncated segment header ({len(raw)} bytes)")
    magic, version, n, threshold, pbits, partition, block, entries, frequent, checksum, flags = HEADER.unpack(raw)
    if magic != MAGIC:
        raise NgramIndexError(f"{path}: not an n-gram index segment (bad magic {magic!r})")
    if version != VERSION:
        raise NgramIndexError(f"{path}: segment format version {version}, this fastmmeval reads {VERSION}")
    return SegmentHeader(n, threshold, pbits, partition, entries, frequent, checksum, bool(flags & FLAG_DEDUP), block)


def read_segment_reference(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(hashes uint64, counts uint8) of segment `path` after verifying its checksum, in numpy."""
    header = read_header(path)
    data = Path(path).read_bytes()
    if len(data) != segment_size(header.entries, header.block_entries):
        raise NgramIndexError(f"{path}: segment is {len(data)} bytes, its header says {header.entries} entries")
    if _checksum(data[: HEADER.size], xxhash.xxh3_64_intdigest(data[HEADER.size :])) != header.checksum:
        raise NgramIndexError(f"{path}: segment checksum mismatch (the file is corrupt)")
    hashes, counts, pos = [], [], HEADER.size
    for start in range(0, header.entries, header.block_entries):
        m = min(header.block_entries, header.entries - start)
        hashes.append(np.frombuffer(data, dtype="<u8", count=m, offset=pos))
        counts.append(np.frombuffer(data, dtype=np.uint8, count=m, offset=pos + 8 * m))
        pos += _padded(9 * m)
    if not hashes:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    return np.concatenate(hashes).astype(np.uint64), np.concatenate(counts)
