#include "router/router_server.h"

#include <chrono>
#include <utility>

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "proto/tls_credentials.h"
#include "router/readiness.h"

namespace tandem::router {
namespace {

// After Router::Shutdown no Generate call is left; this bounds the unary
// calls (ListModels, Tokenize) still running.
constexpr std::chrono::seconds kGrpcShutdownDeadline(5);

// The gRPC service whose health tracks readiness, besides the server's "".
constexpr char kGenerationService[] = "tandem.v1.Generation";

WorkerWatcher::Options WatcherOptions(const DiscoveryConfig& discovery,
                                      std::shared_ptr<grpc::ChannelCredentials> credentials,
                                      std::atomic<Router*>* router,
                                      std::function<void(const RegistrySnapshot&)> on_publish) {
  WorkerWatcher::Options o;
  o.discovery = discovery;
  o.credentials = std::move(credentials);
  o.on_publish = std::move(on_publish);
  o.on_departed = [router](const std::string& address, const absl::Status& why) {
    if (Router* r = router->load()) {
      r->OnWorkerDeparted(address, why);
    }
  };
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Create(RouterConfig config,
                                                                   ApiKeys api_keys) {
  absl::StatusOr<ModelCatalog> catalog = ModelCatalog::Load(config.models);
  if (!catalog.ok()) {
    return catalog.status();
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      proto::MakeChannelCredentials(config.internal_tls);
  if (!credentials.ok()) {
    return credentials.status();
  }
  if (!config.internal_tls.enabled() && config.allow_insecure_internal) {
    LOG(WARNING) << "router: talking to workers WITHOUT TLS (allow_insecure_internal)";
  }
  std::shared_ptr<Embedder> embedder;
  if (!config.embedding.model.empty()) {
    absl::StatusOr<std::unique_ptr<Embedder>> loaded = Embedder::Load(config.embedding);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("embedding.model: ", loaded.status().message()));
    }
    embedder = std::move(*loaded);
  }
  std::unique_ptr<RouterServer> server(
      new RouterServer(std::move(config), *std::move(catalog), std::move(api_keys),
                       *std::move(credentials), std::move(embedder)));
  if (!server->router().routing_status().ok()) {  // complexity routing (router/complexity.h)
    return server->router().routing_status();
  }
  return server;
}

RouterServer::RouterServer(RouterConfig config, ModelCatalog catalog, ApiKeys api_keys,
                           std::shared_ptr<grpc::ChannelCredentials> worker_credentials,
                           std::shared_ptr<Embedder> embedder)
    : watcher_(WatcherOptions(config.discovery, std::move(worker_credentials), &router_for_watcher_,
                              [this](const RegistrySnapshot& s) { OnPublish(s); })),
      router_(std::move(config), std::move(catalog), [this] { return watcher_.snapshot(); },
              metrics_, base::RealClock::Get(), std::move(embedder)),
      api_keys_(std::move(api_keys)),
      service_(router_, api_keys_),
      http_(router_, metrics_, api_keys_, [this] { return Live(); }) {
  router_for_watcher_.store(&router_);
  router_.SetTenantsFromApiKeys(api_keys_.enabled());
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
    absl::MutexLock lock(&health_mu_);
    health_ = grpc_server_->GetHealthCheckService();
    grpc_serving_ = false;
    health_->SetServingStatus(false);
    UpdateGrpcHealth(*watcher_.snapshot());
  }
  if (!config.http_address.empty()) {
    if (absl::Status s = http_.Start(config.http_address); !s.ok()) {
      return s;
    }
  }
  if (api_keys_.enabled()) {
    // Tenant names only: keys never reach a log.
    LOG(INFO) << "router: API keys on for tenant(s) " << absl::StrJoin(api_keys_.tenants(), ", ");
  }
  for (const auto& [front, address] :
       {std::pair<const char*, const std::string&>{"gRPC", config.grpc_address},
        {"HTTP", config.http_address}}) {
    if (!address.empty() && !api_keys_.enabled() && !IsLoopbackAddress(address)) {
      LOG(WARNING) << "router: WARNING: the public " << front << " front listens on " << address
                   << " beyond loopback without API keys: anyone who reaches it can use it "
                      "(set auth.keys_file or "
                   << (config.auth.keys_env.empty() ? std::string("auth.keys_env")
                                                    : config.auth.keys_env)
                   << ")";
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
  {
    absl::MutexLock lock(&health_mu_);
    if (health_ != nullptr) {
      health_->SetServingStatus(false);
      health_ = nullptr;  // draining: publishes no longer change it
    }
  }
  router_.Shutdown(grace);
  http_.Stop();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() + kGrpcShutdownDeadline);
  }
  router_for_watcher_.store(nullptr);
  watcher_.Stop();
}

absl::Status RouterServer::Live() const {
  const absl::Duration since = router_.clock().Now() - watcher_.last_loop();
  if (since > kWedgedAfter) {
    return absl::UnavailableError(absl::StrCat("the worker watcher's control loop has not run for ",
                                               absl::FormatDuration(since)));
  }
  return absl::OkStatus();
}

void RouterServer::OnPublish(const RegistrySnapshot& snapshot) {
  absl::MutexLock lock(&health_mu_);
  UpdateGrpcHealth(snapshot);
}

void RouterServer::UpdateGrpcHealth(const RegistrySnapshot& snapshot) {
  if (health_ == nullptr) {
    return;
  }
  const std::vector<ModelReadiness> models =
      CheckReadiness(router_.catalog(), router_.config().mode, snapshot, router_.clock().Now());
  const bool ready = AllReady(models);
  if (ready == grpc_serving_) {
    return;
  }
  grpc_serving_ = ready;
  health_->SetServingStatus(ready);
  health_->SetServingStatus(kGenerationService, ready);
  if (ready) {
    LOG(INFO) << "router: ready; grpc.health.v1 SERVING";
    return;
  }
  for (const ModelReadiness& m : models) {
    if (!m.ready) {
      LOG(WARNING) << "router: model " << m.model << " cannot be served: " << m.reason
                   << "; grpc.health.v1 NOT_SERVING";
    }
  }
}

}  // namespace tandem::router
