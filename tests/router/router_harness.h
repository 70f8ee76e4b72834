#pragma once
// RouterHarness: the RouterServer tandem-router runs (watcher, Router, gRPC
// Generation + health, HTTP front) on 127.0.0.1 free ports, plus a gRPC stub
// to it, for in-process tests against FakeWorkers.

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/metrics.h"
#include "gtest/gtest.h"
#include "router/router.h"
#include "router/router_server.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tests/testing/router_test_util.h"

namespace tandem::router::testing {

class RouterHarness {
 public:
  explicit RouterHarness(RouterConfig config, ApiKeys api_keys = ApiKeys()) {
    config.grpc_address = "127.0.0.1:0";
    config.http_address = "127.0.0.1:0";
    if (config.models.empty()) {
      config.models.push_back({"stories260K", StoriesPath(), "", ""});
    }
    absl::StatusOr<std::unique_ptr<RouterServer>> server =
        RouterServer::Create(std::move(config), std::move(api_keys));
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();  // aborts the test binary on failure
    absl::Status s = server_->Start();
    EXPECT_TRUE(s.ok()) << s;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = tandem::v1::Generation::NewStub(channel_);
  }

  ~RouterHarness() { server_->Shutdown(absl::ZeroDuration()); }

  // Waits until `n` workers are live (bounded; explains itself on failure).
  ::testing::AssertionResult WaitForLive(int n, absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time give_up = absl::Now() + timeout;
    int live = 0;
    while (absl::Now() < give_up) {
      auto snap = server_->router().snapshot();
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
  int http_port() const { return server_->http_port(); }
  int grpc_port() const { return server_->grpc_port(); }
  RouterServer& server() { return *server_; }
  Router& router() { return server_->router(); }
  base::MetricsRegistry& metrics() { return server_->metrics(); }

 private:
  std::unique_ptr<RouterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tandem::v1::Generation::Stub> stub_;
};

}  // namespace tandem::router::testing
