#include "common/engine/encoder_ops/encoder_ops.h"

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

}  // namespace tandem::engine::encoder_ops
