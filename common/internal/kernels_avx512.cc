#include "common/internal/kernels_internal.h"

namespace tandem::internal {

void MatMulAvx512(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool,
                  bool vnni) {
  MatMulAvx2(w, x, m, y, pool);
}

}  // namespace tandem::internal
