#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tandem {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// How long an idle worker spins before it sleeps on the condition variable.
// Decode issues jobs back to back with only short single-threaded gaps
// (norms, rope, sampling) between them, all far under this; a pool left idle
// longer than this costs one futex wake on its next job.
constexpr auto kSpinBudget = std::chrono::microseconds(200);
// Pause instructions between clock reads while spinning.
constexpr int kSpinsPerClockRead = 64;

}  // namespace

// Memory orders. The owner publishes a job by writing num_tasks_, fn_,
// next_task_, active_ and then bumping generation_ (seq_cst, so also a
// release); a worker acquires generation_ before reading the job fields. A
// worker's final decrement of active_ is a release that pairs with the
// owner's acquire load of active_ in Run(), so the owner may overwrite the job
// fields (and the task results written by workers are visible) once it reads
// zero. The sleep protocol is a Dekker pair: a worker increments sleepers_
// then re-reads generation_ (under mu_), the owner bumps generation_ then
// reads sleepers_, all seq_cst; so either the worker sees the new job or the
// owner sees the sleeper and notifies under mu_.
ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int t = 1; t < num_threads_; ++t) {
    workers_.emplace_back([this, t] { WorkerLoop(t); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  {
    // Taking the lock orders the store before any sleeper's predicate check.
    std::lock_guard<std::mutex> lock(mu_);
  }
  cv_.notify_all();
  for (std::thread& w : workers_) {
    w.join();
  }
}

void ThreadPool::Run(int64_t num_tasks, absl::FunctionRef<void(int64_t task, int thread)> fn) {
  if (num_tasks <= 0) {
    return;
  }
  if (num_threads_ == 1 || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) {
      fn(t, 0);
    }
    return;
  }
  DCHECK(fn_ == nullptr) << "ThreadPool::Run is not reentrant";
  num_tasks_ = num_tasks;
  fn_ = &fn;
  next_task_.store(0, std::memory_order_relaxed);
  active_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
    }
    cv_.notify_all();
  }
  Work(0);
  // Wait for the workers to check out of this job. Yield now and then in case
  // a worker was descheduled (the machine may be oversubscribed).
  for (int spins = 0; active_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             absl::FunctionRef<void(int64_t begin, int64_t end)> fn) {
  if (n <= 0) {
    return;
  }
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t chunks = std::min<int64_t>(int64_t{num_threads_} * 4, max_chunks);
  const int64_t chunk = (n + chunks - 1) / chunks;
  Run(chunks, [&](int64_t task, int /*thread*/) {
    const int64_t begin = task * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) {
      fn(begin, end);
    }
  });
}

void ThreadPool::Work(int thread) {
  const int64_t n = num_tasks_;
  const absl::FunctionRef<void(int64_t, int)>& fn = *fn_;
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n) {
      return;
    }
    fn(task, thread);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen && !stop_.load(std::memory_order_relaxed)) {
      auto deadline = std::chrono::steady_clock::now() + kSpinBudget;
      for (int spins = 1;; ++spins) {
        CpuRelax();
        gen = generation_.load(std::memory_order_acquire);
        if (gen != seen || stop_.load(std::memory_order_relaxed)) {
          break;
        }
        if (spins % kSpinsPerClockRead == 0 && std::chrono::steady_clock::now() > deadline) {
          std::unique_lock<std::mutex> lock(mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          cv_.wait(lock, [&] {
            return generation_.load(std::memory_order_seq_cst) != seen ||
                   stop_.load(std::memory_order_seq_cst);
          });
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
          gen = generation_.load(std::memory_order_acquire);
          break;
        }
      }
    }
    if (stop_.load(std::memory_order_acquire)) {
      return;
    }
    seen = gen;
    Work(thread);
    active_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace tandem
