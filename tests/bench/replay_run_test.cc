// tandem-replay's runner and clients without a server:
//  - open loop: each request leaves at its send_at_s although every earlier
//    one is still running (a slow server never delays the schedule);
//  - fixed concurrency: never more than N in flight, all sent;
//  - the hard stop: nothing sent after --duration; what is in flight at
//    duration + grace is cancelled and recorded CANCELLED; sent = ok + errors;
//  - a dead target (a closed port on 127.0.0.1), over gRPC and HTTP: every
//    request is an error (UNAVAILABLE / CONNECT_FAILED) and the report is
//    still written, with every field;
//  - --target parsing and the loopback check.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/replay/client.h"
#include "bench/replay/report.h"
#include "bench/replay/runner.h"
#include "bench/replay/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::replay {
namespace {

using json = nlohmann::json;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

Workload Schedule(std::vector<double> times) {
  Workload w;
  for (size_t i = 0; i < times.size(); ++i) {
    ReplayRequest r;
    r.id = static_cast<int64_t>(i);
    r.send_at_s = times[i];
    r.prompt = "Once upon a time";
    r.prompt_tokens = 4;
    r.max_tokens = 3;
    w.requests.push_back(r);
  }
  return w;
}

// A server that answers after `latency` (or, with latency = infinite, only
// when cancelled), tracking how many calls run at once.
class FakeClient : public Client {
 public:
  explicit FakeClient(absl::Duration latency) : latency_(latency) {}

  RequestRecord Send(const ReplayRequest& request, absl::Time origin,
                     Cancellation& cancel) override {
    RequestRecord r = internal::NewRecord(request, Protocol::kGrpc);
    r.send_s = internal::SecondsSince(origin);
    {
      absl::MutexLock lock(&mu_);
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    }
    const absl::Time until = absl::Now() + latency_;
    while (!cancel.cancelled() && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    {
      absl::MutexLock lock(&mu_);
      --in_flight_;
    }
    r.end_s = internal::SecondsSince(origin);
    if (cancel.cancelled()) {
      r.status = "CANCELLED";
      return r;
    }
    r.ok = true;
    r.status = "OK";
    r.first_token_s = r.end_s;
    r.chunk_times_s = {r.end_s};
    r.output_tokens = 1;
    return r;
  }

  int max_in_flight() {
    absl::MutexLock lock(&mu_);
    return max_in_flight_;
  }

 private:
  absl::Duration latency_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

RunOptions Quiet() {
  RunOptions o;
  o.progress = ProgressMode::kOff;
  return o;
}

TEST(ReplayRunTest, OpenLoopSendsOnScheduleWhateverTheServerDoes) {
  const Workload w = Schedule({0, 0.1, 0.2, 0.3, 0.4, 0.5});
  FakeClient client(absl::Seconds(1));  // every request outlives the whole schedule
  const std::vector<RequestRecord> records = RunWorkload(w, client, Quiet());
  ASSERT_EQ(records.size(), 6u);
  for (const RequestRecord& r : records) {
    SCOPED_TRACE(r.id);
    EXPECT_TRUE(r.ok);
    EXPECT_DOUBLE_EQ(r.scheduled_s, w.requests[r.id].send_at_s);
    EXPECT_NEAR(r.send_s, r.scheduled_s, 0.05);  // not after the previous one's end
  }
  EXPECT_EQ(client.max_in_flight(), 6);
}

TEST(ReplayRunTest, ConcurrencyKeepsThatManyInFlight) {
  Workload w = Schedule(std::vector<double>(9, 0));
  w.concurrency = 3;
  FakeClient client(absl::Milliseconds(100));
  const std::vector<RequestRecord> records = RunWorkload(w, client, Quiet());
  ASSERT_EQ(records.size(), 9u);
  EXPECT_EQ(client.max_in_flight(), 3);
  double last_send = 0;
  for (const RequestRecord& r : records) {
    EXPECT_TRUE(r.ok);
    last_send = std::max(last_send, r.send_s);
  }
  EXPECT_GT(last_send, 0.15);  // the third wave waited for two waves to end
}

TEST(ReplayRunTest, MaxRequestsBoundsTheRun) {
  const Workload w = Schedule({0, 0, 0, 0, 0});
  FakeClient client(absl::ZeroDuration());
  RunOptions o = Quiet();
  o.max_requests = 2;
  EXPECT_EQ(RunWorkload(w, client, o).size(), 2u);
}

TEST(ReplayRunTest, HardStopCancelsWhatIsInFlight) {
  // Three requests before the 0.3 s duration, two after it; the server never
  // answers, so at 0.3 + 0.2 s the three are cancelled.
  const Workload w = Schedule({0, 0.1, 0.2, 0.6, 0.7});
  FakeClient client(absl::InfiniteDuration());
  RunOptions o = Quiet();
  o.duration_s = 0.3;
  o.grace_s = 0.2;
  const absl::Time start = absl::Now();
  const std::vector<RequestRecord> records = RunWorkload(w, client, o);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ASSERT_EQ(records.size(), 3u);
  for (const RequestRecord& r : records) {
    EXPECT_EQ(r.status, "CANCELLED");
    EXPECT_NEAR(r.end_s, 0.5, 0.2);
  }
  const Summary s = Summarize(records, Slo{});
  EXPECT_EQ(s.requests_sent, s.requests_ok + s.requests_error);
  EXPECT_EQ(s.errors.at("CANCELLED"), 3);
}

TEST(ReplayRunTest, InterruptStopsAtOnce) {
  const Workload w = Schedule({0, 5});
  FakeClient client(absl::InfiniteDuration());
  std::atomic<bool> interrupt{false};
  RunOptions o = Quiet();
  o.interrupt = &interrupt;
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    interrupt.store(true);
  });
  const std::vector<RequestRecord> records = RunWorkload(w, client, o);
  stopper.join();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].status, "CANCELLED");
}

