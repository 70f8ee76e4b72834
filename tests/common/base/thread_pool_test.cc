#include "common/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::base {
namespace {

TEST(ThreadPoolTest, SingleThreadRunsInline) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.num_threads(), 1);
  std::vector<int> hits(100, 0);
  pool.Run(100, [&](int64_t task, int thread) {
    EXPECT_EQ(thread, 0);
    ++hits[task];
  });
  for (int h : hits) {
    EXPECT_EQ(h, 1);
  }
}

TEST(ThreadPoolTest, NonPositiveThreadCountMeansOne) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(), 1);
}

TEST(ThreadPoolTest, ZeroTasksIsANoOp) {
  ThreadPool pool(3);
  bool called = false;
  pool.Run(0, [&](int64_t, int) { called = true; });
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

// Every task runs exactly once, on a valid thread id, across many jobs of
// varied sizes and pool sizes. Per-task counters are plain ints written by
// exactly one task each, so under ThreadSanitizer (this test carries the
// `tsan` label: scripts/check_tsan.sh) a missing happens-before edge where
// Run() publishes the job or collects the results is reported as a race.
TEST(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    for (int job = 0; job < 300; ++job) {
      const int64_t n = (job * 37) % 101;  // includes 0 and 1
      std::vector<int> hits(n, 0);
      std::vector<int> who(n, -1);
      pool.Run(n, [&](int64_t task, int thread) {
        ++hits[task];
        who[task] = thread;
      });
      for (int64_t t = 0; t < n; ++t) {
        ASSERT_EQ(hits[t], 1) << "threads=" << threads << " job=" << job << " task=" << t;
        ASSERT_GE(who[t], 0);
        ASSERT_LT(who[t], threads);
      }
    }
  }
}

TEST(ThreadPoolTest, HugeJobsRunInPieces) {
  // More tasks than one claim word can count (2^20 - 1) still run once each.
  ThreadPool pool(2);
  const int64_t n = (int64_t{1} << 20) + 5;
  std::vector<uint8_t> hits(n, 0);
  pool.Run(n, [&](int64_t task, int) { ++hits[task]; });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), n);
}

TEST(ThreadPoolTest, SlowTasksOnOneThreadDoNotLoseWork) {
  // A task that blocks for a while (as a descheduled worker would) delays
  // only itself: the other threads take the rest, and Run() waits for it.
  ThreadPool pool(3);
  for (int job = 0; job < 5; ++job) {
    std::vector<int> hits(40, 0);
    pool.Run(40, [&](int64_t task, int) {
      if (task == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ++hits[task];
    });
    EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 40) << "job " << job;
  }
}

TEST(ThreadPoolTest, ThreadIdsAreDistinctAtAnyMoment) {
  // Two tasks running at the same time never see the same thread id, so
  // per-thread scratch indexed by it is safe.
  constexpr int kThreads = 4;
  ThreadPool pool(kThreads);
  std::vector<std::atomic<int>> in_use(kThreads);
  std::atomic<int> violations{0};
  for (int job = 0; job < 50; ++job) {
    pool.Run(64, [&](int64_t, int thread) {
      if (in_use[thread].fetch_add(1) != 0) {
        violations.fetch_add(1);
      }
      std::this_thread::yield();
      in_use[thread].fetch_sub(1);
    });
  }
  EXPECT_EQ(violations.load(), 0);
}

TEST(ThreadPoolTest, PerThreadScratchHasNoRaces) {
  // Nested data: each task accumulates into the scratch slot of its thread,
  // then the owner reduces them after Run() returns (which must see all
  // writes). The tsan run (scripts/check_tsan.sh) reports any missing
  // synchronization as a race.
  constexpr int kThreads = 3;
  ThreadPool pool(kThreads);
  std::vector<std::vector<int64_t>> scratch(kThreads, std::vector<int64_t>(16, 0));
  int64_t expected = 0;
  for (int job = 0; job < 100; ++job) {
    for (auto& s : scratch) {
      std::fill(s.begin(), s.end(), 0);
    }
    const int64_t n = 1 + job % 40;
    pool.Run(n, [&](int64_t task, int thread) {
      for (int64_t j = 0; j < 16; ++j) {
        scratch[thread][j] += task + j;
      }
    });
    int64_t total = 0;
    for (const auto& s : scratch) {
      total += std::accumulate(s.begin(), s.end(), int64_t{0});
    }
    expected = 16 * (n * (n - 1) / 2) + n * (15 * 16 / 2);
    ASSERT_EQ(total, expected) << "job " << job;
  }
}

