// Hashing n-token windows of uint16 or uint32 tokens, the same hash as hash_windows in hashes.hpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ngram/hashes.hpp"

#define XXH_INLINE_ALL
#include "xxhash.h"

namespace fastmmeval::ngram {

constexpr size_t kMaxN = 64;

// Writes the hash of every window of n tokens in tokens[0, len) to out, in order, and returns how many
// (len - n + 1, or 0 if len < n). The hash is XXH3-64 (with seed) of the window's tokens as little-endian
// uint32 bytes, whatever the token type, so uint16 and uint32 copies of a corpus hash alike. n must be
// in 1..kMaxN.
template <typename Token>
size_t hash_windows_to(const Token* tokens, size_t len, size_t n, uint64_t seed, uint64_t* out) {
  if (len < n) return 0;
  const size_t windows = len - n + 1;
  size_t s = n == 8 ? hash8_simd(tokens, windows, seed, out) : 0;
  auto hash_all = [&](const uint32_t* t, size_t count, uint64_t* to) {
    if (n == 8) {  // the common case, with the length a constant XXH3 specializes on
      for (size_t i = 0; i < count; ++i) to[i] = XXH3_64bits_withSeed(t + i, 32, seed);
    } else {
      for (size_t i = 0; i < count; ++i) to[i] = XXH3_64bits_withSeed(t + i, 4 * n, seed);
    }
  };
  if constexpr (sizeof(Token) == 4) {
    hash_all(reinterpret_cast<const uint32_t*>(tokens) + s, windows - s, out + s);
  } else {
    constexpr size_t kChunk = 2048;
    uint32_t wide[kChunk + kMaxN];
    for (; s < windows; s += kChunk) {
      const size_t count = std::min(kChunk, windows - s);
      std::copy(tokens + s, tokens + s + count + n - 1, wide);
      hash_all(wide, count, out + s);
    }
  }
  return windows;
}

// Calls f(hash) for every window of n tokens in tokens[0, len), in order (the hashes of hash_windows_to).
template <typename Token, typename F>
void for_each_window(const Token* tokens, size_t len, size_t n, uint64_t seed, F&& f) {
  constexpr size_t kChunk = 2048;
  uint64_t hashed[kChunk];
  for (size_t s = 0; s + n <= len; s += kChunk) {
    const size_t count = hash_windows_to(tokens + s, std::min(len - s, kChunk + n - 1), n, seed, hashed);
    for (size_t i = 0; i < count; ++i) f(hashed[i]);
  }
}

}  // namespace fastmmeval::ngram
