#include "common/engine/encoder_ops/encoder_ops.h"
#include "common/engine/encoder_ops/gemm_bf16.h"

#include <atomic>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace tandem::engine::encoder_ops {
namespace scalar {
extern const Table kTable;
}
namespace avx2 {
extern const Table kTable;
}
namespace avx512 {
extern const Table kTable;
}

const Table& OpsFor(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kScalar:
      return scalar::kTable;
    case Isa::kAvx2:
      return avx2::kTable;
    case Isa::kAvx512:
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Amx:
      return avx512::kTable;
  }
#endif
  (void)isa;
  return scalar::kTable;
}

const Table& Ops() { return OpsFor(ActiveIsa()); }

bool Bf16Supported() {
#if defined(__x86_64__)
  return ActiveIsa() >= Isa::kAvx512 && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

namespace {

std::atomic<bool> amx_enabled{true};

// CPUID says AMX-BF16 and the kernels' check grants the tile state
// (AmxTileStateGranted: AMX-TILE, XCR0, arch_prctl).
bool AmxUsable() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    constexpr unsigned kAmxBf16 = 1u << 22;
    return (d & kAmxBf16) != 0 && AmxTileStateGranted();
  }();
  return usable;
#else
  return false;
#endif
}

}  // namespace

bool AmxSupported() {
  return amx_enabled.load(std::memory_order_relaxed) && Bf16Supported() && AmxUsable();
}

void SetAmxEnabled(bool enabled) { amx_enabled.store(enabled, std::memory_order_relaxed); }

}  // namespace tandem::engine::encoder_ops
