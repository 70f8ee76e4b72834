// encoder_ops.inc compiled for the avx2 path (flags in common/engine/CMakeLists.txt).

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/engine/encoder_ops/encoder_ops.h"

namespace tandem::engine::encoder_ops::avx2 {
#include "common/engine/encoder_ops/encoder_ops.inc"
}  // namespace tandem::engine::encoder_ops::avx2
