#pragma once
// The decode worker's iteration-level scheduler, pure: given the sequences
// it knows (decoding, prefilling locally, waiting) and the free KV blocks, it
// plans one engine step: one token for every running decoder that fits,
// prefill chunks (colocated requests and preemption recomputes) in the token
// budget left, which waiting sequences join, and which running sequences to
// preempt (newest first) when the pool cannot hold the next token of all.
//
// No threads, no clock, no engine: the engine thread calls PlanDecodeStep()
// once per step and applies the plan.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/engine/kv_cache.h"

namespace tandem::decode_worker {

struct SchedulerConfig {
  int32_t token_budget = 512;  // tokens per step: decode tokens + prefill chunk tokens
  int32_t max_running = 64;    // admitted sequences (decoding or prefilling)
  int32_t chunk_size = 256;    // max prefill tokens of one sequence per step
  int32_t block_size = 16;     // tokens per KV block

  // InvalidArgument naming the field (any value <= 0).
  absl::Status Validate() const;
};

// What the scheduler needs to know about one sequence.
struct SeqView {
  engine::SequenceId id = 0;
  // Admission order; larger is newer. Preemption takes the newest first; a
  // preempted sequence keeps its order, so it rejoins before newer ones.
  int64_t order = 0;
  // Tokens whose KV the sequence holds.
  int32_t kv_tokens = 0;
  // Tokens known (prompt + generated). total - kv == 1: the sequence decodes
  // (its last sampled token is the step's input); more: it needs a prefill
  // (a colocated prompt or a recompute after preemption) first.
  int32_t total_tokens = 0;
  int32_t blocks_held = 0;  // KV blocks the sequence holds now
  // In the running set. A sequence not admitted waits: a committed import
  // (it holds its prompt's blocks and decodes once admitted), a new colocated
  // request or a preempted one (no blocks; prefills once admitted).
  bool admitted = false;
};

struct StepPlan {
  struct Entry {
    engine::SequenceId id = 0;
    int32_t num_tokens = 0;  // 1 for a decode; the chunk length for a prefill
  };
  // Batch order: decodes (oldest first), then prefill chunks (oldest first).
  std::vector<Entry> entries;
  // Waiting sequences that join the running set with this step (all have an entry).
  std::vector<engine::SequenceId> admit;
  // Admitted sequences to preempt before the step, newest first: free their
  // blocks and requeue them to recompute prompt + generated.
  std::vector<engine::SequenceId> preempt;
  // Sequences the pool can never hold (alone, with every other sequence
  // preempted, the next token still does not fit): fail them.
  std::vector<engine::SequenceId> unservable;
  int32_t new_blocks = 0;  // blocks the planned entries need beyond those held
};

// Blocks a sequence needs to hold `tokens` tokens.
int32_t BlocksFor(int32_t tokens, int32_t block_size);

// Plans one step; `free_blocks` are the blocks allocatable now. Rules, in order:
//  1. Decoders (admitted, total - kv == 1) need BlocksFor(kv + 1) - held
//     blocks. While the decoders' needs exceed the free blocks, the newest
//     admitted sequence is preempted (its blocks count as free). A decoder
//     that does not fit even alone is unservable.
//  2. At most token_budget decoders run (oldest first); the rest skip a step.
//  3. The budget left goes to prefill chunks: admitted prefilling sequences
//     first, then waiting ones (while admitted < max_running), oldest first;
//     a chunk is min(chunk_size, tokens left, budget left), shortened to the
//     blocks left. A waiting import (it holds its blocks) joins as a decoder
//     under rule 1's block test and takes one budget token.
//  4. If nothing at all can run but some sequence is admitted (prefills
//     holding the pool while none can grow), the newest admitted one is
//     preempted until the oldest can progress.
StepPlan PlanDecodeStep(const SchedulerConfig& config, absl::Span<const SeqView> seqs,
                        int32_t free_blocks);

}  // namespace tandem::decode_worker
