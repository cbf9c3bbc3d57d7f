#include "kcenter/kcenter.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define FASTMMEVAL_KCENTER_X86 1
#include <immintrin.h>
#endif

namespace fastmmeval::kcenter {

namespace {

template <typename T>
using RowDist = float (*)(const T* row, const float* center, size_t d);

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = sign | (exp == 31 ? 0x7f800000u | (mant << 13) : ((exp + 112) << 23) | (mant << 13));
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {                        // below 2^-14: a multiple of 2^-24
    float a;
    std::memcpy(&a, &magnitude, sizeof a);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  // Round the 13 dropped mantissa bits to nearest even, then rebias the exponent (127 -> 15).
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

float to_float(uint16_t v) { return half_to_float(v); }
float to_float(float v) { return v; }

// Eight independent partial sums so the compiler can vectorize without reassociating.
template <typename T>
float row_dist_portable(const T* row, const float* center, size_t d) {
  float acc[8] = {};
  size_t j = 0;
  for (; j + 8 <= d; j += 8) {
    for (size_t l = 0; l < 8; ++l) {
      const float t = to_float(row[j + l]) - center[j + l];
      acc[l] += t * t;
    }
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < d; ++j) {
    const float t = to_float(row[j]) - center[j];
    sum += t * t;
  }
  return sum;
}

#ifdef FASTMMEVAL_KCENTER_X86
#define FASTMMEVAL_AVX2 __attribute__((target("avx2,fma,f16c")))

FASTMMEVAL_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
FASTMMEVAL_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

FASTMMEVAL_AVX2 inline __m256 add_sq_diff(__m256 acc, __m256 x, const float* center) {
  const __m256 t = _mm256_sub_ps(x, _mm256_loadu_ps(center));
  return _mm256_fmadd_ps(t, t, acc);
}

// Four accumulators hide the FMA latency; the row is read once, the center stays in L1.
template <typename T>
FASTMMEVAL_AVX2 float row_dist_avx2(const T* row, const float* center, size_t d) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 32 <= d; j += 32) {
    a0 = add_sq_diff(a0, load8(row + j), center + j);
    a1 = add_sq_diff(a1, load8(row + j + 8), center + j + 8);
    a2 = add_sq_diff(a2, load8(row + j + 16), center + j + 16);
    a3 = add_sq_diff(a3, load8(row + j + 24), center + j + 24);
  }
  for (; j + 8 <= d; j += 8) a0 = add_sq_diff(a0, load8(row + j), center + j);
  const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  float sum = _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
  for (; j < d; ++j) {
    const float t = to_float(row[j]) - center[j];
    sum += t * t;
  }
  return sum;
}

FASTMMEVAL_AVX2 void to_f16_avx2(const float* src, size_t count, uint16_t* dst) {
  size_t j = 0;
  for (; j + 8 <= count; j += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), h);
  }
  for (; j < count; ++j) dst[j] = float_to_half(src[j]);
}

bool cpu_has_avx2() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}
#endif

template <typename T>
RowDist<T> pick_row_dist(bool simd) {
#ifdef FASTMMEVAL_KCENTER_X86
  if (simd && cpu_has_avx2()) return &row_dist_avx2<T>;
#else
  (void)simd;
#endif
  return &row_dist_portable<T>;
}

struct Farthest {
  float d2;
  size_t idx;
};

bool farther(const Farthest& a, const Farthest& b) { return a.d2 > b.d2 || (a.d2 == b.d2 && a.idx < b.idx); }

// Lowers min_d2[lo, hi) to the distance to `center` and returns the farthest row (lowest index on
// ties). Rows already chosen carry min_d2 = -1: they are skipped, so they are never picked again.
template <typename T>
Farthest scan(const T* x, size_t d, const float* center, float* min_d2, size_t lo, size_t hi, RowDist<T> dist) {
  Farthest best{-1.0f, lo};
  for (size_t i = lo; i < hi; ++i) {
    float m = min_d2[i];
    if (m < 0.0f) continue;
    const float d2 = dist(x + i * d, center, d);
    if (d2 < m) {
      m = d2;
      min_d2[i] = m;
    }
    if (m > best.d2) best = {m, i};
  }
  return best;
}

