#include "bench/replay/workload.h"

#include "absl/status/status.h"

namespace tandem::replay {

absl::StatusOr<Workload> BuildWorkload(const WorkloadOptions& options,
                                       const engine::Tokenizer& tokenizer) {
  (void)options;
  (void)tokenizer;
  return absl::UnimplementedError("BuildWorkload: not yet");
}

}  // namespace tandem::replay
