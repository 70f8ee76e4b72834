#pragma once
// The router's Prometheus metrics, declared once at startup. Hot paths hold
// these handles; per-(model, code) series are created on first use (a
// bounded set: models come from config, codes from absl::StatusCode).
//
// Thread-safe.

#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "router/registry.h"

namespace tandem::router {

class RouterMetrics {
 public:
  explicit RouterMetrics(MetricsRegistry& registry);

  // tandem_router_requests_total{model,code}
  void CountRequest(const std::string& model, absl::StatusCode code);
  // tandem_router_route_decisions_total{model,route}: route is "disaggregated",
  // "colocated", "retry" or "none" (no worker fitted).
  void CountRoute(const std::string& model, const std::string& route);
  Histogram* ttft(const std::string& model);
  Histogram* tpot(const std::string& model);
  Histogram* e2e(const std::string& model);
  // tandem_router_workers_up{role}
  void SetWorkersUp(const RegistrySnapshot& snapshot, absl::Time now);

  Gauge* inflight;                  // tandem_router_inflight_requests
  Counter* rejected;                // tandem_router_rejected_requests_total (admission)
  Counter* worker_failures;         // tandem_router_worker_failures_total

 private:
  Histogram* ModelHistogram(std::map<std::string, Histogram*>& cache, const std::string& name,
                            const std::string& help, const std::string& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  MetricsRegistry& registry_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, int>, Counter*> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, Counter*> routes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Histogram*> ttft_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Histogram*> tpot_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Histogram*> e2e_ ABSL_GUARDED_BY(mu_);
  Gauge* up_prefill_;
  Gauge* up_decode_;
  Gauge* up_colocated_;
};

}  // namespace tandem::router
