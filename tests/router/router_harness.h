#pragma once
// RouterHarness: the router's library objects wired as tandem-router wires
// them (WorkerWatcher -> Router -> gRPC GenerationService + HttpServer) on
// 127.0.0.1 free ports, for in-process tests against FakeWorkers.

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/metrics.h"
#include "gtest/gtest.h"
#include "router/grpc_service.h"
#include "router/http_server.h"
#include "router/router.h"
#include "router/worker_watcher.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tests/router/router_test_util.h"

namespace tandem::router::testing {

class RouterHarness {
 public:
  explicit RouterHarness(RouterConfig config) {
    config.grpc_address = "127.0.0.1:0";
    config.http_address = "127.0.0.1:0";
    if (config.models.empty()) {
      config.models.push_back({"stories260K", StoriesPath(), "", ""});
    }
    config_ = config;
    absl::StatusOr<ModelCatalog> catalog = ModelCatalog::Load(config.models);
    EXPECT_TRUE(catalog.ok()) << catalog.status();
    WorkerWatcher::Options wo;
    wo.discovery = config.discovery;
    wo.on_departed = [this](const std::string& a, const absl::Status& why) {
      if (Router* r = router_ptr_.load()) {
        r->OnWorkerDeparted(a, why);
      }
    };
    watcher_ = std::make_unique<WorkerWatcher>(std::move(wo));
    router_ = std::make_unique<Router>(config, *std::move(catalog),
                                       [w = watcher_.get()] { return w->snapshot(); }, metrics_);
    router_ptr_.store(router_.get());
    watcher_->Start();
    service_ = std::make_unique<GenerationService>(*router_);
    grpc::ServerBuilder b;
    b.AddListeningPort(config.grpc_address, grpc::InsecureServerCredentials(), &grpc_port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    http_ = std::make_unique<HttpServer>(*router_, metrics_);
    absl::Status s = http_->Start(config.http_address);
    EXPECT_TRUE(s.ok()) << s;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = tandem::v1::Generation::NewStub(channel_);
  }

  ~RouterHarness() {
    router_->Shutdown(absl::ZeroDuration());
    http_->Stop();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    router_ptr_.store(nullptr);
    watcher_->Stop();
  }

  // Waits until `n` workers are live (bounded; explains itself on failure).
  ::testing::AssertionResult WaitForLive(int n, absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time give_up = absl::Now() + timeout;
    int live = 0;
    while (absl::Now() < give_up) {
      auto snap = watcher_->snapshot();
      live = 0;
      for (const WorkerInfo& w : snap->workers) {
        live += snap->IsLive(w, base::RealClock::Get().Now()) ? 1 : 0;
      }
      if (live == n) {
        return ::testing::AssertionSuccess();
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return ::testing::AssertionFailure()
           << live << " workers live after " << absl::FormatDuration(timeout) << ", want " << n;
  }

  tandem::v1::Generation::Stub& stub() { return *stub_; }
  int http_port() const { return http_->port(); }
  int grpc_port() const { return grpc_port_; }
  Router& router() { return *router_; }
  base::MetricsRegistry& metrics() { return metrics_; }

 private:
  RouterConfig config_;
  base::MetricsRegistry metrics_;
  std::atomic<Router*> router_ptr_{nullptr};
  std::unique_ptr<WorkerWatcher> watcher_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  int grpc_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tandem::v1::Generation::Stub> stub_;
};

}  // namespace tandem::router::testing
