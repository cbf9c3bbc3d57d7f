#include "ngram/hashes.hpp"

#define XXH_INLINE_ALL
#include "xxhash.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ngram hashes are defined over little-endian token bytes; add a byte swap for this target"
#endif

namespace fastmmeval::ngram {

namespace {
size_t doc_end(const int64_t* offsets, size_t n_docs, size_t n_tokens, size_t i) {
  return i + 1 < n_docs ? static_cast<size_t>(offsets[i + 1]) : n_tokens;
}
}  // namespace

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
  const size_t bytes = n * sizeof(uint32_t);
  for (size_t i = 0; i < n_docs; ++i) {
    const size_t begin = static_cast<size_t>(offsets[i]);
    const size_t end = doc_end(offsets, n_docs, n_tokens, i);
    if (end - begin < n) continue;
    for (size_t s = begin; s + n <= end; ++s) *out++ = XXH3_64bits_withSeed(tokens + s, bytes, seed);
  }
}

}  // namespace fastmmeval::ngram
