#include "ngram/heavy.hpp"

#include <algorithm>
#include <utility>

#include "ngram/avx512.hpp"
#include "ngram/radix.hpp"

namespace fastmmeval::ngram {

namespace {
// An empty slot holds a value whose own slot is another one, so no hash matches it.
uint64_t empty_slot(size_t s) { return ~(uint64_t{s} << HeavyHashes::kShift); }
}  // namespace

HeavyHashes::HeavyHashes() : table_(kSlots) { clear(); }

void HeavyHashes::clear() {
  for (size_t s = 0; s < kSlots; ++s) table_[s] = empty_slot(s);
  held_ = 0;
}

void HeavyHashes::build(uint64_t* sample, uint64_t* tmp, size_t n, unsigned cap) {
  radix_sort(sample, tmp, n, 64);
  std::vector<std::pair<size_t, uint64_t>> saturated;  // (occurrences, hash)
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && sample[j] == sample[i]) ++j;
    if (j - i >= cap) saturated.emplace_back(j - i, sample[i]);
    i = j;
  }
  std::stable_sort(saturated.begin(), saturated.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  size_t covered = 0;  // sample windows that are copies of held hashes
  for (const auto& [occurrences, h] : saturated) {
    uint64_t& at = table_[slot(h)];
    if (at == empty_slot(slot(h))) {
      at = h;
      ++held_;
      covered += occurrences;
    }
  }
  if (covered < n / 20) clear();
}

#ifdef FASTMMEVAL_AVX512
#ifndef __clang__  // GCC 12 wrongly warns that its own AVX-512 intrinsics read uninitialized values (bug 105593)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// drop_held 8 keys at a time: their slots gathered, the keys not held compressed to the front (in a
// register: storing compressed to memory is slow on some CPUs) and stored whole, the lanes past them
// landing on keys already read.
AVX512 size_t drop_held_avx512(const uint64_t* table, uint64_t* keys, size_t count, size_t* done) {
  const __m512i mask = _mm512_set1_epi64(HeavyHashes::kSlots - 1);
  size_t m = 0, k = 0;
  for (; k + 8 <= count; k += 8) {
    const __m512i v = _mm512_loadu_si512(keys + k);
    const __m512i slots = _mm512_and_si512(_mm512_srli_epi64(v, HeavyHashes::kShift), mask);
    const __mmask8 kept = _mm512_cmpneq_epu64_mask(_mm512_i64gather_epi64(slots, table, 8), v);
    _mm512_storeu_si512(keys + m, _mm512_maskz_compress_epi64(kept, v));
    m += static_cast<size_t>(__builtin_popcount(kept));
  }
  *done = k;
  return m;
}
#ifndef __clang__
#pragma GCC diagnostic pop
#endif
#endif

size_t HeavyHashes::drop_held(uint64_t* keys, size_t count) const {
  const uint64_t* const table = table_.data();
  size_t m = 0, k = 0;
#ifdef FASTMMEVAL_AVX512
  if (has_avx512()) m = drop_held_avx512(table, keys, count, &k);
#endif
  for (; k < count; ++k) {  // branch-free: held keys come at random
    const uint64_t h = keys[k];
    keys[m] = h;
    m += table[slot(h)] != h;
  }
  return m;
}

}  // namespace fastmmeval::ngram
