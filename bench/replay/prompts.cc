#include "bench/replay/prompts.h"

namespace tandem::replay {}  // namespace tandem::replay
