// Clock: SimulatedClock moves only when told, and a thread waiting on it in
// AwaitWithDeadline wakes exactly when simulated time reaches its deadline
// (or its condition holds); RealClock reads the wall clock.

#include "common/base/clock.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace tandem::base {
namespace {

using ::tandem::testing::Eventually;

TEST(ClockTest, SimulatedClockMovesOnlyWhenTold) {
  SimulatedClock c(absl::FromUnixSeconds(100));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(100));
  c.AdvanceTime(absl::Seconds(5));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(105));
  c.SetTime(absl::FromUnixSeconds(50));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(50));
  EXPECT_GT(RealClock::Get().Now(), absl::FromUnixSeconds(1600000000));
}

// A thread blocked in clock.AwaitWithDeadline(deadline) on a flag.
class Awaiter {
 public:
  struct Outcome {
    bool returned = false;
    bool result = false;  // AwaitWithDeadline's
    absl::Time at;        // the clock's time when it returned
  };
  Awaiter(Clock& clock, absl::Time deadline)
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
  SimulatedClock c(absl::FromUnixSeconds(100));
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
  SimulatedClock c(absl::FromUnixSeconds(100));
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
  SimulatedClock c(absl::FromUnixSeconds(100));
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
  EXPECT_FALSE(RealClock::Get().AwaitWithDeadline(&mu, absl::Condition(&flag),
                                                  t0 + absl::Milliseconds(20)));
  EXPECT_GE(absl::Now(), t0 + absl::Milliseconds(20));
}

TEST(ClockTest, ManyWaitersEachWakeAtTheirOwnDeadline) {
  SimulatedClock c(absl::UnixEpoch());
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

}  // namespace
}  // namespace tandem::base
