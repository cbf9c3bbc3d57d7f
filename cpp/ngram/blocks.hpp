// The blocks of a segment: up to kBlockEntries strictly increasing hashes with their counts, stored as
// bit-packed gaps (about 5.7 bytes an entry on a 75M-entry index, against 9 unpacked). The layout is
// documented in python/fastmmeval/contam/ngram/segment.py.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fastmmeval::ngram {

constexpr uint32_t kBlockEntries = 256;
constexpr size_t kBlockHead = 16;          // first hash (u64), gap bits (u8), count bits (u8), 6 zero bytes
constexpr unsigned kRawGapBits = 64;       // gap bits of a block stored unpacked
constexpr unsigned kMaxPackedBits = 56;    // wider fields are stored raw (gaps of 2^48: segments of few entries)
constexpr size_t kMaxBlockBytes = kBlockHead + (9 * kBlockEntries + 7) / 8 * 8;

// Byte size of a block of m entries (its head included), or 0 if the head's bit widths are impossible.
size_t block_bytes(size_t m, unsigned gap_bits, unsigned count_bits);

// Writes the block of m (>= 1) strictly increasing hashes with counts >= 1 at dst (room for kMaxBlockBytes);
// returns its byte size.
size_t encode_block(const uint64_t* hashes, const uint8_t* counts, size_t m, char* dst);

// Reads the m entries of the block at src, whose bit widths block_bytes accepted; false if they are not
// strictly increasing from its first hash.
bool decode_block(const char* src, size_t m, uint64_t* hashes, uint8_t* counts);

}  // namespace fastmmeval::ngram