// Starting a thread costs tens of microseconds: only split a pass worth several times that.
constexpr size_t kMinValuesPerThread = size_t{1} << 18;
// Threads take rows in chunks of this many values from a shared counter, so a thread the OS pauses
// (the other cores are often busy) delays one chunk, not a fixed share of every pass.
constexpr size_t kChunkValues = size_t{1} << 18;

size_t worker_count(unsigned threads, size_t rows, size_t values) {
  const size_t wanted = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  return std::max<size_t>(1, std::min({wanted, rows, values / kMinValuesPerThread}));
}

// Runs work(0..workers) with work(0) on the calling thread; joins even if starting a thread throws.
template <typename Work>
void run_workers(size_t workers, const Work& work) {
  struct JoinAll {
    std::vector<std::thread> threads;
    ~JoinAll() {
      for (std::thread& t : threads) t.join();
    }
  } pool;
  for (size_t w = 1; w < workers; ++w) pool.threads.emplace_back(work, w);
  work(0);
}

template <typename T>
void greedy(const T* x, size_t n, size_t d, size_t k, size_t first, const Options& options, Interrupt& interrupt,
            int64_t* out) {
  const RowDist<T> dist = pick_row_dist<T>(options.simd);
  const size_t workers = worker_count(options.threads, n, n * d);
  std::vector<float> min_d2(n, std::numeric_limits<float>::infinity());
  std::vector<float> center(d);
  std::vector<Farthest> part(workers);
  const size_t chunk_rows = std::max<size_t>(1, kChunkValues / std::max<size_t>(1, d));
  size_t c = first;
  for (size_t s = 0; s < k; ++s) {
    out[s] = static_cast<int64_t>(c);
    min_d2[c] = -1.0f;
    if (options.on_pick) options.on_pick(s + 1);
    if (s + 1 == k) break;
    for (size_t j = 0; j < d; ++j) center[j] = to_float(x[c * d + j]);
    std::atomic<size_t> next{0};
    run_workers(workers, [&](size_t w) {
      Farthest best{-1.0f, n};
      for (size_t lo; (lo = next.fetch_add(chunk_rows)) < n;) {
        if (w == 0) {
          interrupt.poll();  // throws on the calling thread; the others see stopped() and end the pass
        } else if (interrupt.stopped()) {
          break;
        }
        const Farthest f = scan(x, d, center.data(), min_d2.data(), lo, std::min(n, lo + chunk_rows), dist);
        if (farther(f, best)) best = f;
      }
      part[w] = best;
    });
    Farthest best = part[0];
    for (size_t w = 1; w < workers; ++w) {
      if (farther(part[w], best)) best = part[w];
    }
    c = best.idx;
  }
}

}  // namespace

void greedy_f16(const uint16_t* x, size_t n, size_t d, size_t k, size_t first, const Options& options,
                Interrupt& interrupt, int64_t* out) {
  greedy(x, n, d, k, first, options, interrupt, out);
}

void greedy_f32(const float* x, size_t n, size_t d, size_t k, size_t first, const Options& options,
                Interrupt& interrupt, int64_t* out) {
  greedy(x, n, d, k, first, options, interrupt, out);
}

void to_f16(const float* src, size_t count, unsigned threads, bool simd, uint16_t* dst) {
  const size_t workers = worker_count(threads, count, count);
#ifndef FASTMMEVAL_KCENTER_X86
  (void)simd;
#endif
  run_workers(workers, [&](size_t w) {
    const size_t lo = count * w / workers, hi = count * (w + 1) / workers;
#ifdef FASTMMEVAL_KCENTER_X86
    if (simd && cpu_has_avx2()) {
      to_f16_avx2(src + lo, hi - lo, dst + lo);
      return;
    }
#endif
    for (size_t j = lo; j < hi; ++j) dst[j] = float_to_half(src[j]);
  });
}

const char* simd_path() {
#ifdef FASTMMEVAL_KCENTER_X86
  if (cpu_has_avx2()) return "avx2+f16c+fma";
#endif
  return "portable";
}

}  // namespace fastmmeval::kcenter
