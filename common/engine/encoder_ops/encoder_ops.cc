#include "common/engine/encoder_ops/encoder_ops.h"
#include "common/engine/encoder_ops/gemm_bf16.h"

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

}  // namespace tandem::engine::encoder_ops
