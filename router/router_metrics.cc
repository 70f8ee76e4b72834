#include "router/router_metrics.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace tandem::router {

RouterMetrics::RouterMetrics(base::MetricsRegistry& registry) : registry_(registry) {
  inflight = registry.GetGauge("tandem_router_inflight_requests",
                               "Requests admitted and not finished.");
  rejected = registry.GetCounter("tandem_router_rejected_requests_total",
                                 "Requests refused by admission control (429).");
  worker_failures = registry.GetCounter(
      "tandem_router_worker_failures_total",
      "Worker calls that failed (stream broken, unavailable, heartbeat lost).");
  const char* up_help = "Workers in rotation (live Watch stream), by role.";
  up_prefill_ = registry.GetGauge("tandem_router_workers_up", up_help, {{"role", "prefill"}});
  up_decode_ = registry.GetGauge("tandem_router_workers_up", up_help, {{"role", "decode"}});
  up_colocated_ = registry.GetGauge("tandem_router_workers_up", up_help, {{"role", "colocated"}});
  prefix_index_blocks = registry.GetGauge(
      "tandem_router_prefix_index_blocks",
      "KV blocks the workers report holding in their prefix caches, summed over workers "
      "(KV-aware placement's index).");
}

void RouterMetrics::CountRequest(const std::string& model, absl::StatusCode code) {
  base::Counter* c;
  {
    absl::MutexLock lock(&mu_);
    base::Counter*& slot = requests_[{model, static_cast<int>(code)}];
    if (slot == nullptr) {
      slot = registry_.GetCounter(
          "tandem_router_requests_total", "Finished requests by model and status code.",
          {{"model", model}, {"code", absl::AsciiStrToLower(absl::StatusCodeToString(code))}});
    }
    c = slot;
  }
  c->Increment();
}

void RouterMetrics::CountRoute(const std::string& model, const std::string& route) {
  base::Counter* c;
  {
    absl::MutexLock lock(&mu_);
    base::Counter*& slot = routes_[{model, route}];
    if (slot == nullptr) {
      slot = registry_.GetCounter("tandem_router_route_decisions_total",
                                  "Routing decisions by model and route kind.",
                                  {{"model", model}, {"route", route}});
    }
    c = slot;
  }
  c->Increment();
}

void RouterMetrics::InitCache(const std::string& model) {
  for (const bool hit : {true, false}) {
    for (const char* tier : {"exact", "semantic"}) {
      CacheCounter(model, tier, hit);
    }
  }
}

void RouterMetrics::CountCache(const std::string& model, const std::string& tier, bool hit) {
  CacheCounter(model, tier, hit)->Increment();
}

base::Counter* RouterMetrics::CacheCounter(const std::string& model, const std::string& tier,
                                           bool hit) {
  base::Counter* counter;
  {
    absl::MutexLock lock(&mu_);
    auto [it, added] = cache_counters_.try_emplace({hit, model, tier}, nullptr);
    if (added) {
      it->second = registry_.GetCounter(
          hit ? "tandem_semantic_cache_hits_total" : "tandem_semantic_cache_misses_total",
          hit ? "Requests answered from the response cache, by model and tier."
              : "Cacheable requests the response cache could not answer, by model and the "
                "last tier consulted.",
          {{"model", model}, {"tier", tier}});
    }
    counter = it->second;
  }
  return counter;
}

base::Histogram* RouterMetrics::ModelHistogram(std::map<std::string, base::Histogram*>& cache,
                                         const std::string& name, const std::string& help,
                                         const std::string& model) {
  base::Histogram*& slot = cache[model];
  if (slot == nullptr) {
    slot = registry_.GetHistogram(name, help, base::LatencyBuckets(), {{"model", model}});
  }
  return slot;
}

base::Histogram* RouterMetrics::ttft(const std::string& model) {
  absl::MutexLock lock(&mu_);
  return ModelHistogram(ttft_, "tandem_router_time_to_first_token_seconds",
                        "Time from admission to the first token sent to the client.", model);
}

base::Histogram* RouterMetrics::tpot(const std::string& model) {
  absl::MutexLock lock(&mu_);
  return ModelHistogram(tpot_, "tandem_router_time_per_output_token_seconds",
                        "Mean time between output tokens after the first, per request.", model);
}

base::Histogram* RouterMetrics::e2e(const std::string& model) {
  absl::MutexLock lock(&mu_);
  return ModelHistogram(e2e_, "tandem_router_request_duration_seconds",
                        "Time from admission to the end of the request.", model);
}

void RouterMetrics::SetWorkersUp(const RegistrySnapshot& snapshot, absl::Time now) {
  up_prefill_->Set(snapshot.CountLive(WorkerRole::kPrefill, now));
  up_decode_->Set(snapshot.CountLive(WorkerRole::kDecode, now));
  up_colocated_->Set(snapshot.CountLive(WorkerRole::kColocated, now));
  prefix_index_blocks->Set(
      snapshot.prefixes == nullptr ? 0 : static_cast<double>(snapshot.prefixes->total_blocks()));
}

void RouterMetrics::CountAdmissionRejection(absl::string_view reason, const std::string& tenant) {
  base::Counter* c;
  {
    absl::MutexLock lock(&mu_);
    base::Counter*& slot = admission_rejections_[{std::string(reason), tenant}];
    if (slot == nullptr) {
      slot = registry_.GetCounter(
          "tandem_admission_rejections_total",
          "Requests refused by admission control, by limit and tenant (router/admission.h).",
          {{"reason", std::string(reason)}, {"tenant", tenant}});
    }
    c = slot;
  }
  c->Increment();
}

void RouterMetrics::ObserveAdmittedEstimate(const std::string& model, absl::Duration estimate,
                                            absl::Duration slo) {
  base::Histogram* h;
  {
    absl::MutexLock lock(&mu_);
    base::Histogram*& slot = admission_estimate_[model];
    if (slot == nullptr) {
      std::vector<double> bounds = base::LatencyBuckets();
      if (slo > absl::ZeroDuration()) {
        const double s = absl::ToDoubleSeconds(slo);
        if (std::find(bounds.begin(), bounds.end(), s) == bounds.end()) {
          bounds.insert(std::upper_bound(bounds.begin(), bounds.end(), s), s);
        }
      }
      slot = registry_.GetHistogram(
          "tandem_admission_estimated_ttft_seconds",
          "Estimated time to first token of each admitted request, at admission.", bounds,
          {{"model", model}});
    }
    h = slot;
  }
  h->Observe(absl::ToDoubleSeconds(estimate));
}

void RouterMetrics::SetAdmissionQueue(const std::string& model, int32_t queued, int32_t peak,
                                      double rate, uint64_t version) {
  absl::MutexLock lock(&mu_);
  AdmissionGauges& g = admission_queue_[model];
  if (g.queued == nullptr) {
    g.queued =
        registry_.GetGauge("tandem_admission_queued_requests",
                           "Admitted requests waiting for their first token (the admission queue).",
                           {{"model", model}});
    g.peak = registry_.GetGauge("tandem_admission_queued_requests_peak",
                                "The most requests the admission queue held since start.",
                                {{"model", model}});
    g.rate = registry_.GetGauge(
        "tandem_admission_prefill_rate_tokens_per_second",
        "Measured rate at which queued prompt tokens reach their first token.", {{"model", model}});
  }
  if (version < g.version) {
    return;
  }
  g.version = version;
  g.queued->Set(queued);
  g.peak->Set(peak);
  g.rate->Set(rate);
}

}  // namespace tandem::router
