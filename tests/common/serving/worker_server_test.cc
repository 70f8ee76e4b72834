// WorkerServer (common/serving/worker_server.h): the gRPC and /metrics bring-up both
// workers share, its drain and shutdown, the snapshot it starts from, and its
// health probes (a loop wedged on a SimulatedClock; draining).

#include "common/serving/worker_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/clock.h"
#include "common/base/metrics.h"
#include "common/serving/worker_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace tandem::serving {
namespace {

using ::tandem::testing::Eventually;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A worker's own service: every method UNIMPLEMENTED, which is all the
// server needs of it.
class NoopPrefillService final : public tandem::v1::Prefill::CallbackService {};

WorkerConfig LocalConfig() {
  WorkerConfig c;
  c.role = WorkerRole::kPrefill;
  c.model = "unused.gguf";
  c.listen = "127.0.0.1:0";
  c.metrics_host = "127.0.0.1";
  c.metrics_port = 0;
  c.heartbeat_interval = absl::Milliseconds(50);
  return c;
}

engine::ModelConfig TinyModel() {
  engine::ModelConfig m;
  m.name = "tiny";
  m.arch_name = "llama";
  m.context_length = 512;
  m.vocab_size = 32;
  return m;
}

TEST(MakeWorkerSnapshotTest, FillsRoleAndModel) {
  const tandem::v1::WorkerSnapshot s = MakeWorkerSnapshot(WorkerRole::kColocated, TinyModel());
  EXPECT_EQ(s.role(), tandem::v1::WORKER_ROLE_COLOCATED);
  EXPECT_EQ(s.model().id(), "tiny");
  EXPECT_EQ(s.model().architecture(), "llama");
  EXPECT_EQ(s.model().context_length(), 512);
  EXPECT_EQ(s.model().vocab_size(), 32);
  EXPECT_EQ(s.worker_id(), "");
  EXPECT_FALSE(s.has_layout());
  EXPECT_EQ(MakeWorkerSnapshot(WorkerRole::kPrefill, TinyModel()).role(),
            tandem::v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(MakeWorkerSnapshot(WorkerRole::kDecode, TinyModel()).role(),
            tandem::v1::WORKER_ROLE_DECODE);
}

class WorkerServerTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerConfig& config) {
    return WorkerServer::Start(config, &service_, MakeWorkerSnapshot(config.role, TinyModel()),
                               registry_);
  }

  NoopPrefillService service_;
  base::MetricsRegistry registry_;
};

TEST_F(WorkerServerTest, BindsAnyPortAndReportsAddressAndId) {
  const WorkerConfig config = LocalConfig();
  auto server = Start(config);
  ASSERT_OK(server.status());
  const WorkerServer& s = **server;
  EXPECT_GT(s.grpc_port(), 0);
  EXPECT_GT(s.metrics_port(), 0);
  EXPECT_NE(s.metrics_port(), s.grpc_port());
  EXPECT_EQ(s.address(), absl::StrCat("127.0.0.1:", s.grpc_port()));
  EXPECT_EQ(s.address(), config.AdvertiseAddress(s.grpc_port()));
  EXPECT_EQ(s.worker_id(), config.WorkerId(s.grpc_port()));
  EXPECT_THAT(s.worker_id(), StartsWith("prefill@"));
}

TEST_F(WorkerServerTest, WatchStartsWithTheSnapshotAndItsWorkerId) {
  WorkerConfig config = LocalConfig();
  config.worker_id = "p0";
  auto server = Start(config);
  ASSERT_OK(server.status());
  auto stub = tandem::v1::Control::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->Watch(&ctx, tandem::v1::WatchRequest());
  tandem::v1::WorkerEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_snapshot());
  EXPECT_EQ(event.snapshot().worker_id(), "p0");
  EXPECT_EQ(event.snapshot().role(), tandem::v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(event.snapshot().model().id(), "tiny");

  tandem::v1::WorkerLoad load;
  load.set_running_requests(3);
  (*server)->control().PublishLoad(load);
  bool saw_load = false;
  while (!saw_load && reader->Read(&event)) {
    saw_load = event.has_load() && event.load().running_requests() == 3;
  }
  EXPECT_TRUE(saw_load);

  // Shutdown ends the stream (OK), and a second Shutdown is a no-op.
  (*server)->Shutdown();
  while (reader->Read(&event)) {
  }
  EXPECT_TRUE(reader->Finish().ok());
  (*server)->Shutdown();
}

TEST_F(WorkerServerTest, ServesTheRegistryOnMetrics) {
  registry_.GetCounter("tandem_test_things_total", "Things.")->Increment(7);
  auto server = Start(LocalConfig());
  ASSERT_OK(server.status());
  httplib::Client cli("127.0.0.1", (*server)->metrics_port());
  auto res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("tandem_test_things_total 7"));
}

