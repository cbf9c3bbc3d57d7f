#include "ngram/blocks.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace fastmmeval::ngram {

namespace {

constexpr size_t kGroup = 64;  // fields packed together: 64 fields of w bits fill exactly w words

unsigned bit_width(uint64_t x) { return x == 0 ? 0 : 64 - static_cast<unsigned>(__builtin_clzll(x)); }

size_t padded(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

uint64_t load_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void store_u64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }

// 64 fields of W bits in W words, least significant bit first. Unrolled with every shift a constant, so no
// field waits for the one before it (a running bit position would chain them all).
template <unsigned W>
struct Group {
  static void pack(const uint64_t* fields, uint64_t* words) {
    if constexpr (W > 0) {
      uint64_t out[W] = {};
#pragma GCC unroll 64
      for (unsigned i = 0; i < kGroup; ++i) {
        const unsigned bit = i * W, k = bit / 64, shift = bit % 64;
        out[k] |= fields[i] << shift;
        if (shift + W > 64) out[k + 1] |= fields[i] >> (64 - shift);
      }
      std::memcpy(words, out, sizeof out);
    }
  }

  static void unpack(const uint64_t* words, uint64_t* fields) {
    if constexpr (W == 0) {
      std::memset(fields, 0, kGroup * sizeof(uint64_t));
    } else {
      constexpr uint64_t mask = (uint64_t{1} << W) - 1;
#pragma GCC unroll 64
      for (unsigned i = 0; i < kGroup; ++i) {
        const unsigned bit = i * W, k = bit / 64, shift = bit % 64;
        uint64_t v = words[k] >> shift;
        if (shift + W > 64) v |= words[k + 1] << (64 - shift);
        fields[i] = v & mask;
      }
    }
  }
};

using GroupFn = void (*)(const uint64_t*, uint64_t*);

// Group<W>::pack (or unpack) for every width W the format packs, indexed by W.
template <bool Packing, size_t... W>
constexpr std::array<GroupFn, sizeof...(W)> group_table(std::index_sequence<W...>) {
  return {(Packing ? &Group<W>::pack : &Group<W>::unpack)...};
}

constexpr auto kPack = group_table<true>(std::make_index_sequence<kMaxPackedBits + 1>());
constexpr auto kUnpack = group_table<false>(std::make_index_sequence<kMaxPackedBits + 1>());

// Bytes of m packed fields of w bits: whole words.
size_t packed_bytes(size_t m, unsigned w) { return (m * w + 63) / 64 * 8; }

}  // namespace

size_t block_bytes(size_t m, unsigned gap_bits, unsigned count_bits) {
  if (gap_bits == kRawGapBits) return count_bits == 8 ? kBlockHead + padded(9 * m) : 0;
  if (count_bits > 8 || gap_bits + count_bits > kMaxPackedBits) return 0;
  return kBlockHead + packed_bytes(m, gap_bits + count_bits);
}

size_t encode_block(const uint64_t* hashes, const uint8_t* counts, size_t m, char* dst) {
  // Gaps are hash[i] - hash[i - 1] - 1 and counts are stored less one, so consecutive hashes and counts of
  // one take no bits; their ORs have the bit width of their maxima.
  uint64_t fields[kBlockEntries];
  uint64_t gaps = 0;
  unsigned less_one = 0;
  fields[0] = 0;
  for (size_t i = 1; i < m; ++i) gaps |= fields[i] = hashes[i] - hashes[i - 1] - 1;
  for (size_t i = 0; i < m; ++i) less_one |= counts[i] - 1u;
  const unsigned gap_bits = bit_width(gaps), count_bits = bit_width(less_one);
  store_u64(dst, hashes[0]);
  std::memset(dst + 8, 0, kBlockHead - 8);
  char* out = dst + kBlockHead;
  if (gap_bits + count_bits > kMaxPackedBits) {  // gaps of 2^48 and more: only in segments of few entries
    dst[8] = static_cast<char>(kRawGapBits);
    dst[9] = 8;
    std::memcpy(out, hashes, 8 * m);
    std::memcpy(out + 8 * m, counts, m);
    std::memset(out + 9 * m, 0, padded(9 * m) - 9 * m);
    return kBlockHead + padded(9 * m);
  }
  dst[8] = static_cast<char>(gap_bits);
  dst[9] = static_cast<char>(count_bits);
  const unsigned w = gap_bits + count_bits;
  for (size_t i = 0; i < m; ++i) fields[i] = fields[i] << count_bits | (counts[i] - 1u);
  std::memset(fields + m, 0, 8 * (-m % kGroup));  // a short last group is padded with zero fields
  for (size_t g = 0; g < m; g += kGroup) {
    uint64_t words[kMaxPackedBits];
    kPack[w](fields + g, words);
    std::memcpy(out + g / 8 * w, words, packed_bytes(std::min(m - g, kGroup), w));
  }
  return kBlockHead + packed_bytes(m, w);
}

bool decode_block(const char* src, size_t m, uint64_t* hashes, uint8_t* counts) {
  if (m == 0) return true;
  const uint64_t first = load_u64(src);
  const unsigned gap_bits = static_cast<uint8_t>(src[8]), count_bits = static_cast<uint8_t>(src[9]);
  const char* in = src + kBlockHead;
  if (gap_bits == kRawGapBits) {
    std::memcpy(hashes, in, 8 * m);
    std::memcpy(counts, in + 8 * m, m);
    if (hashes[0] != first) return false;
    for (size_t i = 1; i < m; ++i) {
      if (hashes[i] <= hashes[i - 1]) return false;
    }
    return true;
  }
  const unsigned w = gap_bits + count_bits;
  uint64_t fields[kBlockEntries], words[kMaxPackedBits] = {};
  for (size_t g = 0; g < m; g += kGroup) {
    // A short last group reads only the words its fields occupy; the fields past m are not used.
    std::memcpy(words, in + g / 8 * w, packed_bytes(std::min(m - g, kGroup), w));
    kUnpack[w](words, fields + g);
  }
  const uint64_t count_mask = (uint64_t{1} << count_bits) - 1;
  if (fields[0] >> count_bits != 0) return false;
  uint64_t hash = first;
  hashes[0] = hash;
  counts[0] = static_cast<uint8_t>((fields[0] & count_mask) + 1);
  for (size_t i = 1; i < m; ++i) {
    const uint64_t next = hash + (fields[i] >> count_bits) + 1;
    if (next <= hash) return false;  // wrapped past 2^64
    hash = next;
    hashes[i] = hash;
    counts[i] = static_cast<uint8_t>((fields[i] & count_mask) + 1);
  }
  return true;
}

}  // namespace fastmmeval::ngram
