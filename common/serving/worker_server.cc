#include "common/serving/worker_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "proto/tls_credentials.h"

namespace tandem::serving {
namespace {

tandem::v1::WorkerRole RoleToProto(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return tandem::v1::WORKER_ROLE_PREFILL;
    case WorkerRole::kDecode:
      return tandem::v1::WORKER_ROLE_DECODE;
    case WorkerRole::kColocated:
      return tandem::v1::WORKER_ROLE_COLOCATED;
  }
  return tandem::v1::WORKER_ROLE_UNSPECIFIED;
}

}  // namespace

tandem::v1::WorkerSnapshot MakeWorkerSnapshot(WorkerRole role, const engine::ModelConfig& model) {
  tandem::v1::WorkerSnapshot snapshot;
  snapshot.set_role(RoleToProto(role));
  tandem::v1::ModelInfo* mi = snapshot.mutable_model();
  mi->set_id(model.name);
  mi->set_architecture(model.arch_name);
  mi->set_context_length(model.context_length);
  mi->set_vocab_size(model.vocab_size);
  return snapshot;
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerConfig& config, grpc::Service* service, tandem::v1::WorkerSnapshot snapshot,
    const base::MetricsRegistry& registry) {
  std::unique_ptr<WorkerServer> s(new WorkerServer());
  s->health_ = std::make_unique<WorkerHealth>(config.liveness_timeout);
  s->control_ =
      std::make_unique<WorkerControlService>(std::move(snapshot), config.heartbeat_interval);

  // Internal mutual TLS when the tls_* keys are set: every caller (router,
  // prefill worker, `tandem up`) must present a certificate from the cluster
  // CA, for every service on this port (Decode / Prefill, Control.Watch,
  // grpc.health.v1). Probes use the plaintext metrics port instead.
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   proto::MakeServerCredentials(config.tls()));
  if (!config.tls().enabled() && !proto::IsLoopbackAddress(config.listen)) {
    LOG(WARNING) << "serving the internal gRPC services on " << config.listen
                 << " WITHOUT TLS (allow_insecure_internal): anyone who can reach it can "
                    "reserve KV, cancel requests and read the pool layout";
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &s->grpc_port_);
  builder.RegisterService(service);
  builder.RegisterService(s->control_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->grpc_port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", config.listen));
  }
  s->address_ = config.AdvertiseAddress(s->grpc_port_);
  s->worker_id_ = config.WorkerId(s->grpc_port_);
  s->control_->set_worker_id(s->worker_id_);
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->health_->StartWatchdog(
      std::clamp(config.liveness_timeout / 10, absl::Milliseconds(10), absl::Seconds(1)),
      [control = s->control_.get(), server = s->server_.get()](const absl::Status& live,
                                                               const absl::Status& ready) {
        if (!live.ok()) {
          LOG(WARNING) << "worker not live: " << live.message();
        } else {
          LOG(INFO) << "worker live, " << (ready.ok() ? "ready" : "not ready: ") << ready.message();
        }
        control->SetLiveness(live);
        server->GetHealthCheckService()->SetServingStatus(ready.ok());
      });

  if (config.metrics_port >= 0) {
    WorkerHealth* health = s->health_.get();
    ASSIGN_OR_RETURN(s->metrics_, base::MetricsHttpServer::Start(
                                      registry, config.metrics_host, config.metrics_port,
                                      {.live = [health] { return health->Live(); },
                                       .ready = [health] { return health->Ready(); }}));
  }
  return s;
}

WorkerServer::~WorkerServer() { Shutdown(); }

bool WorkerServer::Drain(absl::Duration grace, absl::FunctionRef<int32_t()> live_requests,
                         absl::FunctionRef<void()> stop_accepting) {
  LOG(INFO) << "draining: " << live_requests() << " requests in flight, grace " << grace;
  stop_accepting();
  health_->SetDraining();  // grpc.health.v1 NOT_SERVING, /health/ready 503
  server_->GetHealthCheckService()->SetServingStatus(false);
  const absl::Time deadline = absl::Now() + grace;
  while (live_requests() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const bool clean = live_requests() == 0;
  if (!clean) {
    LOG(WARNING) << "drain grace over with " << live_requests()
                 << " requests in flight; failing them";
  }
  return clean;
}

void WorkerServer::Shutdown() {
  if (shut_down_) {
    return;
  }
  shut_down_ = true;
  if (health_ != nullptr) {
    health_->Stop();
  }
  if (control_ != nullptr) {
    control_->Shutdown();
  }
  // Every call has been finished by the worker before; what the deadline
  // still waits for is idle client connections, which need not hold the exit.
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
  }
  if (metrics_ != nullptr) {
    metrics_->Stop();
  }
}

}  // namespace tandem::serving
