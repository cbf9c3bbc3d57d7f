#include "ngram/hashes.hpp"

#include "ngram/avx512.hpp"
#include "ngram/windows.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ngram hashes are defined over little-endian token bytes; add a byte swap for this target"
#endif

namespace fastmmeval::ngram {

namespace {
size_t doc_end(const int64_t* offsets, size_t n_docs, size_t n_tokens, size_t i) {
  return i + 1 < n_docs ? static_cast<size_t>(offsets[i + 1]) : n_tokens;
}

#ifdef FASTMMEVAL_AVX512
#ifndef __clang__  // GCC 12 wrongly warns that its own AVX-512 intrinsics read uninitialized values (bug 105593)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// XXH3_mul128_fold64 on 8 lanes: the 128-bit product from four 32x32-bit ones, its halves xored.
AVX512 __m512i mul128_fold64(__m512i a, __m512i b) {
  const __m512i low32 = _mm512_set1_epi64(0xFFFFFFFF);
  const __m512i a_hi = _mm512_srli_epi64(a, 32), b_hi = _mm512_srli_epi64(b, 32);
  const __m512i ll = _mm512_mul_epu32(a, b), lh = _mm512_mul_epu32(a, b_hi);
  const __m512i hl = _mm512_mul_epu32(a_hi, b), hh = _mm512_mul_epu32(a_hi, b_hi);
  const __m512i cross = _mm512_add_epi64(_mm512_add_epi64(_mm512_srli_epi64(ll, 32), _mm512_and_si512(lh, low32)),
                                         _mm512_and_si512(hl, low32));
  const __m512i hi = _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(lh, 32)),
                                      _mm512_add_epi64(_mm512_srli_epi64(hl, 32), _mm512_srli_epi64(cross, 32)));
  const __m512i lo = _mm512_or_si512(_mm512_slli_epi64(cross, 32), _mm512_and_si512(ll, low32));
  return _mm512_xor_si512(lo, hi);
}

// Tokens t[0, 8) zero-extended to 8 lanes.
AVX512 __m512i widen(const uint16_t* t) { return _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))); }
AVX512 __m512i widen(const uint32_t* t) { return _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t))); }

// Lane l: the little-endian 64-bit word of tokens t[l] and t[l + 1] as uint32.
template <typename Token>
AVX512 __m512i token_pairs(const Token* t) {
  return _mm512_or_si512(widen(t), _mm512_slli_epi64(widen(t + 1), 32));
}

// XXH3_len_17to128_64b for 32 bytes (two mix16B of the window's halves, then the avalanche) of the
// windows at t, 8 at a time; returns how many it hashed (windows rounded down to a multiple of 8).
template <typename Token>
AVX512 size_t hash8_avx512(const Token* t, size_t windows, uint64_t seed, uint64_t* out) {
  __m512i key[4];
  for (int j = 0; j < 4; ++j) {
    const uint64_t secret = XXH_readLE64(XXH3_kSecret + 8 * j);
    key[j] = _mm512_set1_epi64(static_cast<long long>(j % 2 == 0 ? secret + seed : secret - seed));
  }
  const __m512i start = _mm512_set1_epi64(static_cast<long long>(32 * XXH_PRIME64_1));
  const __m512i mx1 = _mm512_set1_epi64(static_cast<long long>(PRIME_MX1));
  size_t s = 0;
  for (; s + 8 <= windows; s += 8) {
    const Token* w = t + s;
    __m512i mix[2];
    for (int half = 0; half < 2; ++half) {
      const __m512i lo = _mm512_xor_si512(token_pairs(w + 4 * half), key[2 * half]);
      const __m512i hi = _mm512_xor_si512(token_pairs(w + 4 * half + 2), key[2 * half + 1]);
      mix[half] = mul128_fold64(lo, hi);
    }
    __m512i h = _mm512_add_epi64(start, _mm512_add_epi64(mix[0], mix[1]));
    h = _mm512_xor_si512(h, _mm512_srli_epi64(h, 37));
    h = _mm512_mullo_epi64(h, mx1);
    h = _mm512_xor_si512(h, _mm512_srli_epi64(h, 32));
    _mm512_storeu_si512(out + s, h);
  }
  return s;
}

#ifndef __clang__
#pragma GCC diagnostic pop
#endif
#endif

template <typename Token>
size_t hash8(const Token* t, size_t windows, uint64_t seed, uint64_t* out) {
#ifdef FASTMMEVAL_AVX512
  if (has_avx512()) return hash8_avx512(t, windows, seed, out);
#endif
  (void)t, (void)windows, (void)seed, (void)out;
  return 0;
}

}  // namespace

size_t hash8_simd(const uint16_t* t, size_t windows, uint64_t seed, uint64_t* out) {
  return hash8(t, windows, seed, out);
}

size_t hash8_simd(const uint32_t* t, size_t windows, uint64_t seed, uint64_t* out) {
  return hash8(t, windows, seed, out);
}

std::string validate_offsets(const int64_t* offsets, size_t n_docs, size_t n_tokens, size_t n) {
  if (n == 0) return "n must be at least 1";
  if (n_docs == 0) {
    return n_tokens == 0 ? "" : "doc_offsets is empty but tokens are not (the first offset must be 0)";
  }
  if (offsets[0] != 0) return "doc_offsets[0] must be 0, got " + std::to_string(offsets[0]);
  for (size_t i = 1; i < n_docs; ++i) {
    if (offsets[i] < offsets[i - 1]) {
      return "doc_offsets must be non-decreasing, but doc_offsets[" + std::to_string(i) +
             "]=" + std::to_string(offsets[i]) + " < " + std::to_string(offsets[i - 1]);
    }
  }
  if (static_cast<size_t>(offsets[n_docs - 1]) > n_tokens) {
    return "doc_offsets[" + std::to_string(n_docs - 1) + "]=" + std::to_string(offsets[n_docs - 1]) +
           " is past the end of tokens (length " + std::to_string(n_tokens) + ")";
  }
  return "";
}

size_t count_windows(const int64_t* offsets, size_t n_docs, size_t n_tokens, size_t n) {
  size_t total = 0;
  for (size_t i = 0; i < n_docs; ++i) {
    const size_t len = doc_end(offsets, n_docs, n_tokens, i) - static_cast<size_t>(offsets[i]);
    if (len >= n) total += len - n + 1;
  }
  return total;
}

void hash_windows(const uint32_t* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs,
                  size_t n, uint64_t seed, uint64_t* out) {
  for (size_t i = 0; i < n_docs; ++i) {
    const size_t begin = static_cast<size_t>(offsets[i]);
    out += hash_windows_to(tokens + begin, doc_end(offsets, n_docs, n_tokens, i) - begin, n, seed, out);
  }
}

}  // namespace fastmmeval::ngram
