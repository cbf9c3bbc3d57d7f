// AVX-512 code paths: compiled on x86-64 with GCC or Clang whatever the build's -march, and taken only
// where the CPU has the instructions (checked once, at run time). Functions marked AVX512 use them.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define FASTMMEVAL_AVX512 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,popcnt")))

namespace fastmmeval::ngram {

// Whether this CPU runs the AVX512 functions (AVX-512 F, DQ, BW and VL, and POPCNT).
inline bool has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("popcnt");
  return has;
}

}  // namespace fastmmeval::ngram
#endif
