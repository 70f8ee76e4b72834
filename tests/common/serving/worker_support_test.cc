// The common/ pieces the workers are built on (new with them): WorkQueue
// (post from many threads, run in order on the owner; waits on a Clock),
// SimulatedClock (waiters wake when simulated time reaches them), the
// request checks and the wire -> engine sampling conversion.

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "common/base/clock.h"
#include "common/serving/request_validation.h"
#include "common/base/work_queue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace tandem::serving {
namespace {

using ::tandem::testing::Eventually;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

TEST(WorkQueueTest, RunsPostsFromManyThreadsInOrderPerThread) {
  base::WorkQueue q;
  constexpr int kThreads = 4, kPerThread = 2000;
  std::vector<std::vector<int>> seen(kThreads);  // owner thread only
  std::atomic<int> ran{0};
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        ASSERT_TRUE(q.Post([&, t, i] {
          seen[t].push_back(i);
          ran.fetch_add(1, std::memory_order_relaxed);
        }));
      }
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (ran.load() < kThreads * kPerThread && absl::Now() < deadline) {
    q.WaitFor(absl::Milliseconds(10));
    q.RunPending();
  }
  for (auto& p : posters) p.join();
  q.RunPending();
  ASSERT_EQ(ran.load(), kThreads * kPerThread);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kPerThread));
    for (int i = 0; i < kPerThread; ++i) ASSERT_EQ(seen[t][i], i) << "thread " << t;
  }
}

TEST(WorkQueueTest, ClosedQueueRefusesButRunsWhatWasQueued) {
  base::WorkQueue q;
  int ran = 0;
  ASSERT_TRUE(q.Post([&] { ++ran; }));
  q.Close();
  EXPECT_FALSE(q.Post([&] { ++ran; }));
  const absl::Time t0 = absl::Now();
  q.WaitFor(absl::Seconds(10));  // closed: returns at once
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(q.RunPending(), 1u);
  EXPECT_EQ(ran, 1);
}

TEST(WorkQueueTest, WaitForTimesOut) {
  base::WorkQueue q;
  const absl::Time t0 = absl::Now();
  q.WaitFor(absl::Milliseconds(20));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(15));
}

TEST(ClockTest, SimulatedClockMovesOnlyWhenTold) {
  base::SimulatedClock c(absl::FromUnixSeconds(100));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(100));
  c.AdvanceTime(absl::Seconds(5));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(105));
  c.SetTime(absl::FromUnixSeconds(50));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(50));
  EXPECT_GT(base::RealClock::Get().Now(), absl::FromUnixSeconds(1600000000));
}

// A thread blocked in clock.AwaitWithDeadline(deadline) on a flag.
class Awaiter {
 public:
  struct Outcome {
    bool returned = false;
    bool result = false;  // AwaitWithDeadline's
    absl::Time at;        // the clock's time when it returned
  };
  Awaiter(base::Clock& clock, absl::Time deadline)
      : thread_([this, &clock, deadline] {
          absl::MutexLock lock(&mu_);
          const bool held = clock.AwaitWithDeadline(&mu_, absl::Condition(&flag_), deadline);
          outcome_ = Outcome{.returned = true, .result = held, .at = clock.Now()};
        }) {}
  ~Awaiter() { thread_.join(); }
  void SetFlag() {
    absl::MutexLock lock(&mu_);
    flag_ = true;
  }
  Outcome outcome() {
    absl::MutexLock lock(&mu_);
    return outcome_;
  }
  bool returned() { return outcome().returned; }

 private:
  absl::Mutex mu_;
  bool flag_ ABSL_GUARDED_BY(mu_) = false;
  Outcome outcome_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the fields exist
};

TEST(ClockTest, SimulatedAwaitWithDeadlineWakesExactlyWhenTimeReachesIt) {
  base::SimulatedClock c(absl::FromUnixSeconds(100));
  Awaiter a(c, absl::FromUnixSeconds(105));
  ASSERT_TRUE(Eventually([&] { return c.wakeups().size() == 1u; }));
  c.AdvanceTime(absl::Seconds(5) - absl::Nanoseconds(1));
  // Not due: still registered (a woken waiter deregisters before it returns).
  EXPECT_EQ(c.wakeups(), std::vector<absl::Time>{absl::FromUnixSeconds(105)});
  EXPECT_FALSE(a.returned());
  c.AdvanceTime(absl::Nanoseconds(1));
  ASSERT_TRUE(Eventually([&] { return a.returned(); }));
  EXPECT_FALSE(a.outcome().result);  // the deadline, not the condition
  EXPECT_EQ(a.outcome().at, absl::FromUnixSeconds(105));
  EXPECT_TRUE(c.wakeups().empty());
}

TEST(ClockTest, SimulatedAwaitWithDeadlineWakesOnTheCondition) {
  base::SimulatedClock c(absl::FromUnixSeconds(100));
  Awaiter a(c, absl::InfiniteFuture());
  ASSERT_TRUE(Eventually([&] { return c.wakeups().size() == 1u; }));
  c.SetTime(absl::FromUnixSeconds(1000000));  // never reaches an infinite deadline
  EXPECT_FALSE(a.returned());
  a.SetFlag();
  ASSERT_TRUE(Eventually([&] { return a.returned(); }));
  EXPECT_TRUE(a.outcome().result);
  EXPECT_TRUE(c.wakeups().empty());
}

