#include "ngram/radix.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ngram/avx512.hpp"

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

// Calls f(key) for every key of the spans, in order.
template <typename F>
void each_key(const std::vector<KeySpan>& spans, F&& f) {
  for (const KeySpan& s : spans) {
    const uint64_t* const keys = s.keys;  // locals: f's stores could alias the span's fields
    const size_t size = s.size;
    for (size_t i = 0; i < size; ++i) f(keys[i]);
  }
}

// Turns pass p's digit counts into where each digit's keys start; false if all n keys share one digit
// (nothing would move).
bool starts(const Digits& d, unsigned p, size_t* hist, size_t n) {
  size_t* h = hist + (size_t{p} << kMaxDigit);
  const size_t buckets = size_t{1} << d.bits[p];
  if (std::find(h, h + buckets, n) != h + buckets) return false;
  size_t sum = 0;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t c = h[b];
    h[b] = sum;
    sum += c;
  }
  return true;
}

// The LSD passes from pass `from` on over src[0, n) given its digit counts, alternating between src and dst;
// returns which of the two holds the sorted keys.
uint64_t* lsd_passes(const Digits& d, size_t* hist, uint64_t* src, uint64_t* dst, size_t n, unsigned from = 0) {
  for (unsigned p = from; p < d.passes; ++p) {
    if (!starts(d, p, hist, n)) continue;
    size_t* const h = hist + (size_t{p} << kMaxDigit);
    const unsigned shift = d.shift[p];
    const uint64_t mask = (uint64_t{1} << d.bits[p]) - 1;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t k = src[i];
      dst[h[(k >> shift) & mask]++] = k;
    }
    std::swap(src, dst);
  }
  return src;
}

// Counts the digits of every key of the spans into hist (two digits: the usual case, unrolled).
void count_digits(const std::vector<KeySpan>& spans, const Digits& d, size_t* hist) {
  if (d.passes == 2) {
    size_t* const h0 = hist;
    size_t* const h1 = hist + (size_t{1} << kMaxDigit);
    const unsigned s0 = d.shift[0], s1 = d.shift[1];
    const uint64_t m0 = (uint64_t{1} << d.bits[0]) - 1, m1 = (uint64_t{1} << d.bits[1]) - 1;
    each_key(spans, [&](uint64_t k) {
      ++h0[(k >> s0) & m0];
      ++h1[(k >> s1) & m1];
    });
    return;
  }
  each_key(spans, [&](uint64_t k) {
    for (unsigned p = 0; p < d.passes; ++p) ++hist[d.slot(p, k)];
  });
}

