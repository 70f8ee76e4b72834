#pragma once
// The router's Prometheus metrics, declared once at startup. Hot paths hold
// these handles; per-(model, code) series are created on first use (a
// bounded set: models come from config, codes from absl::StatusCode).
//
// Thread-safe.

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/metrics.h"
#include "router/registry.h"

namespace tandem::router {

class RouterMetrics {
 public:
  explicit RouterMetrics(base::MetricsRegistry& registry);

  // tandem_router_requests_total{model,code}
  void CountRequest(const std::string& model, absl::StatusCode code);
  // tandem_router_route_decisions_total{model,route}: route is "disaggregated",
  // "colocated", "retry" or "none" (no worker fitted).
  void CountRoute(const std::string& model, const std::string& route);
  base::Histogram* ttft(const std::string& model);
  base::Histogram* tpot(const std::string& model);
  base::Histogram* e2e(const std::string& model);
  // tandem_semantic_cache_hits_total{model,tier} (hit) or
  // tandem_semantic_cache_misses_total{model,tier}: tier "exact" or "semantic"
  // (a miss: the last tier consulted).
  void CountCache(const std::string& model, const std::string& tier, bool hit);
  // Exports `model`'s four cache series at 0 (hits and misses, both tiers),
  // so dashboards and rate() see them before the first hit.
  void InitCache(const std::string& model);
  // tandem_router_workers_up{role}; also tandem_router_prefix_index_blocks.
  void SetWorkersUp(const RegistrySnapshot& snapshot, absl::Time now);

  base::Gauge* inflight;                  // tandem_router_inflight_requests
  base::Counter* rejected;                // tandem_router_rejected_requests_total (admission)
  base::Counter* worker_failures;         // tandem_router_worker_failures_total
  base::Gauge* prefix_index_blocks;       // tandem_router_prefix_index_blocks (all workers)

  // Admission control (router/admission.h); tenants come from the API keys
  // ("anonymous" with keys off), so the label set stays bounded.
  // tandem_admission_rejections_total{reason,tenant}
  void CountAdmissionRejection(absl::string_view reason, const std::string& tenant);
  // tandem_admission_estimated_ttft_seconds{model}: the estimate of every
  // admitted request; `slo` (admission.max_ttft, 0 = none) is a bucket bound.
  void ObserveAdmittedEstimate(const std::string& model, absl::Duration estimate,
                               absl::Duration slo);
  // tandem_admission_queued_requests{model} (now) and
  // tandem_admission_queued_requests_peak{model} (the most since start), and
  // tandem_admission_prefill_rate_tokens_per_second{model} (measured), from
  // the queue's state at `version` (ignored when older than one already set:
  // threads race to report).
  void SetAdmissionQueue(const std::string& model, int32_t queued, int32_t peak, double rate,
                         uint64_t version);

 private:
  base::Histogram* ModelHistogram(std::map<std::string, base::Histogram*>& cache, const std::string& name,
                            const std::string& help, const std::string& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  base::MetricsRegistry& registry_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, int>, base::Counter*> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, base::Counter*> routes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, base::Histogram*> ttft_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, base::Histogram*> tpot_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, base::Histogram*> e2e_ ABSL_GUARDED_BY(mu_);
  base::Counter* CacheCounter(const std::string& model, const std::string& tier, bool hit);
  std::map<std::tuple<bool, std::string, std::string>, base::Counter*> cache_counters_
      ABSL_GUARDED_BY(mu_);
  struct AdmissionGauges {
    base::Gauge* queued = nullptr;
    base::Gauge* peak = nullptr;
    base::Gauge* rate = nullptr;
    uint64_t version = 0;
  };
  std::map<std::pair<std::string, std::string>, base::Counter*> admission_rejections_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, base::Histogram*> admission_estimate_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, AdmissionGauges> admission_queue_ ABSL_GUARDED_BY(mu_);
  base::Gauge* up_prefill_;
  base::Gauge* up_decode_;
  base::Gauge* up_colocated_;
};

}  // namespace tandem::router