// A port on 127.0.0.1 nobody listens on (bound, then closed).
int DeadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

class DeadTargetTest : public ::testing::TestWithParam<Protocol> {};

TEST_P(DeadTargetTest, EveryRequestIsAnErrorAndTheReportIsWritten) {
  ClientOptions c;
  c.protocol = GetParam();
  c.target = absl::StrCat("127.0.0.1:", DeadPort());
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(c);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<RequestRecord> records =
      RunWorkload(Schedule({0, 0.05, 0.1, 0.15}), **client, Quiet());
  ASSERT_EQ(records.size(), 4u);
  const std::string want = GetParam() == Protocol::kGrpc ? "UNAVAILABLE" : "CONNECT_FAILED";
  for (const RequestRecord& r : records) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.status, want) << r.error;
    EXPECT_FALSE(r.error.empty());
    EXPECT_LT(r.e2e_s(), 5.0);
  }
  const Summary s = Summarize(records, Slo{});
  const std::string dir = absl::StrCat(tandem::testing::TempDir(), "/dead_",
                                       ProtocolName(GetParam()));
  ASSERT_TRUE(WriteReport(dir, records, s, json{{"target", c.target}}).ok());
  std::ifstream in(dir + "/summary.json");
  const json j = json::parse(in);
  EXPECT_EQ(j["requests_sent"], 4);
  EXPECT_EQ(j["requests_ok"], 0);
  EXPECT_EQ(j["errors"], (json{{want, 4}}));
  EXPECT_EQ(j["goodput_rps"], 0.0);
  EXPECT_TRUE(j["ttft_s"]["p50"].is_null());
  EXPECT_EQ(j["run"]["target"], c.target);
  std::ifstream lines(dir + "/requests.jsonl");
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    EXPECT_EQ(json::parse(line)["status"], want);
  }
  EXPECT_EQ(n, 4);
}

INSTANTIATE_TEST_SUITE_P(Protocols, DeadTargetTest,
                         ::testing::Values(Protocol::kGrpc, Protocol::kHttp),
                         [](const ::testing::TestParamInfo<Protocol>& p) {
                           return std::string(ProtocolName(p.param));
                         });

TEST(ReplayRunTest, PlotsOrAClearReasonWhy) {
  const std::string dir = absl::StrCat(tandem::testing::TempDir(), "/plots");
  std::filesystem::create_directories(dir);
  std::vector<RequestRecord> records(2);
  records[0].ok = true;
  records[0].send_s = 0;
  records[0].first_token_s = 0.5;
  records[0].chunk_times_s = {0.5, 0.6, 0.8};
  records[0].output_tokens = 3;
  records[0].end_s = 0.8;
  records[1].status = "UNAVAILABLE";
  const absl::Status s = WritePlots(dir, records);
  EXPECT_TRUE(std::filesystem::exists(dir + "/plot.gp"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/cdf_ttft.dat"));
  if (s.ok()) {
    EXPECT_GT(std::filesystem::file_size(dir + "/latency_cdf.png"), 1000u);
    EXPECT_GT(std::filesystem::file_size(dir + "/throughput.png"), 1000u);
  } else {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gnuplot")));
  }
  // Without gnuplot on PATH: the reason, never a crash.
  const std::string path = std::getenv("PATH") == nullptr ? "" : std::getenv("PATH");
  setenv("PATH", "/nonexistent", 1);
  const absl::Status missing = WritePlots(dir, records);
  setenv("PATH", path.c_str(), 1);
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("gnuplot is not on PATH")));
}

TEST(ReplayRunTest, ParsesTargetsAndKnowsLoopback) {
  absl::StatusOr<HostPort> v6 = ParseTarget("[::1]:8080");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 8080);
  EXPECT_THAT(ParseTarget("localhost"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("'localhost' is not HOST:PORT")));
  EXPECT_THAT(ParseTarget("h:99999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("HOST:PORT")));
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"10.0.0.1", "128.0.0.1", "example.com", "::2", "0.0.0.0"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace tandem::replay
