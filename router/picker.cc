#include "router/picker.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace tandem::router {
namespace {

LocalLoad LocalFor(const PickRequest& r, const std::string& address) {
  if (r.local == nullptr) {
    return {};
  }
  auto it = r.local->find(address);
  return it == r.local->end() ? LocalLoad{} : it->second;
}

bool Eligible(const RegistrySnapshot& snap, const WorkerInfo& w, WorkerRole role,
              const PickRequest& r, absl::Time now) {
  if (w.desc.role != role || w.desc.model != r.model || !snap.IsLive(w, now) ||
      r.exclude.count(w.address) > 0) {
    return false;
  }
  if (role != WorkerRole::kPrefill) {
    const int64_t need = BlocksNeeded(r.prompt_tokens, r.max_tokens, w.desc.kv_block_size);
    if (need > 0 && w.desc.load.total_kv_blocks > 0 && need > w.desc.load.total_kv_blocks) {
      return false;  // could never fit
    }
  }
  if (w.desc.context_length > 0 &&
      int64_t{r.prompt_tokens} + r.max_tokens > w.desc.context_length) {
    return false;
  }
  return true;
}

// Decode / colocated: larger is better.
auto DecodeScore(const WorkerInfo& w, const PickRequest& r) {
  const LocalLoad local = LocalFor(r, w.address);
  const int64_t free_blocks = int64_t{w.desc.load.free_kv_blocks} - local.kv_blocks;
  const int64_t busy = int64_t{w.desc.load.running_requests} + w.desc.load.waiting_requests +
                       local.requests;
  return std::make_tuple(free_blocks, -busy);
}

// Prefill: smaller is better.
auto PrefillCost(const WorkerInfo& w, const PickRequest& r) {
  const LocalLoad local = LocalFor(r, w.address);
  return std::make_tuple(w.desc.load.queued_prefill_tokens + local.prompt_tokens,
                         int64_t{w.desc.load.waiting_requests} + local.requests);
}

int32_t CachedFor(const PickRequest& r, const std::string& address) {
  if (r.placement != Placement::kKvAware || r.cached_prefix_tokens == nullptr) {
    return 0;
  }
  auto it = r.cached_prefix_tokens->find(address);
  return it == r.cached_prefix_tokens->end() ? 0 : it->second;
}

// The KV-aware cost (picker.h), in tokens of prefill work.
int64_t KvAwareCost(const WorkerInfo& w, const PickRequest& r) {
  const LocalLoad local = LocalFor(r, w.address);
  const int32_t cached = std::min(CachedFor(r, w.address), r.prompt_tokens);
  int64_t cost =
      int64_t{r.prompt_tokens} - cached + w.desc.load.queued_prefill_tokens + local.prompt_tokens;
  const int32_t bs = w.desc.kv_block_size;
  if (w.desc.role == WorkerRole::kColocated && bs > 0) {
    const int64_t need = BlocksNeeded(r.prompt_tokens, r.max_tokens, bs) - cached / bs;
    const int64_t free_blocks = int64_t{w.desc.load.free_kv_blocks} - local.kv_blocks;
    cost += int64_t{bs} * std::max<int64_t>(0, need - free_blocks);
  }
  return cost;
}

// The best eligible worker of `role`: KV-aware cost first when placement is
// kv_aware and some eligible worker holds a prefix, then `better` (least
// load), then the address (workers are sorted by it: ties keep the first).
template <typename Better>
const WorkerInfo* Best(const RegistrySnapshot& snap, WorkerRole role, const PickRequest& r,
                       absl::Time now, Better better, int32_t* cached) {
  bool kv_aware = false;
  if (role != WorkerRole::kDecode) {
    for (const WorkerInfo& w : snap.workers) {
      kv_aware = kv_aware || (CachedFor(r, w.address) > 0 && Eligible(snap, w, role, r, now));
    }
  }
  const WorkerInfo* best = nullptr;
  int64_t best_cost = 0;
  for (const WorkerInfo& w : snap.workers) {
    if (!Eligible(snap, w, role, r, now)) {
      continue;
    }
    const int64_t cost = kv_aware ? KvAwareCost(w, r) : 0;
    if (best == nullptr || cost < best_cost || (cost == best_cost && better(w, *best))) {
      best = &w;
      best_cost = cost;
    }
  }
  *cached = best != nullptr && kv_aware ? CachedFor(r, best->address) : 0;
  return best;
}

const WorkerInfo* BestDecode(const RegistrySnapshot& snap, WorkerRole role, const PickRequest& r,
                             absl::Time now, int32_t* cached) {
  return Best(
      snap, role, r, now,
      [&r](const WorkerInfo& a, const WorkerInfo& b) {
        return DecodeScore(a, r) > DecodeScore(b, r);
      },
      cached);
}

const WorkerInfo* BestPrefill(const RegistrySnapshot& snap, const PickRequest& r, absl::Time now,
                              int32_t* cached) {
  return Best(
      snap, WorkerRole::kPrefill, r, now,
      [&r](const WorkerInfo& a, const WorkerInfo& b) {
        return PrefillCost(a, r) < PrefillCost(b, r);
      },
      cached);
}

}  // namespace

int64_t BlocksNeeded(int32_t prompt_tokens, int32_t max_tokens, int32_t block_size) {
  if (block_size <= 0) {
    return 0;
  }
  const int64_t tokens = int64_t{prompt_tokens} + max_tokens;
  return (tokens + block_size - 1) / block_size;
}

absl::StatusOr<RouteDecision> PickRoute(const RegistrySnapshot& snapshot,
                                        const PickRequest& request, absl::Time now) {
  RouteDecision d;
  if (request.mode != RoutingMode::kColocated) {
    int32_t cached = 0, unused = 0;
    const WorkerInfo* p = BestPrefill(snapshot, request, now, &cached);
    const WorkerInfo* dw = BestDecode(snapshot, WorkerRole::kDecode, request, now, &unused);
    if (p != nullptr && dw != nullptr) {
      d.prefill = p;
      d.decode = dw;
      d.expected_cached_tokens = cached;
      return d;
    }
    if (request.mode == RoutingMode::kDisaggregated) {
      return absl::UnavailableError(absl::StrCat(
          "no live ", p == nullptr ? "prefill" : "decode", " worker for model '", request.model,
          "' that fits ", request.prompt_tokens, " + ", request.max_tokens,
          " tokens (mode disaggregated; live: ",
          snapshot.CountLive(WorkerRole::kPrefill, now), " prefill, ",
          snapshot.CountLive(WorkerRole::kDecode, now), " decode)"));
    }
  }
  int32_t cached = 0;
  const WorkerInfo* c = BestDecode(snapshot, WorkerRole::kColocated, request, now, &cached);
  if (c != nullptr) {
    d.colocated = true;
    d.decode = c;
    d.expected_cached_tokens = cached;
    return d;
  }
  return absl::UnavailableError(absl::StrCat(
      "no live worker for model '", request.model, "' that fits ", request.prompt_tokens, " + ",
      request.max_tokens, " tokens (mode ", RoutingModeName(request.mode), "; live: ",
      snapshot.CountLive(WorkerRole::kPrefill, now), " prefill, ",
      snapshot.CountLive(WorkerRole::kDecode, now), " decode, ",
      snapshot.CountLive(WorkerRole::kColocated, now), " colocated; ", snapshot.workers.size(),
      " known)"));
}

}  // namespace tandem::router
