// Worker liveness in one process: a real DecodeWorker (colocated) behind a
// real RouterServer, and a real PrefillWorker, each with a short
// liveness_timeout. A test wedges an engine loop with a task that blocks the
// engine thread (PostForTest) and checks every place the wedge must show:
//  - the worker's plaintext probes: /health/live and /healthz 503 naming the
//    loop, /health/ready 503;
//  - grpc.health.v1 NOT_SERVING;
//  - Control.Watch: an open stream ends UNAVAILABLE naming the loop and a
//    new one is refused the same way;
//  - the router: the worker leaves rotation, /health/ready 503 naming the
//    model and the reason;
// and, once the task returns, that each comes back (200, SERVING, a Watch
// snapshot, the router ready and a completion served).
// An idle worker (no work for longer than liveness_timeout) stays live.
//
// Known gaps: the wedge is a blocked task between iterations, not a stuck
// compute kernel inside Engine::Step (both stop the same heartbeat).

#include <httplib.h>

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "decode_worker/decode_worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prefill_worker/prefill_worker.h"
#include "router/cli/health_client.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/router/router_harness.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem {
namespace {

namespace v1 = ::tandem::v1;
using ::tandem::testing::Eventually;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

// Short enough for a quick test, long enough that an engine step of the
// 260K-parameter model on a loaded CI machine never counts as a wedge.
constexpr absl::Duration kLivenessTimeout = absl::Milliseconds(500);

serving::WorkerConfig Config(serving::WorkerRole role) {
  serving::WorkerConfig c;
  c.role = role;
  c.model = tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf");
  c.listen = "127.0.0.1:0";
  c.metrics_host = "127.0.0.1";
  c.metrics_port = 0;
  c.threads = 1;
  c.kv_blocks = 64;
  c.transport = "loopback";
  c.heartbeat_interval = absl::Milliseconds(100);
  c.liveness_timeout = kLivenessTimeout;
  return c;
}

// GET `path` on 127.0.0.1:`port`: "<status> <body>", or "no answer".
std::string Get(int port, const std::string& path) {
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(5, 0);
  auto res = http.Get(path.c_str());
  return res ? absl::StrCat(res->status, " ", res->body) : "no answer";
}

// Eventually GET `path` answers `status` with a body containing `needle`.
::testing::AssertionResult Answers(int port, const std::string& path, int status,
                                   const std::string& needle) {
  std::string last;
  ::testing::AssertionResult r = Eventually(
      [&] {
        last = Get(port, path);
        return absl::StartsWith(last, absl::StrCat(status, " ")) &&
               absl::StrContains(last, needle);
      },
      absl::StrCat(path, " -> ", status, " with '", needle, "'"), absl::Seconds(20),
      absl::Milliseconds(20));
  return r << " (last answer: " << last << ")";
}

// The first Control.Watch event of the worker at `address`: OK with a
// snapshot, or the status the stream ended with.
absl::Status WatchOnce(const std::string& address) {
  auto stub =
      v1::Control::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  auto reader = stub->Watch(&ctx, v1::WatchRequest());
  v1::WorkerEvent ev;
  if (reader->Read(&ev) && ev.has_snapshot()) {
    ctx.TryCancel();
    reader->Finish().error_code();  // CANCELLED: we hung up
    return absl::OkStatus();
  }
  const grpc::Status st = reader->Finish();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

// Blocks the engine thread of `engine` until the returned cleanup runs (at
// the end of the scope, also when an assertion returns early).
template <typename Engine>
auto Wedge(Engine& engine, absl::Notification& release) {
  EXPECT_TRUE(engine.PostForTest([&release] { release.WaitForNotification(); }));
  return absl::Cleanup([&release] {
    if (!release.HasBeenNotified()) release.Notify();
  });
}

TEST(WorkerLivenessTest, WedgedDecodeLoopLeavesRotationAndComesBack) {
  absl::StatusOr<std::unique_ptr<decode_worker::DecodeWorker>> created =
      decode_worker::DecodeWorker::Create(Config(serving::WorkerRole::kColocated));
  ASSERT_TRUE(created.ok()) << created.status();
  decode_worker::DecodeWorker& worker = **created;
  const int metrics = worker.server().metrics_port();
  const std::string address = worker.server().address();

  router::RouterConfig rc;
  rc.mode = router::RoutingMode::kColocated;
  rc.discovery.static_workers = {address};
  rc.discovery.backoff_max = absl::Milliseconds(500);
  router::testing::RouterHarness router(rc);
  ASSERT_TRUE(router.WaitForLive(1));
  ASSERT_TRUE(Answers(router.http_port(), "/health/ready", 200, ""));

  // Idle for several liveness timeouts: waiting for work is not a wedge.
  absl::SleepFor(3 * kLivenessTimeout);
  EXPECT_EQ(Get(metrics, "/health/live"), "200 ok\n");
  EXPECT_EQ(Get(metrics, "/healthz"), "200 ok\n");
  EXPECT_EQ(Get(metrics, "/health/ready"), "200 ok\n");
  EXPECT_OK(router::cli::CheckHealth(address, absl::Seconds(5)));

  {
    absl::Notification release;
    auto unwedge = Wedge(worker.EngineForTest(), release);
    EXPECT_TRUE(Answers(metrics, "/health/live", 503, "decode engine loop wedged"));
    EXPECT_TRUE(Answers(metrics, "/healthz", 503, "decode engine loop wedged"));
    EXPECT_TRUE(Answers(metrics, "/health/ready", 503, "decode engine loop wedged"));
    EXPECT_TRUE(Eventually(
        [&] { return !router::cli::CheckHealth(address, absl::Seconds(1)).ok(); },
        "grpc.health.v1 NOT_SERVING"));
    EXPECT_THAT(router::cli::CheckHealth(address, absl::Seconds(5)),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not serving")));
    EXPECT_THAT(WatchOnce(address),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("decode engine loop wedged")));
    EXPECT_TRUE(Answers(router.http_port(), "/health/ready", 503, "no live colocated worker"));
    EXPECT_THAT(Get(router.http_port(), "/health/ready"), HasSubstr("stories260K"));
  }

  EXPECT_TRUE(Answers(metrics, "/health/live", 200, "ok"));
  EXPECT_TRUE(Answers(metrics, "/health/ready", 200, "ok"));
  EXPECT_TRUE(Eventually([&] { return router::cli::CheckHealth(address, absl::Seconds(1)).ok(); },
                         "grpc.health.v1 SERVING again"));
  EXPECT_OK(WatchOnce(address));
  EXPECT_TRUE(router.WaitForLive(1, absl::Seconds(20)));
  EXPECT_TRUE(Answers(router.http_port(), "/health/ready", 200, ""));
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.mutable_token_ids()->add_ids(1);
  req.set_max_tokens(4);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto reader = router.stub().Generate(&ctx, req);
  v1::GenerateResponse m;
  int tokens = 0;
  while (reader->Read(&m)) tokens += m.tokens_size();
  const grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(tokens, 4);
}

TEST(WorkerLivenessTest, WedgedPrefillLoopIsNotLiveUntilReleased) {
  absl::StatusOr<std::unique_ptr<prefill_worker::PrefillWorker>> created =
      prefill_worker::PrefillWorker::Create(Config(serving::WorkerRole::kPrefill));
  ASSERT_TRUE(created.ok()) << created.status();
  prefill_worker::PrefillWorker& worker = **created;
  const int metrics = worker.server().metrics_port();
  const std::string address = worker.server().address();
  EXPECT_EQ(Get(metrics, "/health/live"), "200 ok\n");
  EXPECT_OK(WatchOnce(address));

  // A watcher (as a router is) connected before the wedge.
  auto stub =
      v1::Control::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto watch = stub->Watch(&watch_ctx, v1::WatchRequest());
  v1::WorkerEvent ev;
  ASSERT_TRUE(watch->Read(&ev));
  ASSERT_TRUE(ev.has_snapshot());
  {
    absl::Notification release;
    auto unwedge = Wedge(worker.EngineForTest(), release);
    // The open stream ends, heartbeats or not, within the timeout plus
    // a few watchdog ticks (bounded generously by the stream's deadline).
    while (watch->Read(&ev)) {
    }
    const grpc::Status ended = watch->Finish();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
    EXPECT_THAT(ended.error_message(), HasSubstr("prefill engine loop wedged"));
    EXPECT_TRUE(Answers(metrics, "/health/live", 503, "prefill engine loop wedged"));
    EXPECT_TRUE(Answers(metrics, "/health/ready", 503, "prefill engine loop wedged"));
    EXPECT_THAT(router::cli::CheckHealth(address, absl::Seconds(5)),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not serving")));
    EXPECT_THAT(WatchOnce(address),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("prefill engine loop wedged")));
  }
  EXPECT_TRUE(Answers(metrics, "/health/live", 200, "ok"));
  EXPECT_TRUE(Eventually([&] { return router::cli::CheckHealth(address, absl::Seconds(1)).ok(); },
                         "grpc.health.v1 SERVING again"));
  EXPECT_OK(WatchOnce(address));
}

}  // namespace
}  // namespace tandem
