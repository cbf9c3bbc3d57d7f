#include "ngram/radix.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace fastmmeval::ngram {

namespace {

constexpr unsigned kMaxDigit = 11;

// The digits of an LSD radix sort by key bits [lo, lo + width): passes of near-equal width, each at most
// kMaxDigit bits. Pass p's histogram is hist[p << kMaxDigit, ...).
struct Digits {
  unsigned passes, shift[8], bits[8];
  Digits(unsigned lo, unsigned width) : passes((width + kMaxDigit - 1) / kMaxDigit) {
    for (unsigned p = 0, done = 0; p < passes; ++p) {
      bits[p] = (width - done + (passes - p) - 1) / (passes - p);
      shift[p] = lo + done;
      done += bits[p];
    }
  }
  size_t digit(unsigned p, uint64_t k) const { return (k >> shift[p]) & ((uint64_t{1} << bits[p]) - 1); }
  size_t slot(unsigned p, uint64_t k) const { return (size_t{p} << kMaxDigit) + digit(p, k); }
  std::vector<size_t> histogram() const { return std::vector<size_t>(size_t{passes} << kMaxDigit, 0); }
};

// Copies the spans into a (one after another), counting their digits into hist.
void gather(const std::vector<KeySpan>& spans, const Digits& d, uint64_t* a, size_t* hist) {
  for (const KeySpan& s : spans) {
    for (size_t i = 0; i < s.size; ++i) {
      const uint64_t k = s.keys[i];
      a[i] = k;
      for (unsigned p = 0; p < d.passes; ++p) ++hist[d.slot(p, k)];
    }
    a += s.size;
  }
}

// The LSD passes over a[0, n) given its digit counts, alternating between a and tmp; returns which of the
// two holds the sorted keys.
uint64_t* lsd_passes(const Digits& d, size_t* hist, uint64_t* a, uint64_t* tmp, size_t n) {
  uint64_t* src = a;
  uint64_t* dst = tmp;
  for (unsigned p = 0; p < d.passes; ++p) {
    size_t* h = hist + (size_t{p} << kMaxDigit);
    const size_t buckets = size_t{1} << d.bits[p];
    if (std::find(h, h + buckets, n) != h + buckets) continue;  // one digit value: nothing moves
    size_t sum = 0;
    for (size_t b = 0; b < buckets; ++b) {
      const size_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; ++i) {
      const uint64_t k = src[i];
      dst[h[d.digit(p, k)]++] = k;
    }
    std::swap(src, dst);
  }
  return src;
}

// LSD radix sort of a[0, n) by key bits [lo, lo + width), using tmp.
void lsd(uint64_t* a, uint64_t* tmp, size_t n, unsigned lo, unsigned width) {
  const Digits d(lo, width);
  std::vector<size_t> hist = d.histogram();
  for (size_t i = 0; i < n; ++i) {
    for (unsigned p = 0; p < d.passes; ++p) ++hist[d.slot(p, a[i])];
  }
  const uint64_t* sorted = lsd_passes(d, hist.data(), a, tmp, n);
  if (sorted != a) std::memcpy(a, sorted, n * sizeof(uint64_t));
}

constexpr size_t kGaveUp = ~size_t{0};

// Turns x[0, n) (n > 0), ascending but for keys out of place among the few that share their top digits,
// into its distinct keys ascending in x[0, m) with their counts (saturated at cap) in counts[0, m); returns
// m, or kGaveUp once more than `budget` distinct keys had to move for keys out of place.
size_t count_runs(uint64_t* x, size_t n, unsigned cap, uint8_t* counts, size_t budget) {
  size_t m = 1, moves = 0;
  uint64_t last = x[0];
  unsigned run = 1;  // occurrences of last so far
  for (size_t i = 1; i < n; ++i) {
    const uint64_t k = x[i];
    if (k < last) {  // rare: insert k among the distinct keys so far (last stays the largest)
      counts[m - 1] = static_cast<uint8_t>(std::min(run, cap));
      size_t j = m - 1;
      while (j > 0 && x[j - 1] > k) --j;
      if (j > 0 && x[j - 1] == k) {
        counts[j - 1] = static_cast<uint8_t>(std::min(counts[j - 1] + 1u, cap));
      } else {
        moves += m - j;
        if (moves > budget) return kGaveUp;
        std::memmove(x + j + 1, x + j, (m - j) * sizeof(uint64_t));
        std::memmove(counts + j + 1, counts + j, m - j);
        x[j] = k;
        counts[j] = 1;
        ++m;
      }
      run = counts[m - 1];
      continue;
    }
    // Branch-free: a new key starts a run at x[m], a repeated one extends the run of last.
    const bool fresh = k != last;
    counts[m - 1] = static_cast<uint8_t>(std::min(run, cap));
    run = fresh ? 1 : run + 1;
    x[m] = k;
    m += fresh;
    last = k;
  }
  counts[m - 1] = static_cast<uint8_t>(std::min(run, cap));
  return m;
}

unsigned bit_width(size_t n) {
  unsigned w = 0;
  while (n >> w) ++w;
  return w;
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

KeyCounts sort_counts(const std::vector<KeySpan>& spans, size_t n, unsigned bits, uint8_t cap, uint64_t* a,
                      uint64_t* b, uint8_t* counts) {
  if (n == 0) return {a, counts, 0};
  // Near-uniform hashes sorted by their top log2(n) + 1 bits (two passes at a build's partition sizes) have
  // few keys left out of place, and count_runs moves those as it counts: cheaper than more passes.
  const unsigned top = std::min(bits, bit_width(n) + 1);
  const Digits d(bits - top, top);
  std::vector<size_t> hist = d.histogram();
  gather(spans, d, a, hist.data());
  uint64_t* sorted = lsd_passes(d, hist.data(), a, b, n);
  size_t m = count_runs(sorted, n, cap, counts, top < bits ? n / 4 : kGaveUp);
  if (m == kGaveUp) {  // keys sharing top bits far beyond chance: a full sort
    const Digits all(0, bits);
    hist = all.histogram();
    gather(spans, all, a, hist.data());
    sorted = lsd_passes(all, hist.data(), a, b, n);
    m = count_runs(sorted, n, cap, counts, kGaveUp);
  }
  return {sorted, counts, m};
}

}  // namespace fastmmeval::ngram
