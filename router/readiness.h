#pragma once
// Readiness: can the router serve each configured model from the workers it
// sees live right now? Pure functions over a RegistrySnapshot; the HTTP front
// (/health/ready, /health) and the gRPC front (grpc.health.v1) report them.
//
// A model is ready when the routing mode has a live route for it: a live
// prefill and a live decode worker announcing its worker model id
// (disaggregated), a live colocated one (colocated), either (auto). Request
// fit (context length, KV blocks) is the picker's business, not readiness'.

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "router/config.h"
#include "router/model_catalog.h"
#include "router/registry.h"

namespace tandem::router {

struct ModelReadiness {
  std::string model;    // the served name clients use
  bool ready = false;
  std::string reason;   // why not, e.g. "no live decode worker (mode disaggregated)"; "" when ready
  int prefill = 0;      // live workers announcing this model, by role
  int decode = 0;
  int colocated = 0;
};

// One entry per catalog model, in catalog order.
std::vector<ModelReadiness> CheckReadiness(const ModelCatalog& catalog, RoutingMode mode,
                                           const RegistrySnapshot& snapshot, absl::Time now);
bool AllReady(const std::vector<ModelReadiness>& models);

}  // namespace tandem::router
