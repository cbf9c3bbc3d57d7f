#include <algorithm>
#include <cstring>
#include <vector>

#include "ngram/radix.hpp"

namespace fastmmeval::ngram {

namespace {

// LSD radix sort of a[0, n) by key bits [lo, lo + width), up to 11 bits per pass, using tmp.
void lsd(uint64_t* a, uint64_t* tmp, size_t n, unsigned lo, unsigned width) {
  constexpr unsigned kMaxDigit = 11;
  const unsigned passes = (width + kMaxDigit - 1) / kMaxDigit;
  unsigned shift[8], bits[8];
  for (unsigned p = 0, done = 0; p < passes; ++p) {
    bits[p] = (width - done + (passes - p) - 1) / (passes - p);
    shift[p] = lo + done;
    done += bits[p];
  }
  std::vector<size_t> hist(static_cast<size_t>(passes) << kMaxDigit, 0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t k = a[i];
    for (unsigned p = 0; p < passes; ++p) ++hist[(p << kMaxDigit) + ((k >> shift[p]) & ((1u << bits[p]) - 1))];
  }
  uint64_t* src = a;
  uint64_t* dst = tmp;
  for (unsigned p = 0; p < passes; ++p) {
    size_t* h = hist.data() + (static_cast<size_t>(p) << kMaxDigit);
    const size_t buckets = size_t{1} << bits[p];
    if (std::find(h, h + buckets, n) != h + buckets) continue;  // one digit value: nothing moves
    size_t sum = 0;
    for (size_t b = 0; b < buckets; ++b) {
      const size_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    const unsigned s = shift[p];
    const uint64_t mask = buckets - 1;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t k = src[i];
      dst[h[(k >> s) & mask]++] = k;
    }
    std::swap(src, dst);
  }
  if (src != a) std::memcpy(a, src, n * sizeof(uint64_t));
}

}  // namespace

void radix_sort(uint64_t* a, uint64_t* tmp, size_t n, unsigned bits) {
  if (n < 512) {
    std::sort(a, a + n);
    return;
  }
  // Hashes are near uniform: ordering by the top log2(n) + 4 bits leaves few keys out of place, and an
  // insertion pass fixes those. Keys sharing top bits far beyond chance fall back to a full sort.
  unsigned top = 4;
  while ((size_t{1} << (top - 4)) < n && top < bits) ++top;
  top = std::min(top, bits);
  lsd(a, tmp, n, bits - top, top);
  if (top == bits) return;
  size_t moves = 0;
  const size_t budget = n / 4;
  for (size_t i = 1; i < n; ++i) {
    const uint64_t k = a[i];
    size_t j = i;
    while (j > 0 && a[j - 1] > k) {
      a[j] = a[j - 1];
      --j;
    }
    a[j] = k;
    moves += i - j;
    if (moves > budget) {
      lsd(a, tmp, n, 0, bits);
      return;
    }
  }
}

}  // namespace fastmmeval::ngram
