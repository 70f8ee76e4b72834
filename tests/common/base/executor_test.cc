// Executor: tasks run on its own threads, concurrently up to the thread
// count; a full queue refuses (the task is destroyed unrun); the destructor
// runs everything queued before it returns.

#include "common/base/executor.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace tandem::base {
namespace {

using ::tandem::testing::Eventually;

TEST(ExecutorTest, RunsTasksOffThePostingThreadAndConcurrently) {
  Executor ex(3, 16);
  EXPECT_EQ(ex.num_threads(), 3);
  const std::thread::id poster = std::this_thread::get_id();
  absl::Notification release;
  std::atomic<int> running{0};
  std::atomic<bool> on_poster{false};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ex.Post([&] {
      on_poster = on_poster || std::this_thread::get_id() == poster;
      ++running;
      release.WaitForNotification();
    }));
  }
  // Three blocking tasks run at once on three threads: none waits for another.
  EXPECT_TRUE(Eventually([&] { return running.load() == 3; }, "three tasks running",
                         absl::Seconds(20), absl::Milliseconds(1)));
  EXPECT_FALSE(on_poster.load());
  release.Notify();
}

TEST(ExecutorTest, AFullQueueRefusesAndDestroysTheTask) {
  absl::Notification release;
  std::atomic<int> ran{0};
  {
    Executor ex(1, 2);
    std::atomic<bool> started{false};
    ASSERT_TRUE(ex.Post([&] {
      started = true;
      release.WaitForNotification();
      ++ran;
    }));
    ASSERT_TRUE(Eventually([&] { return started.load(); }, "the first task to start",
                           absl::Seconds(20), absl::Milliseconds(1)));
    EXPECT_TRUE(ex.Post([&] { ++ran; }));
    EXPECT_TRUE(ex.Post([&] { ++ran; }));
    EXPECT_EQ(ex.queued(), 2u);
    auto owned = std::make_shared<int>(7);
    std::weak_ptr<int> watch = owned;
    EXPECT_FALSE(ex.Post([&ran, o = std::move(owned)] { ran += *o; }));
    EXPECT_TRUE(watch.expired()) << "a refused task is destroyed, not kept";
    release.Notify();
  }  // the destructor runs the two queued tasks
  EXPECT_EQ(ran.load(), 3);
}

TEST(ExecutorTest, DestructorRunsEveryQueuedTaskInOrder) {
  std::vector<int> order;  // one thread: tasks run one at a time, in order
  {
    Executor ex(1, 1000);
    for (int i = 0; i < 1000; ++i) {
      ASSERT_TRUE(ex.Post([&order, i] { order.push_back(i); }));
    }
  }
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(order[i], i);
  }
}

}  // namespace
}  // namespace tandem::base
