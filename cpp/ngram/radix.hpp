// Sorting 64-bit hashes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastmmeval::ngram {

// Sorts a[0, n) ascending; the keys must agree on all bits above the low `bits` (the partition bits of a
// bucket). LSD radix on the top log2(n) + 4 of those bits, then an insertion pass (near-uniform hashes
// leave few keys out of place); keys sharing top bits far beyond chance get a full LSD sort instead.
// tmp must hold n keys.
void radix_sort(uint64_t* a, uint64_t* tmp, size_t n, unsigned bits);

struct KeySpan {
  const uint64_t* keys;
  size_t size;
};

// Distinct keys, ascending, and how often each occurs (saturated).
struct KeyCounts {
  const uint64_t* keys;
  const uint8_t* counts;
  size_t size;
};

// The distinct keys of all spans (n keys together, agreeing on the bits above the low `bits`) in ascending
// order, each with its number of occurrences saturated at cap. a and b must hold n keys and counts n bytes;
// the result lies in one of a or b, and in counts.
KeyCounts sort_counts(const std::vector<KeySpan>& spans, size_t n, unsigned bits, uint8_t cap, uint64_t* a,
                      uint64_t* b, uint8_t* counts);

}  // namespace fastmmeval::ngram
