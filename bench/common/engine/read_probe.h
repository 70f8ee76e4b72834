#pragma once
// The memory read-bandwidth probe shared by engine_benchmark
// (BM_MemoryReadBandwidth, the bound compare_engine.sh divides by) and
// kernels_benchmark (BM_MemoryBandwidth): AVX2 sums over a buffer in
// transparent huge pages, as the load-time weight copy is
// (engine::WeightMatrix). On the Xeon with AMX a scalar sum over 4 KiB pages
// read 9.4 GB/s at 1 thread where this reads 16.5, while F16 decode streamed
// 19 (docs/benchmarks.md).

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "common/base/huge_pages.h"

namespace tandem::engine::bench {

// How the probe streams: plain loads (the hardware prefetchers alone), or
// with a software prefetch 12 KiB ahead per line into L1 (PREFETCHT0) or L2
// (PREFETCHT1), as the decode kernels do (engine::StreamPrefetch).
enum class ProbeMode { kPlain = 0, kPrefetchL1 = 1, kPrefetchL2 = 2 };
inline constexpr int kProbeModes = 3;
inline constexpr const char* kProbeModeNames[kProbeModes] = {"plain", "prefetch l1", "prefetch l2"};

// `bytes` (a multiple of 2 MiB) of 64-bit words 0, 1, 2, ... in one
// base::HugePageMapping (2 MiB-aligned, MADV_HUGEPAGE, as the arena the
// weight copies come from), every page touched.
class HugePageWords {
 public:
  explicit HugePageWords(size_t bytes) : map_(base::HugePageMapping::Map(bytes).value()) {
    uint64_t* w = get();
    for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) w[i] = i;
  }
  uint64_t* get() const { return reinterpret_cast<uint64_t*>(map_.data()); }

 private:
  base::HugePageMapping map_;
};

// Sums [p, p + n) 64-bit words (n a multiple of 16) with AVX2 loads, two per
// 64-byte line, into four independent accumulators (the loads, not the adds,
// bound it). Every machine we run on has AVX2.
__attribute__((target("avx2"))) inline uint64_t SumWords(const uint64_t* p, size_t n,
                                                         ProbeMode mode) {
  constexpr size_t kAhead = 12 * 1024 / sizeof(uint64_t);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 16 <= n; i += 16) {  // two lines per step
    if (mode == ProbeMode::kPrefetchL1) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 8 + kAhead), _MM_HINT_T0);
    } else if (mode == ProbeMode::kPrefetchL2) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kAhead), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 8 + kAhead), _MM_HINT_T1);
    }
    const auto* v = reinterpret_cast<const __m256i*>(p + i);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(v));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + 1));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + 2));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + 3));
  }
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return t[0] + t[1] + t[2] + t[3];
}

}  // namespace tandem::engine::bench
