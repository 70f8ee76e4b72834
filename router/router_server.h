#pragma once
// RouterServer: the whole router process as one object, so tandem-router's
// main() and the in-process tests run the same assembly. From a validated
// RouterConfig it builds the served-model catalog, the WorkerWatcher (control
// thread), the Router, the public gRPC server (tandem.v1.Generation plus
// grpc.health.v1) and the OpenAI HTTP front (which also serves /metrics).
//
// Health: grpc.health.v1 (the server as a whole, "", and
// "tandem.v1.Generation") says SERVING while every configured model can be
// served (readiness.h), NOT_SERVING otherwise and from Shutdown on; it
// follows each snapshot the watcher publishes. HTTP /health/ready and /health
// report the same per model; /health/live and Live() fail when the watcher's
// control loop has not gone round for kWedgedAfter.
//
// Lifecycle: Create -> Start -> Shutdown (also run by the destructor). Ports
// given as 0 in the config are picked by the OS; grpc_port() / http_port()
// say which after Start.
//
// Thread safety: Create, Start and Shutdown from one thread; the accessors
// from any thread after Start.

#include <atomic>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/metrics.h"
#include "router/auth.h"
#include "router/config.h"
#include "router/grpc_service.h"
#include "router/http_server.h"
#include "router/router.h"
#include "router/worker_watcher.h"

namespace tandem::router {

class RouterServer {
 public:
  // Loads the configured models (tokenizer and metadata only) and the
  // internal TLS files; their errors (NotFound, InvalidArgument naming the
  // model or file) come back unchanged. Nothing
  // is bound and no thread runs until Start(). `config` must be Validate()d.
  // `api_keys` guard both public fronts (router/auth.h; none: open).
  static absl::StatusOr<std::unique_ptr<RouterServer>> Create(RouterConfig config,
                                                              ApiKeys api_keys = ApiKeys());

  ~RouterServer();  // Shutdown(absl::ZeroDuration())
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  // Starts the worker watcher, then serves gRPC on config.grpc_address and
  // HTTP on config.http_address (each skipped when its address is empty).
  // Logs a WARNING for each public front that listens beyond loopback
  // without API keys.
  // Unavailable naming the address when one cannot be bound; the caller
  // then exits (or calls Shutdown). Call once.
  absl::Status Start();

  // Drains: reports NOT_SERVING on grpc.health.v1, stops admitting, gives
  // in-flight requests up to `grace` to finish and cancels the rest, then
  // stops the HTTP and gRPC servers and the watcher. Idempotent; a no-op
  // before Start.
  void Shutdown(absl::Duration grace);

  // Any thread. OK while the serving threads respond (the watcher's control
  // loop went round within kWedgedAfter); Unavailable saying which is stuck.
  absl::Status Live() const;
  static constexpr absl::Duration kWedgedAfter = absl::Seconds(5);

  // The bound ports after Start (0 for a front that is off).
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_.port(); }

  const RouterConfig& config() const { return router_.config(); }
  Router& router() { return router_; }
  base::MetricsRegistry& metrics() { return metrics_; }

 private:
  RouterServer(RouterConfig config, ModelCatalog catalog, ApiKeys api_keys,
               std::shared_ptr<grpc::ChannelCredentials> worker_credentials,
               std::shared_ptr<Embedder> embedder);
  // Control thread (the watcher's on_publish): grpc.health.v1 follows readiness.
  void OnPublish(const RegistrySnapshot& snapshot);
  // Sets grpc.health.v1 from `snapshot` unless draining.
  void UpdateGrpcHealth(const RegistrySnapshot& snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);

  // First: the Router and the HTTP front hold references into it.
  base::MetricsRegistry metrics_;
  // The watcher reports departures on its control thread; it is built before
  // the Router (whose snapshots it serves), so it reaches it through this.
  std::atomic<Router*> router_for_watcher_{nullptr};
  WorkerWatcher watcher_;
  Router router_;
  const ApiKeys api_keys_;  // before the fronts, which hold references to it
  GenerationService service_;
  HttpServer http_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int grpc_port_ = 0;
  absl::Mutex health_mu_;
  // Set once gRPC serves; null again from Shutdown.
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(health_mu_) = nullptr;
  bool grpc_serving_ ABSL_GUARDED_BY(health_mu_) = false;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace tandem::router
