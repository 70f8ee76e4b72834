#pragma once
// DecodeWorker: a whole tandem-decode process minus flag parsing: loads the
// model, builds the engine and (role decode) the KV transport with the pool
// registered, and serves tandem.v1.Decode, tandem.v1.Control (Watch),
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
#include "decode_worker/decode_engine.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/metrics.h"
#include "kvtransfer/transport.h"

namespace tandem::decode_worker {

class DecodeWorker {
 public:
  // `config` must be valid (Validate()) with role decode or colocated
  // (InvalidArgument otherwise). Errors: the model does not load, the engine
  // or transport cannot start, a port cannot be bound.
  static absl::StatusOr<std::unique_ptr<DecodeWorker>> Create(const serving::WorkerConfig& config);
  ~DecodeWorker();

  // Address, worker id and ports.
  const serving::WorkerServer& server() const { return *server_; }
  LoadInfo load() const { return engine_->load(); }
  base::MetricsRegistry& registry() { return registry_; }
  // The engine, for tests that wedge its loop (PostForTest).
  DecodeEngine& EngineForTest() { return *engine_; }

  // SIGTERM: stops accepting new requests (UNAVAILABLE, health NOT_SERVING),
  // lets in-flight ones finish for up to `grace`, then shuts down. Returns
  // true when every request finished in time.
  bool Drain(absl::Duration grace);
  // Fails whatever is in flight with UNAVAILABLE and stops everything.
  void Shutdown();

 private:
  DecodeWorker() = default;

  serving::WorkerConfig config_;
  base::MetricsRegistry registry_;
  std::unique_ptr<DecodeMetrics> decode_metrics_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<kvtransfer::KvTransport> transport_;
  std::unique_ptr<DecodeEngine> engine_;
  std::unique_ptr<DecodeService> service_;
  std::unique_ptr<serving::WorkerServer> server_;  // destroyed before service_, which must outlive it
  bool shut_down_ = false;
};

}  // namespace tandem::decode_worker
