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
};

struct RouteDecision {
  bool colocated = false;
  const WorkerInfo* prefill = nullptr;  // null when colocated
  const WorkerInfo* decode = nullptr;   // the colocated worker when colocated
};

// UNAVAILABLE naming the model and what is missing ("no live decode worker
// for model 'x' (2 prefill live)") when nothing fits.
absl::StatusOr<RouteDecision> PickRoute(const RegistrySnapshot& snapshot,
                                        const PickRequest& request, absl::Time now);

// KV blocks a request of this size needs on a worker with `block_size`
// tokens per block (0 when the block size is unknown).
int64_t BlocksNeeded(int32_t prompt_tokens, int32_t max_tokens, int32_t block_size);

}  // namespace tandem::router
