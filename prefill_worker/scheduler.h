#pragma once
// The prefill worker's chunked-prefill scheduler, pure: given the requests
// being prefilled and waiting, and the free KV blocks, it plans one engine
// step of prefill chunks from several requests within a token budget.
//
// No threads, no clock, no engine: the engine thread calls PlanPrefillStep()
// once per step and applies the plan.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/engine/kv_cache.h"

namespace tandem::prefill_worker {

struct PrefillSchedulerConfig {
  int32_t token_budget = 512;  // prompt tokens per step, all chunks together
  int32_t chunk_size = 256;    // max tokens of one request per step
  int32_t max_running = 64;    // requests being prefilled at once
  int32_t block_size = 16;     // tokens per KV block

  // InvalidArgument naming the field (any value <= 0).
  absl::Status Validate() const;
};

struct PrefillSeqView {
  engine::SequenceId id = 0;
  int64_t order = 0;            // arrival order; smaller is older
  int32_t computed_tokens = 0;  // prompt tokens whose KV is present (cache hits included)
  int32_t prompt_tokens = 0;
  int32_t blocks_held = 0;
  bool admitted = false;        // being prefilled; else waiting in the admission queue
};

struct PrefillPlan {
  struct Chunk {
    engine::SequenceId id = 0;
    int32_t num_tokens = 0;
  };
  std::vector<Chunk> chunks;        // batch order: admitted requests oldest first, then new ones
  std::vector<engine::SequenceId> admit;    // waiting requests that start with this step
};

// Rules:
//  1. Admitted requests, oldest first, get min(chunk_size, tokens left,
//     budget left) tokens. Their blocks are always there (rule 2).
//  2. Waiting requests, oldest first, join while fewer than max_running are
//     admitted and budget is left, if the pool can hold their whole prompt
//     on top of what admitted requests still need (so an admitted request
//     never starves for blocks); one that does not fit is skipped, not
//     waited for.
PrefillPlan PlanPrefillStep(const PrefillSchedulerConfig& config,
                            absl::Span<const PrefillSeqView> seqs, int32_t free_blocks);

}  // namespace tandem::prefill_worker