// The LSD passes over the keys of the spans (n in all) into a or b, returning which holds them sorted: the
// digits are counted in a first read of the spans, and the first pass moves keys from the spans themselves
// (rather than from a copy).
uint64_t* lsd_spans(const std::vector<KeySpan>& spans, const Digits& d, size_t* hist, uint64_t* a, uint64_t* b,
                    size_t n) {
  count_digits(spans, d, hist);
  if (starts(d, 0, hist, n)) {
    size_t* const h = hist;
    const unsigned shift = d.shift[0];
    const uint64_t mask = (uint64_t{1} << d.bits[0]) - 1;
    each_key(spans, [&](uint64_t k) { b[h[(k >> shift) & mask]++] = k; });
    return lsd_passes(d, hist, b, a, n, 1);
  }
  uint64_t* to = a;
  each_key(spans, [&](uint64_t k) { *to++ = k; });
  return lsd_passes(d, hist, a, b, n, 1);
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

// Moves x[k] left into its place among ascending x[0, k); returns how many keys it stepped over.
inline size_t insert_one(uint64_t* x, size_t k) {
  const uint64_t key = x[k];
  size_t j = k;
  while (j > 0 && x[j - 1] > key) {
    x[j] = x[j - 1];
    --j;
  }
  x[j] = key;
  return k - j;
}

// Puts the few keys of x[0, n) that are out of place where they belong (insertion); false once more than
// `budget` keys had to be stepped over. x holds the same keys either way.
bool fix_up(uint64_t* x, size_t n, size_t budget) {
  size_t moves = 0;
  for (size_t i = 1; i < n; ++i) {
    moves += insert_one(x, i);
    if (moves > budget) return false;
  }
  return true;
}

// The distinct keys of ascending x[0, n) (n > 0) into x[0, m) and their counts, saturated at cap, into
// counts[0, m); returns m.
size_t dedup(uint64_t* x, size_t n, unsigned cap, uint8_t* counts) {
  size_t m = 1;
  unsigned run = 1;  // occurrences of x[m - 1] so far
  for (size_t i = 1; i < n; ++i) {
    // Branch-free: a new key starts a run at x[m], a repeated one extends the run of x[m - 1].
    const bool fresh = x[i] != x[m - 1];
    counts[m - 1] = static_cast<uint8_t>(std::min(run, cap));
    run = fresh ? 1 : run + 1;
    x[m] = x[i];
    m += fresh;
  }
  counts[m - 1] = static_cast<uint8_t>(std::min(run, cap));
  return m;
}

#ifdef FASTMMEVAL_AVX512
#ifndef __clang__  // GCC 12 wrongly warns that its own AVX-512 intrinsics read uninitialized values (bug 105593)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Odd-even transposition steps over x[0, n): each orders the keys of every pair it covers, pairs
// (0, 1), (2, 3), ... then pairs (1, 2), (3, 4), ... Keys in place stay; two neighbours that share their
// top digits (most keys out of place) come out in order.
AVX512 void pair_steps_avx512(uint64_t* x, size_t n) {
  constexpr __mmask8 kHigh = 0xAA;  // the second key of each pair takes the larger one
  for (size_t first = 0; first < 2; ++first) {
    size_t i = first;
    for (; i + 8 <= n; i += 8) {
      const __m512i v = _mm512_loadu_si512(x + i);
      const __m512i w = _mm512_permutex_epi64(v, 0xB1);  // each pair's keys swapped
      _mm512_storeu_si512(x + i, _mm512_mask_blend_epi64(kHigh, _mm512_min_epu64(v, w), _mm512_max_epu64(v, w)));
    }
    if (i + 1 < n && x[i] > x[i + 1]) std::swap(x[i], x[i + 1]);
  }
}

// Puts the few keys of x[0, n) that are out of place where they belong (insertion), 8 keys checked at a
// time; false once more than `budget` keys had to be stepped over.
AVX512 bool fix_up_avx512(uint64_t* x, size_t n, size_t budget) {
  size_t moves = 0;
  auto insert = [&](size_t k) {
    moves += insert_one(x, k);
    return moves <= budget;
  };
  size_t i = 1;
  for (; i + 8 <= n; i += 8) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __m512i prev = _mm512_loadu_si512(x + i - 1);
    if (_mm512_cmplt_epu64_mask(v, prev) == 0) continue;
    for (size_t k = i; k < i + 8; ++k) {
      if (!insert(k)) return false;
    }
  }
  for (; i < n; ++i) {
    if (!insert(i)) return false;
  }
  return true;
}

// The distinct keys of ascending x[0, n) (n > 0) into x[0, m) and their counts, saturated at cap, into
// counts[0, m); returns m. pos (n words) holds where each distinct key first occurs.
AVX512 size_t dedup_avx512(uint64_t* x, size_t n, unsigned cap, uint8_t* counts, uint64_t* pos) {
  size_t m = 1;
  pos[0] = 0;
  __m512i carry = _mm512_set1_epi64(static_cast<long long>(x[0]));  // lane 7: the key before the next 8
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  size_t i = 1;
  // A new key at x[i + l] is kept (compressed to the front of a vector, stored whole: the lanes past the
  // kept ones land on keys already read) with its position.
  for (; i + 8 <= n; i += 8) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __mmask8 fresh = _mm512_cmpneq_epu64_mask(v, _mm512_alignr_epi64(v, carry, 7));
    const __m512i at = _mm512_add_epi64(lanes, _mm512_set1_epi64(static_cast<long long>(i)));
    _mm512_storeu_si512(x + m, _mm512_maskz_compress_epi64(fresh, v));
    _mm512_storeu_si512(pos + m, _mm512_maskz_compress_epi64(fresh, at));
    m += static_cast<size_t>(__builtin_popcount(fresh));
    carry = v;
  }
  for (; i < n; ++i) {
    if (x[i] != x[m - 1]) {
      x[m] = x[i];
      pos[m++] = i;
    }
  }
  // A key's count is the distance to the next new key.
  const __m512i most = _mm512_set1_epi64(cap);
  size_t j = 0;
  for (; j + 9 <= m; j += 8) {
    const __m512i run = _mm512_sub_epi64(_mm512_loadu_si512(pos + j + 1), _mm512_loadu_si512(pos + j));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(counts + j), _mm512_cvtepi64_epi8(_mm512_min_epu64(run, most)));
  }
  for (; j < m; ++j) {
    const uint64_t run = (j + 1 < m ? pos[j + 1] : n) - pos[j];
    counts[j] = static_cast<uint8_t>(std::min<uint64_t>(run, cap));
  }
  return m;
}

