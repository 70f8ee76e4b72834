// WorkQueue: posts from many threads run in order on the owner thread; a
// closed queue refuses new work but runs what was queued; WaitFor is bounded.

#include "common/base/work_queue.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace tandem::base {
namespace {

using ::tandem::testing::Eventually;

TEST(WorkQueueTest, RunsPostsFromManyThreadsInOrderPerThread) {
  WorkQueue q;
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
  WorkQueue q;
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
  WorkQueue q;
  const absl::Time t0 = absl::Now();
  q.WaitFor(absl::Milliseconds(20));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(15));
}

TEST(WorkQueueTest, WaitUntilWakesOnAPostOrWhenTheClockReachesTheDeadline) {
  WorkQueue q;
  SimulatedClock c(absl::FromUnixSeconds(100));
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

}  // namespace
}  // namespace tandem::base
