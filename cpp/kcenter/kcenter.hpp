// Greedy k-center (farthest-point) selection over the rows of a dense feature matrix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/interrupt.hpp"

namespace fastmmeval::kcenter {

struct Options {
  unsigned threads = 0;  // 0: every hardware thread
  bool simd = true;      // false forces the portable loops even where AVX2 is present (the tests run both)
  // Called on the calling thread after each pick with the number of centers picked so far (may be empty).
  std::function<void(size_t)> on_pick;
};

// Picks k rows of x (n rows of d values, row-major) starting at row `first`: each next center is
// the row farthest (Euclidean) from its nearest chosen center, ties to the lowest index, never a
// row already chosen. Writes the k row indices in pick order into out. Distances are accumulated
// in fp32; `x` holds IEEE fp16 bit patterns (greedy_f16) or fp32 values (greedy_f32). Polls interrupt
// during every pass. Requires 1 <= k <= n and first < n.
void greedy_f16(const uint16_t* x, size_t n, size_t d, size_t k, size_t first, const Options& options,
                Interrupt& interrupt, int64_t* out);
void greedy_f32(const float* x, size_t n, size_t d, size_t k, size_t first, const Options& options,
                Interrupt& interrupt, int64_t* out);

// IEEE fp16 bit patterns of src[0..count), rounded to nearest even (as numpy's astype(float16)).
void to_f16(const float* src, size_t count, unsigned threads, bool simd, uint16_t* dst);

// The row-distance code greedy_* uses on this CPU when simd is true: "avx2+f16c+fma" or "portable".
const char* simd_path();

}  // namespace fastmmeval::kcenter
