#pragma once
// The router core shared by both fronts: validation, admission, routing and
// running requests against workers.
//
// Request path (disaggregated): pick a decode worker D and a prefill worker P
// from the current registry snapshot -> Decode.Reserve on D (a server
// stream; its first event is the KV reservation) -> Prefill.Prefill on P
// with the reservation -> relay D's token events, detokenizing incrementally
// and applying stop strings; cancel D when a stop string hits or the client
// leaves. Colocated: Decode.Generate on one worker. The client's deadline is
// every worker call's deadline. A choice that fails before any token was
// received is retried on another route (max_route_attempts); after that a
// worker failure fails the request (UNAVAILABLE). Workers leaving rotation
// (heartbeat lost) fail their in-flight calls at once.
//
// Thread safety: all methods any thread. The Router must outlive its
// requests: Shutdown() cancels and waits for them.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/metrics.h"
#include "router/complexity.h"
#include "router/admission.h"
#include "router/config.h"
#include "router/embedder.h"
#include "router/generation.h"
#include "router/model_catalog.h"
#include "router/picker.h"
#include "router/registry.h"
#include "router/request.h"
#include "router/router_metrics.h"
#include "router/semantic_cache.h"

namespace tandem::router {

namespace internal {
class RequestRun;
class ChoiceCall;
}  // namespace internal

// Where the router reads worker state from (the WorkerWatcher in production).
using SnapshotSource = std::function<std::shared_ptr<const RegistrySnapshot>()>;

// limits.max_prompt_bytes, or when 0 max(16 x the context length, 64 KiB):
// generous (a token is ~4 bytes of text) yet cheap to check before tokenizing.
int64_t MaxPromptBytes(const LimitsConfig& limits, const ServedModel& model);

class Router {
 public:
  // `embedder` (may be null: no embedding model configured) serves the
  // semantic cache and complexity routing.
  Router(RouterConfig config, ModelCatalog catalog, SnapshotSource snapshots,
         base::MetricsRegistry& metrics, base::Clock& clock = base::RealClock::Get(),
         std::shared_ptr<Embedder> embedder = nullptr);
  ~Router();  // Shutdown(absl::ZeroDuration())
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Validates and tokenizes (see PrepareRequest); the deadline is
  // `client_deadline` capped by limits.default_timeout from now. A prompt
  // text (or chat messages) over MaxPromptBytes is refused InvalidArgument
  // naming limits.max_prompt_bytes before it is tokenized.
  // With routing configured, a request naming routing.alias (or no model)
  // is scored and given a pool's model first (router/complexity.h; the
  // embedding runs here, on the caller's thread, a few ms); UNAVAILABLE
  // naming every pool when none has a live worker. A request naming a served
  // model keeps it.
  absl::StatusOr<PreparedRequest> Prepare(const GenerationRequest& request,
                                          absl::Time client_deadline) const;

  // Admits and starts a request. Synchronous errors: RESOURCE_EXHAUSTED when
  // max_inflight requests are running (retry after limits.retry_after) or
  // admission control refuses it (router/admission.h: the tenant's buckets,
  // the queue bound, the estimated time to first token; the status carries
  // its Retry-After, see WithRetryAfter), INVALID_ARGUMENT when it costs
  // more than its tenant's token burst, UNAVAILABLE when no worker fits or
  // the router is shutting down. On OK the observer receives the request's
  // events and exactly one OnComplete.
  absl::StatusOr<std::shared_ptr<RequestHandle>> Start(
      PreparedRequest request, std::shared_ptr<GenerationObserver> observer);

  // Counts a request that failed before Start (validation) in the metrics
  // and logs it.
  void RecordRejected(absl::string_view model, const absl::Status& status);

  // Control thread: `address` left rotation; fail its in-flight calls.
  void OnWorkerDeparted(const std::string& address, const absl::Status& why);

  // Stops admitting (new requests get UNAVAILABLE), waits up to `grace` for
  // in-flight requests, then cancels the rest and waits for them to finish.
  void Shutdown(absl::Duration grace);