TEST(ClockTest, AwaitWithDeadlineReturnsAtOnceWhenDueOrTrue) {
  base::SimulatedClock c(absl::FromUnixSeconds(100));
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(c.AwaitWithDeadline(&mu, absl::Condition(&flag), absl::FromUnixSeconds(100)));
  flag = true;
  EXPECT_TRUE(c.AwaitWithDeadline(&mu, absl::Condition(&flag), absl::InfiniteFuture()));
  EXPECT_TRUE(c.wakeups().empty());
  // The real clock waits in real time.
  flag = false;
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE(base::RealClock::Get().AwaitWithDeadline(&mu, absl::Condition(&flag),
                                                  t0 + absl::Milliseconds(20)));
  EXPECT_GE(absl::Now(), t0 + absl::Milliseconds(20));
}

TEST(ClockTest, ManyWaitersEachWakeAtTheirOwnDeadline) {
  base::SimulatedClock c(absl::UnixEpoch());
  std::vector<std::unique_ptr<Awaiter>> awaiters;
  for (int i = 1; i <= 4; ++i) {
    awaiters.push_back(std::make_unique<Awaiter>(c, absl::UnixEpoch() + absl::Seconds(i)));
  }
  ASSERT_TRUE(Eventually([&] { return c.wakeups().size() == 4u; }));
  for (int i = 1; i <= 4; ++i) {
    c.AdvanceTime(absl::Seconds(1));
    ASSERT_TRUE(Eventually([&] { return awaiters[i - 1]->returned(); })) << i;
    EXPECT_EQ(c.wakeups().size(), static_cast<size_t>(4 - i));
    for (int j = i; j < 4; ++j) EXPECT_FALSE(awaiters[j]->returned()) << j;
  }
}

TEST(WorkQueueTest, WaitUntilWakesOnAPostOrWhenTheClockReachesTheDeadline) {
  base::WorkQueue q;
  base::SimulatedClock c(absl::FromUnixSeconds(100));
  std::atomic<int> waits{0};
  std::thread owner([&] {
    q.WaitUntil(c, absl::FromUnixSeconds(110));  // woken by the post
    waits.fetch_add(1);
    EXPECT_EQ(q.RunPending(), 1u);
    q.WaitUntil(c, absl::FromUnixSeconds(110));  // woken by time
    waits.fetch_add(1);
    q.WaitUntil(c, absl::FromUnixSeconds(110));  // already due: returns at once
    waits.fetch_add(1);
  });
  ASSERT_TRUE(Eventually([&] { return c.wakeups().size() == 1u; }));
  ASSERT_TRUE(q.Post([] {}));
  ASSERT_TRUE(Eventually([&] { return waits.load() == 1 && c.wakeups().size() == 1u; }));
  c.AdvanceTime(absl::Seconds(9));
  EXPECT_EQ(waits.load(), 1);
  c.AdvanceTime(absl::Seconds(1));
  EXPECT_TRUE(Eventually([&] { return waits.load() == 3; }));
  owner.join();
}

engine::ModelConfig SmallModel() {
  engine::ModelConfig m;
  m.vocab_size = 100;
  m.context_length = 64;
  return m;
}

TEST(RequestValidationTest, NamesTheProblem) {
  const engine::ModelConfig m = SmallModel();
  engine::SamplingParams ok;
  EXPECT_OK(ValidateGenerationRequest(m, {1, 2, 3}, 10, ok));
  EXPECT_THAT(ValidateGenerationRequest(m, {}, 10, ok),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prompt is empty")));
  EXPECT_THAT(ValidateGenerationRequest(m, {1, 100}, 10, ok),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("prompt token 1 has id 100, outside the vocabulary [0, 100)")));
  EXPECT_THAT(ValidateGenerationRequest(m, {1}, 0, ok),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_tokens must be > 0")));
  EXPECT_THAT(ValidateGenerationRequest(m, {1, 2, 3, 4}, 61, ok),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("prompt (4 tokens) + max_tokens (61) exceeds the model context "
                                 "of 64")));
  EXPECT_OK(ValidateGenerationRequest(m, {1, 2, 3, 4}, 60, ok));
  engine::SamplingParams bad;
  bad.temperature = -0.5f;
  EXPECT_THAT(ValidateGenerationRequest(m, {1}, 1, bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("temperature")));
  engine::SamplingParams stop;
  stop.stop_token_ids = {5, 1000};
  EXPECT_THAT(ValidateGenerationRequest(m, {1}, 1, stop),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stop token id 1000")));
}

TEST(RequestValidationTest, SamplingFromProtoMapsProto3DefaultsToOff) {
  tandem::v1::SamplingParams p;
  engine::SamplingParams s = SamplingFromProto(p);
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.repetition_penalty, 1.0f);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_OK(s.Validate());
  p.set_temperature(0.8f);
  p.set_top_p(0.9f);
  p.set_seed(42);
  p.add_stop("\n");
  p.add_stop_token_ids(7);
  p.set_top_k(-1);
  s = SamplingFromProto(p);
  EXPECT_EQ(s.temperature, 0.8f);
  EXPECT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.stop_strings, std::vector<std::string>{"\n"});
  EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{7});
  EXPECT_THAT(s.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_k")));
}

}  // namespace
}  // namespace tandem::serving