TEST_F(WorkerServerTest, MetricsOffWhenPortIsMinusOne) {
  WorkerConfig config = LocalConfig();
  config.metrics_port = -1;
  auto server = Start(config);
  ASSERT_OK(server.status());
  EXPECT_EQ((*server)->metrics_port(), -1);
}

TEST_F(WorkerServerTest, MetricsPortInUseIsUnavailable) {
  // A listening socket without SO_REUSEPORT holds the port against httplib's.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  WorkerConfig config = LocalConfig();
  config.metrics_port = ntohs(addr.sin_port);
  EXPECT_THAT(Start(config), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("metrics")));
  close(fd);
}

TEST_F(WorkerServerTest, DrainStopsAcceptingThenWaitsForLiveRequests) {
  auto server = Start(LocalConfig());
  ASSERT_OK(server.status());
  // Three requests in flight, one finishing per poll once accepting stopped.
  int stop_calls = 0;
  int polls_after_stop = 0;
  const bool clean = (*server)->Drain(
      absl::Seconds(30), [&] { return stop_calls == 0 ? 3 : std::max(0, 3 - ++polls_after_stop); },
      [&] { ++stop_calls; });
  EXPECT_TRUE(clean);
  EXPECT_EQ(stop_calls, 1);
  EXPECT_GE(polls_after_stop, 3);
}

TEST_F(WorkerServerTest, DrainGivesUpAfterGrace) {
  auto server = Start(LocalConfig());
  ASSERT_OK(server.status());
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE((*server)->Drain(
      absl::Milliseconds(100), [] { return 1; }, [] {}));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_GE(took, absl::Milliseconds(100));
  EXPECT_LT(took, absl::Seconds(10));
}

// GET `path` on the server's metrics port: "<status> <body>".
std::string Probe(const WorkerServer& server, const std::string& path) {
  httplib::Client cli("127.0.0.1", server.metrics_port());
  auto res = cli.Get(path.c_str());
  return res ? absl::StrCat(res->status, " ", res->body) : "no answer";
}

// The status the first Control.Watch event ends with: OK (a snapshot came)
// or how the stream ended.
grpc::Status FirstWatchEvent(const WorkerServer& server) {
  auto stub = tandem::v1::Control::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->Watch(&ctx, tandem::v1::WatchRequest());
  tandem::v1::WorkerEvent event;
  if (reader->Read(&event)) {
    ctx.TryCancel();
    reader->Finish().error_code();  // CANCELLED: we hung up
    return grpc::Status::OK;
  }
  return reader->Finish();
}

TEST_F(WorkerServerTest, WedgedLoopIsNotLiveUntilItMovesAgain) {
  WorkerConfig config = LocalConfig();
  config.liveness_timeout = absl::Seconds(30);  // on the simulated clock
  auto server = Start(config);
  ASSERT_OK(server.status());
  WorkerServer& s = **server;
  base::SimulatedClock clock(absl::Now());
  LoopHeartbeat loop("test loop", clock);
  s.health().AddLoop(&loop);
  loop.Beat();
  clock.AdvanceTime(absl::Seconds(29));
  EXPECT_EQ(Probe(s, "/health/live"), "200 ok\n");
  EXPECT_TRUE(FirstWatchEvent(s).ok());
  clock.AdvanceTime(absl::Seconds(2));
  EXPECT_THAT(Probe(s, "/health/live"), StartsWith("503 test loop wedged: one iteration has run for 31s"));
  EXPECT_THAT(Probe(s, "/healthz"), StartsWith("503 test loop wedged"));
  EXPECT_THAT(Probe(s, "/health/ready"), StartsWith("503 test loop wedged"));
  grpc::Status watch;
  EXPECT_TRUE(Eventually([&] { return !(watch = FirstWatchEvent(s)).ok(); },
                         "Watch refused (watchdog tick)"));
  EXPECT_EQ(watch.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(watch.error_message(), HasSubstr("worker not live: test loop wedged"));
  loop.Idle();
  EXPECT_EQ(Probe(s, "/health/live"), "200 ok\n");
  EXPECT_EQ(Probe(s, "/health/ready"), "200 ok\n");
  EXPECT_TRUE(Eventually([&] { return FirstWatchEvent(s).ok(); }, "Watch served again"));
}

TEST_F(WorkerServerTest, DrainingIsLiveButNotReady) {
  auto server = Start(LocalConfig());
  ASSERT_OK(server.status());
  EXPECT_EQ(Probe(**server, "/health/ready"), "200 ok\n");
  EXPECT_TRUE((*server)->Drain(absl::Seconds(1), [] { return 0; }, [] {}));
  EXPECT_EQ(Probe(**server, "/health/live"), "200 ok\n");
  EXPECT_EQ(Probe(**server, "/health/ready"),
            "503 draining: the worker accepts no new requests\n");
}

}  // namespace
}  // namespace tandem::serving
