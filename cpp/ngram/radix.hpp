// Sorting 64-bit hashes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fastmmeval::ngram {

// Sorts a[0, n) ascending; the keys must agree on all bits above the low `bits` (the partition bits of a
// bucket). LSD radix on the top log2(n) + 4 of those bits, then an insertion pass (near-uniform hashes
// leave few keys out of place); keys sharing top bits far beyond chance get a full LSD sort instead.
// tmp must hold n keys.
void radix_sort(uint64_t* a, uint64_t* tmp, size_t n, unsigned bits);

}  // namespace fastmmeval::ngram
