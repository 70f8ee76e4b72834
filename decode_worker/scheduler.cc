#include "decode_worker/scheduler.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tandem::decode_worker {
namespace {

bool IsDecoder(const SeqView& s) { return s.total_tokens - s.kv_tokens == 1; }

// One planning pass with `forced` sequences preempted up front (rule 4).
StepPlan PlanOnce(const SchedulerConfig& cfg, absl::Span<const SeqView> seqs, int32_t free_blocks,
                  const std::vector<engine::SequenceId>& forced) {
  StepPlan plan;
  std::vector<const SeqView*> admitted;
  std::vector<const SeqView*> waiting;
  for (const SeqView& s : seqs) {
    (s.admitted ? admitted : waiting).push_back(&s);
  }
  auto by_order = [](const SeqView* a, const SeqView* b) { return a->order < b->order; };
  std::sort(admitted.begin(), admitted.end(), by_order);
  std::sort(waiting.begin(), waiting.end(), by_order);

  int32_t free_left = free_blocks;
  auto drop = [&](engine::SequenceId id) {
    auto it = std::find_if(admitted.begin(), admitted.end(),
                           [id](const SeqView* s) { return s->id == id; });
    if (it != admitted.end()) {
      free_left += (*it)->blocks_held;
      admitted.erase(it);
    }
  };
  for (engine::SequenceId id : forced) {
    plan.preempt.push_back(id);
    drop(id);
  }

  auto decode_need = [&](const SeqView& s) {
    return std::max(0, BlocksFor(s.kv_tokens + 1, cfg.block_size) - s.blocks_held);
  };

  // Rule 1: every decoder's next token must fit; preempt the newest until it does.
  while (true) {
    int32_t need = 0;
    for (const SeqView* s : admitted) {
      if (IsDecoder(*s)) need += decode_need(*s);
    }
    if (need <= free_left) {
      break;
    }
    const SeqView* newest = admitted.back();
    if (admitted.size() == 1) {
      // Alone and still too big: no preemption can help.
      plan.unservable.push_back(newest->id);
    } else {
      plan.preempt.push_back(newest->id);
    }
    drop(newest->id);
  }

  // Rule 2: decoders, oldest first, within the budget.
  int32_t budget_left = cfg.token_budget;
  for (const SeqView* s : admitted) {
    if (!IsDecoder(*s) || budget_left == 0) {
      continue;
    }
    const int32_t need = decode_need(*s);
    plan.entries.push_back({s->id, 1});
    plan.new_blocks += need;
    free_left -= need;
    --budget_left;
  }

  // Rule 3: prefill chunks of admitted sequences, then waiting ones.
  // Returns the chunk length that fits (0: none).
  auto chunk_for = [&](const SeqView& s) {
    int32_t n = std::min({cfg.chunk_size, s.total_tokens - s.kv_tokens, budget_left});
    if (n <= 0) {
      return 0;
    }
    const int32_t max_tokens = (s.blocks_held + free_left) * cfg.block_size - s.kv_tokens;
    return std::max(0, std::min(n, max_tokens));
  };
  auto add_chunk = [&](const SeqView& s, int32_t n) {
    const int32_t need = std::max(0, BlocksFor(s.kv_tokens + n, cfg.block_size) - s.blocks_held);
    plan.entries.push_back({s.id, n});
    plan.new_blocks += need;
    free_left -= need;
    budget_left -= n;
  };
  for (const SeqView* s : admitted) {
    if (IsDecoder(*s) || budget_left == 0) {
      continue;
    }
    const int32_t n = chunk_for(*s);
    if (n > 0) {
      add_chunk(*s, n);
    }
  }
  int32_t num_admitted = static_cast<int32_t>(admitted.size());
  for (const SeqView* s : waiting) {
    if (num_admitted >= cfg.max_running || budget_left == 0) {
      break;
    }
    if (IsDecoder(*s)) {
      const int32_t need = decode_need(*s);
      if (need > free_left) {
        continue;
      }
      plan.entries.push_back({s->id, 1});
      plan.admit.push_back(s->id);
      plan.new_blocks += need;
      free_left -= need;
      --budget_left;
      ++num_admitted;
      continue;
    }
    // A prefill joins only if the pool can hold its whole remaining prompt
    // now, so admitted prefills rarely starve each other of blocks.
    const int32_t whole = BlocksFor(s->total_tokens, cfg.block_size) - s->blocks_held;
    if (whole > free_left) {
      continue;
    }
    const int32_t n = chunk_for(*s);
    if (n <= 0) {
      continue;
    }
    add_chunk(*s, n);
    plan.admit.push_back(s->id);
    ++num_admitted;
  }
  return plan;
}

}  // namespace

absl::Status SchedulerConfig::Validate() const {
  auto bad = [](absl::string_view field, int32_t v) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: ", field, " must be > 0, got ", v));
  };
  if (token_budget <= 0) return bad("token_budget", token_budget);
  if (max_running <= 0) return bad("max_running", max_running);
  if (chunk_size <= 0) return bad("chunk_size", chunk_size);
  if (block_size <= 0) return bad("block_size", block_size);
  return absl::OkStatus();
}

int32_t BlocksFor(int32_t tokens, int32_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

StepPlan PlanDecodeStep(const SchedulerConfig& config, absl::Span<const SeqView> seqs,
                        int32_t free_blocks) {
  std::vector<engine::SequenceId> forced;
  while (true) {
    StepPlan plan = PlanOnce(config, seqs, free_blocks, forced);
    if (!plan.entries.empty()) {
      return plan;
    }
    // Rule 4: nothing runs; preempt the newest admitted sequence still in the
    // running set, if that leaves at least one to progress.
    absl::flat_hash_set<engine::SequenceId> gone(plan.preempt.begin(), plan.preempt.end());
    gone.insert(plan.unservable.begin(), plan.unservable.end());
    const SeqView* newest = nullptr;
    int remaining = 0;
    for (const SeqView& s : seqs) {
      if (!s.admitted || gone.contains(s.id)) {
        continue;
      }
      ++remaining;
      if (newest == nullptr || s.order > newest->order) {
        newest = &s;
      }
    }
    if (remaining < 2) {
      // One admitted sequence that cannot grow while nothing else holds
      // blocks: the pool is too small for it.
      bool others_hold = false;
      for (const SeqView& s : seqs) {
        others_hold |= !s.admitted && s.blocks_held > 0;
      }
      if (remaining == 1 && !others_hold) {
        plan.unservable.push_back(newest->id);
      }
      return plan;
    }
    forced.push_back(newest->id);
  }
}

}  // namespace tandem::decode_worker
