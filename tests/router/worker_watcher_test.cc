// WorkerWatcher against FakeWorkers: one Watch stream per worker, reconnect
// with backoff after a restart, DNS names re-resolved, heartbeat timeout on
// an injected clock, departures reported.

#include "router/worker_watcher.h"

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_worker.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using testing::FakeWorker;
using ::tandem::testing::Eventually;

class WatcherTest : public ::testing::Test {
 protected:
  std::unique_ptr<WorkerWatcher> Watch(DiscoveryConfig d, base::Clock* clock = &base::RealClock::Get(),
                                       Resolver resolver = ResolveWithGetaddrinfo) {
    d.backoff_initial = absl::Milliseconds(20);
    d.backoff_max = absl::Milliseconds(100);
    WorkerWatcher::Options o;
    o.discovery = d;
    o.clock = clock;
    o.resolver = std::move(resolver);
    o.on_departed = [this](const std::string& a, const absl::Status& why) {
      absl::MutexLock lock(&mu_);
      departed_.push_back(a);
      why_ = why;
    };
    auto w = std::make_unique<WorkerWatcher>(std::move(o));
    w->Start();
    clock_ = clock;
    return w;
  }
  bool Live(WorkerWatcher& w, const std::string& address) {
    auto snap = w.snapshot();
    const WorkerInfo* info = snap->Find(address);
    return info != nullptr && snap->IsLive(*info, clock_->Now());
  }
  std::vector<std::string> departed() {
    absl::MutexLock lock(&mu_);
    return departed_;
  }

  base::Clock* clock_ = nullptr;
  absl::Mutex mu_;
  std::vector<std::string> departed_ ABSL_GUARDED_BY(mu_);
  absl::Status why_ ABSL_GUARDED_BY(mu_);
};

TEST_F(WatcherTest, SnapshotMakesAWorkerLive) {
  auto f = FakeWorker::Start({});
  DiscoveryConfig d;
  d.static_workers = {f->address()};
  auto w = Watch(d);
  ASSERT_TRUE(Eventually([&] { return Live(*w, f->address()); }, "the worker to be live"));
  const WorkerInfo* info = w->snapshot()->Find(f->address());
  EXPECT_EQ(info->desc.role, WorkerRole::kColocated);
  EXPECT_EQ(info->desc.model, "llama");
  EXPECT_EQ(info->desc.kv_block_size, 16);
  EXPECT_NE(info->channel, nullptr);
  w->Stop();
  w->Stop();  // idempotent
}

TEST_F(WatcherTest, ReconnectsAfterRestart) {
  auto f = FakeWorker::Start({});
  const int port = f->port();
  const std::string address = f->address();
  DiscoveryConfig d;
  d.static_workers = {address};
  auto w = Watch(d);
  ASSERT_TRUE(Eventually([&] { return Live(*w, address); }, "the worker to be live"));
  f->Shutdown();  // the stream breaks
  ASSERT_TRUE(Eventually([&] { return !Live(*w, address); }, "the worker to leave rotation"));
  ASSERT_TRUE(Eventually([&] { return departed().size() == 1; }, "the departure report"));
  EXPECT_EQ(departed()[0], address);
  FakeWorker::Options o;
  o.port = port;
  auto again = FakeWorker::Start(o);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(Eventually([&] { return Live(*w, address); }, "the restarted worker to be live"));
}

TEST_F(WatcherTest, HeartbeatTimeoutOnInjectedClock) {
  base::SimulatedClock clock(absl::Now());
  FakeWorker::Options o;
  o.heartbeat_interval = absl::Seconds(1000);  // real heartbeats never come in this test
  auto f = FakeWorker::Start(o);
  DiscoveryConfig d;
  d.static_workers = {f->address()};
  auto w = Watch(d, &clock);
  ASSERT_TRUE(Eventually([&] { return Live(*w, f->address()); }, "the worker to be live"));
  clock.AdvanceTime(absl::Seconds(2));
  EXPECT_TRUE(Live(*w, f->address()));
  clock.AdvanceTime(absl::Seconds(1.5));  // 3.5 s of silence
  EXPECT_FALSE(Live(*w, f->address()));
  ASSERT_TRUE(Eventually([&] { return departed().size() >= 1; }, "the departure report"));
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(std::string(why_.message()), ::testing::HasSubstr("heartbeat"));
}

TEST_F(WatcherTest, DnsNamesAreReResolved) {
  auto a = FakeWorker::Start({});
  auto b = FakeWorker::Start({});
  absl::Mutex mu;
  std::vector<std::string> answer = {a->address()};
  Resolver resolver = [&](const std::string& name) -> absl::StatusOr<std::vector<std::string>> {
    EXPECT_EQ(name, "decode.tandem.svc:7001");
    absl::MutexLock lock(&mu);
    return answer;
  };
  DiscoveryConfig d;
  d.dns_workers = {"decode.tandem.svc:7001"};
  d.dns_refresh = absl::Milliseconds(50);
  auto w = Watch(d, &base::RealClock::Get(), resolver);
  ASSERT_TRUE(Eventually([&] { return Live(*w, a->address()); }, "a to be live"));
  {
    absl::MutexLock lock(&mu);
    answer = {a->address(), b->address()};  // scaled up
  }
  ASSERT_TRUE(Eventually([&] { return Live(*w, b->address()); }, "b to be live"));
  {
    absl::MutexLock lock(&mu);
    answer = {b->address()};  // scaled down
  }
  ASSERT_TRUE(Eventually([&] { return w->snapshot()->Find(a->address()) == nullptr; },
                         "a to be dropped"));
  EXPECT_TRUE(Live(*w, b->address()));
}

TEST_F(WatcherTest, GetaddrinfoResolvesLoopback) {
  absl::StatusOr<std::vector<std::string>> r = ResolveWithGetaddrinfo("localhost:7001");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ::testing::Contains(::testing::AnyOf("127.0.0.1:7001", "[::1]:7001")));
  EXPECT_THAT(ResolveWithGetaddrinfo("no-port"),
              ::tandem::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                          ::testing::HasSubstr("'no-port' is not name:port")));
  EXPECT_THAT(
      ResolveWithGetaddrinfo("does-not-exist.invalid:1"),
      ::tandem::testing::StatusIs(absl::StatusCode::kUnavailable,
                                  ::testing::HasSubstr("resolving 'does-not-exist.invalid:1'")));
}

}  // namespace
}  // namespace tandem::router
