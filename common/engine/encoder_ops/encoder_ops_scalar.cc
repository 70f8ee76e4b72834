// encoder_ops.inc compiled for the scalar path (flags in common/engine/CMakeLists.txt).

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/engine/encoder_ops/encoder_ops.h"

namespace tandem::engine::encoder_ops::scalar {
#include "common/engine/encoder_ops/encoder_ops.inc"
}  // namespace tandem::engine::encoder_ops::scalar
