// Hashing n-token windows of uint16 or uint32 tokens, the same hash as hash_windows in hashes.hpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include "xxhash.h"

namespace fastmmeval::ngram {

constexpr size_t kMaxN = 64;

// Calls f(hash) for every window of n tokens in tokens[0, len), in order. The hash is XXH3-64 (with
// seed) of the window's tokens as little-endian uint32 bytes, whatever the token type, so uint16 and
// uint32 copies of a corpus hash alike. n must be in 1..kMaxN.
template <typename Token, typename F>
void for_each_window(const Token* tokens, size_t len, size_t n, uint64_t seed, F&& f) {
  if (len < n) return;
  const size_t windows = len - n + 1;
  auto hash_all = [&](const uint32_t* t, size_t count) {
    if (n == 8) {  // the common case, with the length a constant XXH3 specializes on
      for (size_t s = 0; s < count; ++s) f(XXH3_64bits_withSeed(t + s, 32, seed));
    } else {
      for (size_t s = 0; s < count; ++s) f(XXH3_64bits_withSeed(t + s, 4 * n, seed));
    }
  };
  if constexpr (sizeof(Token) == 4) {
    hash_all(reinterpret_cast<const uint32_t*>(tokens), windows);
  } else {
    constexpr size_t kChunk = 2048;
    uint32_t wide[kChunk + kMaxN];
    for (size_t s = 0; s < windows; s += kChunk) {
      const size_t count = std::min(kChunk, windows - s);
      std::copy(tokens + s, tokens + s + count + n - 1, wide);
      hash_all(wide, count);
    }
  }
}

}  // namespace fastmmeval::ngram