#ifndef __clang__
#pragma GCC diagnostic pop
#endif
#endif

// The distinct keys of x[0, n) (n > 0, ascending but for keys out of place among the few that share their
// top digits) into x[0, m) and their counts, saturated at cap, into counts[0, m); returns m, or kGaveUp
// (x holding the same keys) once more than `budget` keys had to be stepped over to put keys in place.
// scratch holds n words. Where the CPU has AVX-512, vector passes (two odd-even steps, a check that inserts
// the keys still out of place, then the distinct keys and their counts); scalar ones elsewhere. The same
// result either way.
size_t count_runs(uint64_t* x, size_t n, unsigned cap, uint8_t* counts, size_t budget, uint64_t* scratch) {
#ifdef FASTMMEVAL_AVX512
  if (has_avx512()) {
    pair_steps_avx512(x, n);
    if (!fix_up_avx512(x, n, budget)) return kGaveUp;
    return dedup_avx512(x, n, cap, counts, scratch);
  }
#endif
  (void)scratch;
  if (!fix_up(x, n, budget)) return kGaveUp;
  return dedup(x, n, cap, counts);
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
  if (top < bits && !fix_up(a, n, n / 4)) lsd(a, tmp, n, 0, bits);
}

namespace {

// sort_counts of spans that fit the caches.
KeyCounts sort_counts_in_cache(const std::vector<KeySpan>& spans, size_t n, unsigned bits, uint8_t cap, uint64_t* a,
                               uint64_t* b, uint8_t* counts) {
  // Near-uniform hashes sorted by their top log2(n) + 1 bits (two passes at a build's partition sizes) have
  // few keys left out of place (about 8%, mostly next to their place), and count_runs moves those as it
  // counts: cheaper than more passes.
  const unsigned top = std::min(bits, bit_width(n) + 1);
  const Digits d(bits - top, top);
  std::vector<size_t> hist = d.histogram();
  uint64_t* sorted = lsd_spans(spans, d, hist.data(), a, b, n);
  uint64_t* other = sorted == a ? b : a;
  size_t m = count_runs(sorted, n, cap, counts, top < bits ? n / 4 : kGaveUp, other);
  if (m == kGaveUp) {  // keys sharing top bits far beyond chance: a full sort
    lsd(sorted, other, n, 0, bits);
    m = count_runs(sorted, n, cap, counts, kGaveUp, other);
  }
  return {sorted, counts, m};
}

constexpr size_t kPartKeys = size_t{1} << 18;  // keys of a part sorted in cache (2 MiB, and twice that of buffers)

}  // namespace

KeyCounts sort_counts(const std::vector<KeySpan>& spans, size_t n, unsigned bits, uint8_t cap, uint64_t* a,
                      uint64_t* b, uint8_t* counts) {
  if (n == 0) return {a, counts, 0};
  // Over twice a part's keys, the radix passes would scatter across more memory than the caches hold: the
  // keys are first split by their top bits into parts of about kPartKeys (one pass to a few places), in b,
  // and each part is sorted and counted in cache, its distinct keys moved down to follow the previous
  // part's in a.
  const unsigned split = n > 2 * kPartKeys ? std::min({bit_width((n - 1) / kPartKeys), bits, kMaxDigit}) : 0;
  const Digits d(bits - split, split);
  std::vector<size_t> hist = d.histogram();
  if (split > 0) count_digits(spans, d, hist.data());
  if (split == 0 || !starts(d, 0, hist.data(), n)) return sort_counts_in_cache(spans, n, bits, cap, a, b, counts);
  const size_t parts = size_t{1} << split;
  const std::vector<size_t> begin(hist.begin(), hist.begin() + static_cast<std::ptrdiff_t>(parts));
  size_t* const end = hist.data();  // each part's next free place, then its end
  each_key(spans, [&](uint64_t k) { b[end[d.digit(0, k)]++] = k; });
  size_t m = 0;
  for (size_t j = 0; j < parts; ++j) {
    const size_t size = end[j] - begin[j];
    if (size == 0) continue;
    // The part is sorted from and into its own places in b and a (those of later parts stay untouched).
    const KeyCounts part = sort_counts_in_cache({{b + begin[j], size}}, size, bits - split, cap, b + begin[j],
                                                a + begin[j], counts + m);
    std::memmove(a + m, part.keys, part.size * sizeof(uint64_t));
    m += part.size;
  }
  return {a, counts, m};
}

}  // namespace fastmmeval::ngram
