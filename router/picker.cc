#include "router/picker.h"

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

const WorkerInfo* BestDecode(const RegistrySnapshot& snap, WorkerRole role, const PickRequest& r,
                             absl::Time now) {
  const WorkerInfo* best = nullptr;
  for (const WorkerInfo& w : snap.workers) {  // sorted by address: ties keep the first
    if (!Eligible(snap, w, role, r, now)) {
      continue;
    }
    if (best == nullptr || DecodeScore(w, r) > DecodeScore(*best, r)) {
      best = &w;
    }
  }
  return best;
}

const WorkerInfo* BestPrefill(const RegistrySnapshot& snap, const PickRequest& r, absl::Time now) {
  const WorkerInfo* best = nullptr;
  for (const WorkerInfo& w : snap.workers) {
    if (!Eligible(snap, w, WorkerRole::kPrefill, r, now)) {
      continue;
    }
    if (best == nullptr || PrefillCost(w, r) < PrefillCost(*best, r)) {
      best = &w;
    }
  }
  return best;
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
    const WorkerInfo* p = BestPrefill(snapshot, request, now);
    const WorkerInfo* dw = BestDecode(snapshot, WorkerRole::kDecode, request, now);
    if (p != nullptr && dw != nullptr) {
      d.prefill = p;
      d.decode = dw;
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
  const WorkerInfo* c = BestDecode(snapshot, WorkerRole::kColocated, request, now);
  if (c != nullptr) {
    d.colocated = true;
    d.decode = c;
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