  const RouterConfig& config() const { return config_; }
  const ModelCatalog& catalog() const { return catalog_; }
  RouterMetrics& metrics() { return metrics_; }
  base::Clock& clock() const { return clock_; }
  std::shared_ptr<const RegistrySnapshot> snapshot() const { return snapshots_(); }
  int inflight() const { return inflight_.load(std::memory_order_relaxed); }
  // Null when the config has no embedding model.
  Embedder* embedder() const { return embedder_.get(); }
  // Null when semantic_cache.enabled is false.
  SemanticCache* semantic_cache() const { return cache_.get(); }
  // Complexity routing; null when the config has none or it failed to start
  // (routing_status() says why: RouterServer::Create refuses to start then).
  const ComplexityRouter* routing() const { return routing_.get(); }
  const absl::Status& routing_status() const { return routing_status_; }

  // Whether request tenants come from API keys (router/auth.h). Off (the
  // default): admission control counts every request as the anonymous
  // tenant, whatever tenant a client claims. Call before serving.
  void SetTenantsFromApiKeys(bool on) { tenants_from_keys_.store(on, std::memory_order_relaxed); }
  const AdmissionController& admission() const { return admission_; }

 private:
  friend class internal::RequestRun;
  friend class internal::ChoiceCall;

  // For RequestRun / ChoiceCall.
  absl::StatusOr<RouteDecision> Pick(const PreparedRequest& req,
                                     const RegistrySnapshot& snapshot,
                                     const std::set<std::string>& exclude) const;
  void AddLocalLoad(const std::string& address, const LocalLoad& delta, int sign);
  uint64_t TrackCall(const std::string& address, std::weak_ptr<internal::ChoiceCall> call);
  void UntrackCall(const std::string& address, uint64_t id);
  // Metrics and the per-request log line, just before OnComplete.
  void RunFinished(uint64_t run_id, const absl::Status& status, const RequestSummary& summary,
                   absl::Duration tpot);
  // After OnComplete: frees the admission slot.
  void ReleaseSlot();
  // The response cache's step of Start (internal/cache_hook.cc), before
  // admission and any worker call: one exact lookup, then (when the vector
  // tier applies) one embedding and one HNSW search. A hit replays the answer
  // to `observer` and returns the finished handle; a miss wraps `observer` so
  // that a successful answer is stored, and returns null.
  std::shared_ptr<RequestHandle> ServeFromCache(uint64_t id, const PreparedRequest& request,
                                                std::shared_ptr<GenerationObserver>& observer,
                                                CacheStatus* status);
  // Prepare for a request complexity routing resolves.
  absl::StatusOr<PreparedRequest> PrepareRouted(const GenerationRequest& request,
                                                absl::Time client_deadline) const;
  // RequestRun: the run's first token arrived (it leaves the admission queue).
  void FirstToken(uint64_t run_id, const std::string& model);
  // Admission control for run `id` (router/admission.h) on the `routes`
  // picked for it: OK, or the refusal (counted). Admitted requests are
  // queued until FirstToken / RunFinished.
  absl::Status Admit(uint64_t id, const PreparedRequest& request, const RegistrySnapshot& snapshot,
                     const std::vector<RouteDecision>& routes, absl::Time now);
  std::string AdmissionTenant(const PreparedRequest& request) const;
  // The admission queue's gauges for `model`.
  void ReportAdmissionQueue(const std::string& model);

  const RouterConfig config_;
  const ModelCatalog catalog_;
  const SnapshotSource snapshots_;
  base::Clock& clock_;
  const std::shared_ptr<Embedder> embedder_;
  RouterMetrics metrics_;
  std::atomic<int> inflight_{0};
  std::unique_ptr<SemanticCache> cache_;  // null: semantic_cache.enabled false

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::weak_ptr<internal::RequestRun>> runs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LocalLoad> local_load_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<uint64_t, std::weak_ptr<internal::ChoiceCall>>> calls_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ComplexityRouter> routing_;  // built in the constructor, then read-only
  absl::Status routing_status_;

  AdmissionController admission_;
  std::atomic<bool> tenants_from_keys_{false};
};

}  // namespace tandem::router
