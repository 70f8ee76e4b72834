#include "prefill_worker/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::prefill_worker {
namespace {

int32_t BlocksFor(int32_t tokens, int32_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

}  // namespace

absl::Status PrefillSchedulerConfig::Validate() const {
  auto bad = [](absl::string_view field, int32_t v) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill scheduler: ", field, " must be > 0, got ", v));
  };
  if (token_budget <= 0) return bad("token_budget", token_budget);
  if (chunk_size <= 0) return bad("chunk_size", chunk_size);
  if (max_running <= 0) return bad("max_running", max_running);
  if (block_size <= 0) return bad("block_size", block_size);
  return absl::OkStatus();
}

PrefillPlan PlanPrefillStep(const PrefillSchedulerConfig& cfg,
                            absl::Span<const PrefillSeqView> seqs, int32_t free_blocks) {
  std::vector<const PrefillSeqView*> admitted;
  std::vector<const PrefillSeqView*> waiting;
  for (const PrefillSeqView& s : seqs) {
    (s.admitted ? admitted : waiting).push_back(&s);
  }
  auto by_order = [](const PrefillSeqView* a, const PrefillSeqView* b) {
    return a->order < b->order;
  };
  std::sort(admitted.begin(), admitted.end(), by_order);
  std::sort(waiting.begin(), waiting.end(), by_order);

  PrefillPlan plan;
  int32_t budget = cfg.token_budget;
  // Blocks not promised to admitted requests.
  int32_t spare = free_blocks;
  for (const PrefillSeqView* s : admitted) {
    spare -= std::max(0, BlocksFor(s->prompt_tokens, cfg.block_size) - s->blocks_held);
  }
  for (const PrefillSeqView* s : admitted) {
    const int32_t n = std::min({cfg.chunk_size, s->prompt_tokens - s->computed_tokens, budget});
    if (n <= 0) {
      continue;
    }
    plan.chunks.push_back({s->id, n});
    budget -= n;
  }
  int32_t running = static_cast<int32_t>(admitted.size());
  for (const PrefillSeqView* s : waiting) {
    if (running >= cfg.max_running || budget <= 0) {
      break;
    }
    const int32_t need = std::max(0, BlocksFor(s->prompt_tokens, cfg.block_size) - s->blocks_held);
    if (need > spare) {
      continue;
    }
    const int32_t n = std::min({cfg.chunk_size, s->prompt_tokens - s->computed_tokens, budget});
    if (n <= 0) {
      continue;
    }
    spare -= need;
    plan.chunks.push_back({s->id, n});
    plan.admit.push_back(s->id);
    budget -= n;
    ++running;
  }
  return plan;
}

}  // namespace tandem::prefill_worker