TEST(ThreadPoolTest, ParallelForCoversRangeOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 2, 7, 100, 1001}) {
    for (int64_t grain : {1, 3, 64, 5000}) {
      std::vector<int> hits(n, 0);
      std::atomic<int> chunks{0};
      pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
        EXPECT_LT(begin, end);
        chunks.fetch_add(1);
        for (int64_t i = begin; i < end; ++i) {
          ++hits[i];
        }
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i], 1) << "n=" << n << " grain=" << grain << " i=" << i;
      }
      // About num_threads * 4 chunks, fewer when the grain forbids.
      EXPECT_LE(chunks.load(), 16);
      EXPECT_LE(chunks.load(), (n + grain - 1) / grain);
    }
  }
}

TEST(ThreadPoolTest, WakesAfterWorkersSleep) {
  // Workers spin briefly then sleep; a job after a long idle gap must still
  // run on all of them and finish.
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic<int> sum{0};
    pool.Run(30, [&](int64_t task, int) { sum.fetch_add(static_cast<int>(task)); });
    EXPECT_EQ(sum.load(), 29 * 30 / 2);
  }
}

TEST(ThreadPoolTest, ShutdownWhileWorkersSpinOrSleep) {
  for (int i = 0; i < 20; ++i) {
    ThreadPool pool(4);
    if (i % 2 == 0) {
      pool.Run(8, [](int64_t, int) {});
    }
    // Destroyed right away (workers spinning) or after a job.
  }
  {
    ThreadPool pool(2);
    pool.Run(4, [](int64_t, int) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers asleep
  }
  SUCCEED();
}

TEST(ThreadPoolTest, ManySmallJobsAreCheap) {
  // A decode step issues ~150 jobs; make sure thousands of tiny jobs finish
  // promptly (a lost wake-up or a futex per job would show here as a hang or
  // a very slow loop; the bound is loose for slow sanitizer builds).
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  const auto start = std::chrono::steady_clock::now();
  for (int job = 0; job < 5000; ++job) {
    pool.Run(4, [&](int64_t task, int) { sum.fetch_add(task, std::memory_order_relaxed); });
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(sum.load(), 5000 * 6);
  EXPECT_LT(seconds, 20.0);
}

// Busy accounting counts the time inside tasks on every thread, the caller's
// included, and nothing while off: at least the sum of what the tasks spun,
// at most the pool's threads times the wall time of the jobs.
TEST(ThreadPoolTest, BusyAccountingCountsTimeInsideTasks) {
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    ThreadPool pool(threads);
    auto spin = [](std::chrono::microseconds d) {
      const auto end = std::chrono::steady_clock::now() + d;
      while (std::chrono::steady_clock::now() < end) {
      }
    };
    pool.Run(6, [&](int64_t, int) { spin(std::chrono::microseconds(500)); });
    EXPECT_EQ(pool.busy_nanos(), 0);  // off by default
    pool.set_busy_accounting(true);
    const auto start = std::chrono::steady_clock::now();
    pool.Run(12, [&](int64_t, int) { spin(std::chrono::microseconds(1000)); });
    pool.Run(1, [&](int64_t, int) { spin(std::chrono::microseconds(2000)); });  // runs inline
    const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    pool.set_busy_accounting(false);
    const int64_t busy = pool.busy_nanos();
    EXPECT_GE(busy, 14'000'000);
    EXPECT_LE(busy, int64_t{threads} * wall);
    pool.Run(6, [&](int64_t, int) { spin(std::chrono::microseconds(500)); });
    EXPECT_EQ(pool.busy_nanos(), busy);  // off again: unchanged
  }
}

}  // namespace
}  // namespace tandem::base
