// Levenshtein (unit-cost insert / delete / substitute) distance between strings of Unicode
// code points, over a batch of pairs.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fastmmeval::text {

// A read-only string of code points stored `width` bytes each (1, 2 or 4), as CPython stores
// a str: the distance is over code points, exactly as a Python loop over the str would see it.
struct CodePoints {
  const void* data;
  size_t size;
  int width;
};

// For each of the n pairs (a[i], b[i]): the distance into distances[i] when distances is not
// null, and 1 - distance / max(len a[i], len b[i]) (1 for two empty strings) into
// similarities[i] when similarities is not null.
void levenshtein_batch(const CodePoints* a, const CodePoints* b, size_t n, int64_t* distances,
                       double* similarities);

}  // namespace fastmmeval::text
