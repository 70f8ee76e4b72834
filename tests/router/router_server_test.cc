// RouterServer, the assembly tandem-router runs: ports picked by the OS and
// reported after Start, grpc.health.v1 SERVING while up and ready (NOT_SERVING
// without workers), the HTTP front
// optional, bind and model-load failures reported, Shutdown idempotent.
// The request path through it is router_service_test (via RouterHarness).

#include <httplib.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/cli/health_client.h"
#include "router/router_server.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tests/testing/fake_worker.h"
#include "tests/testing/router_test_util.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

namespace v1 = ::tandem::v1;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

RouterConfig LocalConfig() {
  RouterConfig c;
  c.grpc_address = "127.0.0.1:0";
  c.http_address = "127.0.0.1:0";
  c.models.push_back({"stories260K", testing::StoriesPath(), "", ""});
  return c;
}

// A config whose one model a live colocated worker serves: the router is
// ready (grpc.health.v1 SERVING) once the watcher has seen it.
RouterConfig ServedConfig(const testing::FakeWorker& worker) {
  RouterConfig c = LocalConfig();
  c.discovery.static_workers = {worker.address()};
  return c;
}

std::unique_ptr<testing::FakeWorker> ColocatedWorker() {
  testing::FakeWorker::Options wo;
  wo.role = v1::WORKER_ROLE_COLOCATED;
  return testing::FakeWorker::Start(wo);
}

// grpc.health.v1 SERVING within 5 s (the watcher first has to see a worker).
absl::Status AwaitServing(const std::string& grpc_address) {
  absl::Status s;
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!(s = cli::CheckHealth(grpc_address, absl::Seconds(1))).ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  return s;
}

std::unique_ptr<RouterServer> MustCreate(RouterConfig config) {
  absl::StatusOr<std::unique_ptr<RouterServer>> s = RouterServer::Create(std::move(config));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(RouterServerTest, ServesBothFrontsAndHealthOnPickedPortsUntilShutdown) {
  std::unique_ptr<testing::FakeWorker> worker = ColocatedWorker();
  ASSERT_NE(worker, nullptr);
  std::unique_ptr<RouterServer> server = MustCreate(ServedConfig(*worker));
  ASSERT_NE(server, nullptr);
  ASSERT_OK(server->Start());
  ASSERT_GT(server->grpc_port(), 0);
  ASSERT_GT(server->http_port(), 0);
  EXPECT_NE(server->grpc_port(), server->http_port());
  const std::string grpc_address = absl::StrCat("127.0.0.1:", server->grpc_port());

  EXPECT_OK(AwaitServing(grpc_address));
  auto stub = v1::Generation::NewStub(
      grpc::CreateChannel(grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::ListModelsResponse models;
  ASSERT_TRUE(stub->ListModels(&ctx, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "stories260K");
  httplib::Client http("127.0.0.1", server->http_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("tandem_router_workers_up"));

  server->Shutdown(absl::ZeroDuration());
  server->Shutdown(absl::ZeroDuration());  // idempotent
  EXPECT_THAT(cli::CheckHealth(grpc_address, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_FALSE(http.Get("/health"));
}

TEST(RouterServerTest, RoutesToConfiguredWorkers) {
  testing::FakeWorker::Options wo;
  wo.role = v1::WORKER_ROLE_COLOCATED;
  std::unique_ptr<testing::FakeWorker> worker = testing::FakeWorker::Start(wo);
  ASSERT_NE(worker, nullptr);
  RouterConfig config = LocalConfig();
  config.discovery.static_workers = {worker->address()};
  std::unique_ptr<RouterServer> server = MustCreate(config);
  ASSERT_NE(server, nullptr);
  ASSERT_OK(server->Start());
  // The watcher the server started feeds the Router's snapshots.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (server->router().snapshot()->Find(worker->address()) == nullptr &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_NE(server->router().snapshot()->Find(worker->address()), nullptr)
      << "the watcher never reported " << worker->address();
}

TEST(RouterServerTest, HttpOffServesGrpcOnly) {
  std::unique_ptr<testing::FakeWorker> worker = ColocatedWorker();
  ASSERT_NE(worker, nullptr);
  RouterConfig config = ServedConfig(*worker);
  config.http_address = "";
  std::unique_ptr<RouterServer> server = MustCreate(config);
  ASSERT_NE(server, nullptr);
  ASSERT_OK(server->Start());
  EXPECT_GT(server->grpc_port(), 0);
  EXPECT_EQ(server->http_port(), 0);
  EXPECT_OK(AwaitServing(absl::StrCat("127.0.0.1:", server->grpc_port())));
}

// No worker can serve the model: the router is up (live) but not ready, and
// says so on both fronts instead of reporting SERVING / 200.
TEST(RouterServerTest, WithoutWorkersIsLiveButNotReady) {
  std::unique_ptr<RouterServer> server = MustCreate(LocalConfig());
  ASSERT_NE(server, nullptr);
  ASSERT_OK(server->Start());
  EXPECT_THAT(cli::CheckHealth(absl::StrCat("127.0.0.1:", server->grpc_port()), absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not serving (status 2)")));
  httplib::Client http("127.0.0.1", server->http_port());
  auto ready = http.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_THAT(ready->body, HasSubstr("no live prefill or decode worker and no live colocated worker"));
  auto live = http.Get("/health/live");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  EXPECT_OK(server->Live());
}

// 192.0.2.1 (TEST-NET-1) is never a local address: binding it fails.
TEST(RouterServerTest, UnbindableHttpAddressFailsStart) {
  std::unique_ptr<testing::FakeWorker> worker = ColocatedWorker();
  ASSERT_NE(worker, nullptr);
  RouterConfig config = ServedConfig(*worker);
  config.http_address = "192.0.2.1:0";
  std::unique_ptr<RouterServer> server = MustCreate(config);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->Start(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot bind HTTP on 192.0.2.1")));
  // gRPC did start: it serves until Shutdown, which tears down what started.
  const std::string grpc_address = absl::StrCat("127.0.0.1:", server->grpc_port());
  EXPECT_OK(AwaitServing(grpc_address));
  server->Shutdown(absl::ZeroDuration());
  EXPECT_THAT(cli::CheckHealth(grpc_address, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST(RouterServerTest, UnbindableGrpcAddressFailsStart) {
  RouterConfig config = LocalConfig();
  config.grpc_address = "192.0.2.1:0";
  std::unique_ptr<RouterServer> server = MustCreate(config);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->Start(), StatusIs(absl::StatusCode::kUnavailable,
                                        HasSubstr("cannot serve gRPC on 192.0.2.1:0")));
  EXPECT_EQ(server->http_port(), 0);  // not started after the failure
}

TEST(RouterServerTest, MissingModelFailsCreate) {
  RouterConfig config = LocalConfig();
  config.models[0].path = ::testing::TempDir() + "/no_such_model.gguf";
  absl::StatusOr<std::unique_ptr<RouterServer>> server = RouterServer::Create(config);
  EXPECT_THAT(server, StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_model.gguf")));
}

}  // namespace
}  // namespace tandem::router
