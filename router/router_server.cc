#include "router/router_server.h"

#include <chrono>
#include <utility>

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace tandem::router {
namespace {

// After Router::Shutdown no Generate call is left; this bounds the unary
// calls (ListModels, Tokenize) still running.
constexpr std::chrono::seconds kGrpcShutdownDeadline(5);

WorkerWatcher::Options WatcherOptions(const DiscoveryConfig& discovery,
                                      std::atomic<Router*>* router) {
  WorkerWatcher::Options o;
  o.discovery = discovery;
  o.on_departed = [router](const std::string& address, const absl::Status& why) {
    if (Router* r = router->load()) {
      r->OnWorkerDeparted(address, why);
    }
  };
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Create(RouterConfig config) {
  absl::StatusOr<ModelCatalog> catalog = ModelCatalog::Load(config.models);
  if (!catalog.ok()) {
    return catalog.status();
  }
  return std::unique_ptr<RouterServer>(new RouterServer(std::move(config), *std::move(catalog)));
}

RouterServer::RouterServer(RouterConfig config, ModelCatalog catalog)
    : watcher_(WatcherOptions(config.discovery, &router_for_watcher_)),
      router_(std::move(config), std::move(catalog), [this] { return watcher_.snapshot(); },
              metrics_),
      service_(router_),
      http_(router_, metrics_) {
  router_for_watcher_.store(&router_);
}

RouterServer::~RouterServer() { Shutdown(absl::ZeroDuration()); }

absl::Status RouterServer::Start() {
  started_ = true;  // from here on Shutdown undoes whatever got started
  watcher_.Start();
  const RouterConfig& config = router_.config();
  if (!config.grpc_address.empty()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(config.grpc_address, grpc::InsecureServerCredentials(), &grpc_port_);
    builder.RegisterService(&service_);
    builder.SetMaxReceiveMessageSize(config.limits.max_grpc_message_bytes);
    builder.SetMaxSendMessageSize(config.limits.max_grpc_message_bytes);
    grpc_server_ = builder.BuildAndStart();
    if (grpc_server_ == nullptr || grpc_port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", config.grpc_address));
    }
    grpc_server_->GetHealthCheckService()->SetServingStatus(true);
  }
  if (!config.http_address.empty()) {
    if (absl::Status s = http_.Start(config.http_address); !s.ok()) {
      return s;
    }
  }
  LOG(INFO) << "tandem-router serving " << config.models.size() << " model(s): gRPC port "
            << grpc_port_ << ", HTTP port " << http_.port() << ", mode "
            << RoutingModeName(config.mode);
  return absl::OkStatus();
}

void RouterServer::Shutdown(absl::Duration grace) {
  if (!started_ || stopped_) {
    return;
  }
  stopped_ = true;
  if (grpc_server_ != nullptr) {
    grpc_server_->GetHealthCheckService()->SetServingStatus(false);
  }
  router_.Shutdown(grace);
  http_.Stop();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() + kGrpcShutdownDeadline);
  }
  router_for_watcher_.store(nullptr);
  watcher_.Stop();
}

}  // namespace tandem::router
