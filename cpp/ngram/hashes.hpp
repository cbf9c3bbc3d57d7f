// Hashes of n-token windows that stay inside one document.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fastmmeval::ngram {

// Number of windows of n tokens over documents starting at offsets[0..n_docs) in a
// token array of length n_tokens (the last document ends at n_tokens). Returns an empty
// string on success, or a description of what is wrong with the offsets.
std::string validate_offsets(const int64_t* offsets, size_t n_docs, size_t n_tokens, size_t n);

size_t count_windows(const int64_t* offsets, size_t n_docs, size_t n_tokens, size_t n);

// Writes XXH3-64(seed) of each window's little-endian bytes into out, document by
// document, window by window. out must hold count_windows(...) values.
void hash_windows(const uint32_t* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs,
                  size_t n, uint64_t seed, uint64_t* out);

// The same hashes of windows [0, windows) of 8 tokens at t, 8 windows at a time with AVX-512 where the CPU
// has it. Returns how many windows it hashed into out (a multiple of 8; 0 without AVX-512): the caller
// hashes the rest.
size_t hash8_simd(const uint16_t* t, size_t windows, uint64_t seed, uint64_t* out);
size_t hash8_simd(const uint32_t* t, size_t windows, uint64_t seed, uint64_t* out);

}  // namespace fastmmeval::ngram
