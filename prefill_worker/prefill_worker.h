#pragma once
// PrefillWorker: a whole tandem-prefill process minus flag parsing: loads
// the model, builds the engine and the KV transport (its pool registered as
// a write source), and serves tandem.v1.Prefill, tandem.v1.Control (Watch),
// grpc.health.v1 and Prometheus /metrics (the serving half is the shared
// WorkerServer). Integration tests run this very object; main.cc only builds
// the config and waits for SIGTERM (common/serving/worker_main.h).
//
// Thread-safe. Shutdown() (also run by the destructor) is idempotent.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/metrics.h"
#include "common/engine/model.h"
#include "common/serving/worker_config.h"
#include "common/serving/worker_server.h"
#include "kvtransfer/transport.h"
#include "prefill_worker/commit_client.h"
#include "prefill_worker/metrics.h"
#include "prefill_worker/prefill_engine.h"
#include "prefill_worker/prefill_service.h"

namespace tandem::prefill_worker {

class PrefillWorker {
 public:
  // `config` must be valid with role prefill (InvalidArgument otherwise).
  static absl::StatusOr<std::unique_ptr<PrefillWorker>> Create(const serving::WorkerConfig& config);
  ~PrefillWorker();

  // Address, worker id and ports.
  const serving::WorkerServer& server() const { return *server_; }
  PrefillLoad load() const { return engine_->load(); }
  base::MetricsRegistry& registry() { return registry_; }
  // The engine, for tests that wedge its loop (PostForTest).
  PrefillEngine& EngineForTest() { return *engine_; }

  // SIGTERM: stops accepting (UNAVAILABLE, health NOT_SERVING), lets
  // in-flight requests finish for up to `grace`, then shuts down. True when
  // every request finished in time.
  bool Drain(absl::Duration grace);
  void Shutdown();

 private:
  PrefillWorker() = default;

  serving::WorkerConfig config_;
  base::MetricsRegistry registry_;
  std::unique_ptr<PrefillMetrics> prefill_metrics_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<kvtransfer::KvTransport> transport_;
  std::unique_ptr<CommitClient> committer_;
  std::unique_ptr<PrefillEngine> engine_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<serving::WorkerServer> server_;  // destroyed before service_, which must outlive it
  bool shut_down_ = false;
};

}  // namespace tandem::prefill_worker
