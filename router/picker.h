#pragma once
// Worker picking: a pure function of a registry snapshot, the request's
// needs, the router's own in-flight counts and `now`. No I/O, locks or clock
// reads, so the policy is table-tested.
//
// Policy (least load):
//  - decode / colocated: the most free KV blocks after subtracting what this
//    router has already sent there since (estimated), then the fewest
//    running + waiting requests, then the address (stable order);
//  - prefill: the fewest queued prefill tokens (plus this router's in-flight
//    prompt tokens there), then the fewest waiting, then the address;
//  - a worker whose whole KV pool is smaller than the request is skipped;
//  - mode auto: a prefill + decode pair when both exist for the model, else a
//    colocated worker; disaggregated / colocated: that kind only.
//
// Placement kv_aware (RouterConfig::placement, the default) changes how the
// prefill worker (disaggregated) or the colocated worker is chosen when at
// least one eligible worker of that kind holds a prefix of the prompt in its
// prefix cache (PickRequest::cached_prefix_tokens, from the PrefixIndex).
// Each eligible worker then costs, in tokens of prefill work before this
// request's first token:
//
//   cost = (prompt_tokens - cached_tokens)     the part of the prompt it computes
//        + queued_prefill_tokens + local       prompt tokens queued ahead of it
//                                              (its report + this router's
//                                              requests sent since)
//        + block_size * kv_shortfall           colocated only: KV blocks the
//                                              request needs beyond the free
//                                              ones, as tokens of waiting
//
// where kv_shortfall = max(0, BlocksNeeded(prompt + max_tokens) -
// cached_tokens / block_size - (free_kv_blocks - local kv_blocks)), and the
// cheapest wins; equal costs fall back to the least-load order above. So the
// longest cached prefix wins unless the worker's queue is longer than what
// the prefix saves (a worker 5000 queued tokens behind loses a 1000-token
// prefix to an idle one), and a worker without room for the request's KV
// pays for the wait. With no prefix cached anywhere (or placement
// least_load) the choice is least load exactly. Decode workers of a
// disaggregated pair hold no prefix the request can reuse: least load.

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/config.h"
#include "router/registry.h"

namespace tandem::router {

// This router's requests per worker that the worker's last load report may
// not include yet.
struct LocalLoad {
  int32_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t kv_blocks = 0;
};

struct PickRequest {
  std::string model;
  RoutingMode mode = RoutingMode::kAuto;
  int32_t prompt_tokens = 0;
  int32_t max_tokens = 0;
  std::set<std::string> exclude;             // addresses not to use (failed before)
  const std::map<std::string, LocalLoad>* local = nullptr;  // by address; may be null
  Placement placement = Placement::kKvAware;
  // Prompt tokens each worker's prefix cache holds (PrefixIndex::
  // CachedPrefixTokens), by address; absent = none; may be null.
  const std::map<std::string, int32_t>* cached_prefix_tokens = nullptr;
};

struct RouteDecision {
  bool colocated = false;
  const WorkerInfo* prefill = nullptr;  // null when colocated
  const WorkerInfo* decode = nullptr;   // the colocated worker when colocated
  // Prompt tokens the chosen prefill (or colocated) worker's prefix cache
  // holds by the router's index (0 when none, or placement least_load).
  int32_t expected_cached_tokens = 0;
};

// UNAVAILABLE naming the model and what is missing ("no live decode worker
// for model 'x' (2 prefill live)") when nothing fits.
absl::StatusOr<RouteDecision> PickRoute(const RegistrySnapshot& snapshot,
                                        const PickRequest& request, absl::Time now);

// KV blocks a request of this size needs on a worker with `block_size`
// tokens per block (0 when the block size is unknown).
int64_t BlocksNeeded(int32_t prompt_tokens, int32_t max_tokens, int32_t block_size);

}  // namespace tandem::router
