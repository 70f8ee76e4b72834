#pragma once
// Fork/join thread pool for compute kernels. The calling thread takes part in
// every job, so a pool of N threads starts N-1 workers. Workers spin briefly
// between jobs before sleeping, because a decode step issues hundreds of
// short jobs (one per matmul) and a futex wake per job would dominate them.
//
// One job at a time: Run() is called by the single owner thread (the engine
// thread); it is not reentrant and must not be called from inside a job.

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace tandem::base {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task, thread) for task in [0, num_tasks), tasks handed out
  // dynamically; `thread` in [0, num_threads()) identifies the executing
  // thread (for per-thread scratch). Returns when all tasks are done.
  void Run(int64_t num_tasks, absl::FunctionRef<void(int64_t task, int thread)> fn);

  // Splits [0, n) into about num_threads()*4 ranges of at least `grain` items.
  void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

  // Busy accounting (off by default; for benchmarks): while on, every thread
  // adds the time it spends inside tasks to busy_nanos(). busy_nanos() /
  // (num_threads() x wall time) is the share of the pool's thread time spent
  // in its jobs' work; the rest is hand-offs, waiting for the slowest thread
  // and whatever the owner does between jobs. Switch it only between jobs.
  void set_busy_accounting(bool on) { accounting_.store(on, std::memory_order_relaxed); }
  int64_t busy_nanos() const;

 private:
  // One task on `thread`, timed when accounting is on.
  void RunTask(absl::FunctionRef<void(int64_t, int)> fn, int64_t task, int thread);
  void WorkerLoop(int thread) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every sleeping worker after generation_ or stop_ changed.
  void WakeSleepers() ABSL_LOCKS_EXCLUDED(mu_);
  void Work(int thread);

  const int num_threads_;
  std::vector<std::thread> workers_;
  // Job state. `generation_` is bumped (release) after the job fields are set;
  // workers acquire it before reading them.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> active_{0};
  int64_t num_tasks_ = 0;
  absl::FunctionRef<void(int64_t, int)>* fn_ = nullptr;
  std::atomic<bool> stop_{false};
  // Sleep/wake only: mu_ guards no field. The wake condition is the atomics
  // generation_ and stop_, which the owner changes outside mu_ and then takes
  // mu_ once before signalling (see the sleep protocol in thread_pool.cc).
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> accounting_{false};
  struct alignas(64) BusyCounter {
    std::atomic<int64_t> nanos{0};
  };
  std::unique_ptr<BusyCounter[]> busy_;  // one per thread, own cache lines
};

}  // namespace tandem::base
