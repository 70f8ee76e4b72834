#pragma once
// WorkerServer: the serving half that tandem-prefill and tandem-decode share.
// It owns the gRPC server on WorkerConfig::listen (the worker's own service,
// tandem.v1.Control/Watch and grpc.health.v1), the Prometheus /metrics HTTP
// server with the health probes (/health/live, /health/ready, /healthz), the
// worker's health (liveness of its engine loops, readiness) and the address
// and worker id that follow from the bound port. The worker keeps its engine,
// transport and service, hands its engine loops to health(), and drives drain
// and shutdown through the calls below.
//
// Health: a watchdog (WorkerHealth) checks the loops every
// liveness_timeout / 10 (between 10 ms and 1 s). Not live: grpc.health.v1
// NOT_SERVING and Control.Watch streams ended and refused (UNAVAILABLE with
// the reason), until the loop moves again. Draining: NOT_SERVING.
//
// Thread-safe after Start() (accessors, control()). Drain() and Shutdown()
// are called by the owning worker, not concurrently with each other;
// Shutdown() is idempotent and run by the destructor.

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/metrics.h"
#include "common/base/metrics_http_server.h"
#include "common/engine/model.h"
#include "common/serving/worker_config.h"
#include "common/serving/worker_control.h"
#include "common/serving/worker_health.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::serving {

// The Control.Watch snapshot fields every worker fills the same way: its role
// and the model (id, architecture, context length, vocabulary). The caller
// adds the KV layout and the load.
tandem::v1::WorkerSnapshot MakeWorkerSnapshot(WorkerRole role, const engine::ModelConfig& model);

class WorkerServer {
 public:
  // Registers `service` (which must outlive the WorkerServer) and a
  // WorkerControlService built from `snapshot`, binds config.listen (port 0:
  // any free port), sets the worker id on the snapshot, reports SERVING on
  // grpc.health.v1, then serves `registry` (which must outlive the
  // WorkerServer) on config.metrics_host:metrics_port unless metrics_port is
  // -1. The gRPC server uses internal mutual TLS when config.tls() is
  // enabled (an error naming the file when one cannot be loaded). Unavailable
  // when a port cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerConfig& config,
                                                             grpc::Service* service,
                                                             tandem::v1::WorkerSnapshot snapshot,
                                                             const base::MetricsRegistry& registry);
  ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  const std::string& address() const { return address_; }  // advertised host:port
  const std::string& worker_id() const { return worker_id_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_ != nullptr ? metrics_->port() : -1; }
  // Control.Watch; PublishLoad() from any thread.
  WorkerControlService& control() { return *control_; }
  // AddLoop() each engine loop from any thread.
  WorkerHealth& health() { return *health_; }

  // The shared half of a SIGTERM drain: logs the requests in flight, runs
  // `stop_accepting` (the worker's service answers UNAVAILABLE from then on),
  // reports NOT_SERVING on grpc.health.v1 and polls `live_requests` every
  // 10 ms until it is 0 or `grace` has passed (logging a warning then).
  // Returns true when nothing is left in flight. Shuts nothing down. Blocks
  // the calling thread, which also runs both callbacks.
  bool Drain(absl::Duration grace, absl::FunctionRef<int32_t()> live_requests,
             absl::FunctionRef<void()> stop_accepting);

  // Ends the Watch streams, shuts the gRPC server down (waiting at most
  // 250 ms for idle connections: the worker has finished every call before)
  // and stops /metrics. Idempotent.
  void Shutdown();

 private:
  WorkerServer() = default;

  std::string address_;
  std::string worker_id_;
  int grpc_port_ = 0;
  // Declared before metrics_, whose probes read it. Its watchdog touches
  // control_ and server_: Shutdown() stops it before anything else.
  std::unique_ptr<WorkerHealth> health_;
  // Declared before server_: the service must outlive the server.
  std::unique_ptr<WorkerControlService> control_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<base::MetricsHttpServer> metrics_;
  bool shut_down_ = false;
};

}  // namespace tandem::serving
