#include "common/engine/encoder_ops/encoder_ops.h"
#include "common/engine/encoder_ops/gemm_bf16.h"

#include <atomic>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
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

// CPUID says AMX-TILE and AMX-BF16, XCR0 has the tile state enabled, and Linux
// grants it to this process (without the grant the first tile instruction
// faults: SIGILL).
bool AmxUsable() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(1, 0, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) {
      return false;  // no OSXSAVE: XGETBV would fault
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
    if ((d & kAmxBf16) == 0 || (d & kAmxTile) == 0) return false;
    uint32_t xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    constexpr uint32_t kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
    if ((xcr0_lo & kTileState) != kTileState) return false;
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
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
