#include "common/base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "common/base/logging.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tandem::base {
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

// Job protocol.
//
// next_task_ is the claim word of the current job: job tag (24 bits) | task
// count (20 bits) | next task index (20 bits). Tasks are claimed by CAS on the
// whole word, so a thread can only claim a task of the job whose tag it read;
// a worker arriving late (descheduled, asleep) finds the index exhausted or a
// newer tag and claims nothing. active_ counts the current job's unfinished
// tasks. The owner therefore never waits for workers to check in, only for
// tasks that were actually claimed: on a loaded machine a worker that is not
// running costs nothing (its share is taken by the others).
//
// Memory orders. The owner writes fn_ and active_, then publishes the claim
// word with a release store; a successful claim (acq_rel CAS) acquires it, so
// the claimer sees fn_. The owner cannot overwrite fn_ for the next job until
// active_ drops to zero, i.e. until every claimed task has returned. Each
// finished task decrements active_ (release), paired with the owner's acquire
// load, so the owner sees all task side effects when Run() returns.
// generation_ only wakes workers: bumped after the claim word is published.
// The sleep protocol is a Dekker pair: a worker increments sleepers_ then
// re-reads generation_ (under mu_), the owner bumps generation_ then reads
// sleepers_, all seq_cst; so either the worker sees the new job or the owner
// sees the sleeper and notifies under mu_.
namespace {

constexpr int kIndexBits = 20;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr int64_t kMaxJobTasks = kIndexMask;  // larger jobs run in pieces
constexpr uint64_t kTagMask = (uint64_t{1} << (64 - 2 * kIndexBits)) - 1;

constexpr uint64_t PackClaim(uint64_t tag, uint64_t n, uint64_t index) {
  return (tag << (2 * kIndexBits)) | (n << kIndexBits) | index;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)),
      busy_(std::make_unique<BusyCounter[]>(num_threads_)) {
  workers_.reserve(num_threads_ - 1);
  for (int t = 1; t < num_threads_; ++t) {
    workers_.emplace_back([this, t] { WorkerLoop(t); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  WakeSleepers();
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
      RunTask(fn, t, 0);
    }
    return;
  }
  DCHECK(fn_ == nullptr) << "ThreadPool::Run is not reentrant";
  for (int64_t base = 0; base < num_tasks; base += kMaxJobTasks) {
    const int64_t n = std::min(kMaxJobTasks, num_tasks - base);
    // Tasks of this piece are offset by `base`.
    auto piece = [&](int64_t task, int thread) { fn(base + task, thread); };
    absl::FunctionRef<void(int64_t, int)> piece_ref = piece;
    num_tasks_ = n;
    fn_ = &piece_ref;
    active_.store(static_cast<int>(n), std::memory_order_relaxed);
    const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
    next_task_.store(static_cast<int64_t>(PackClaim(gen & kTagMask, n, 0)),
                     std::memory_order_release);
    generation_.store(gen, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      WakeSleepers();
    }
    Work(0);
    // Wait for tasks claimed by workers. Yield now and then in case one was
    // descheduled (the machine may be oversubscribed).
    for (int spins = 0; active_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4096) {
        CpuRelax();
      } else {
        std::this_thread::yield();
      }
    }
    fn_ = nullptr;
  }
}

void ThreadPool::RunTask(absl::FunctionRef<void(int64_t, int)> fn, int64_t task, int thread) {
  if (!accounting_.load(std::memory_order_relaxed)) {
    fn(task, thread);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  fn(task, thread);
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  busy_[thread].nanos.fetch_add(nanos, std::memory_order_relaxed);
}

int64_t ThreadPool::busy_nanos() const {
  int64_t total = 0;
  for (int t = 0; t < num_threads_; ++t) {
    total += busy_[t].nanos.load(std::memory_order_relaxed);
  }
  return total;
}

void ThreadPool::WakeSleepers() {
  {
    // Taking the lock orders the caller's store before any sleeper's
    // predicate check: a worker checks it with mu_ held and releases mu_ only
    // inside cv_.Wait(), so it is either past the check (and will be
    // signalled) or will see the new value.
    absl::MutexLock lock(&mu_);
  }
  cv_.SignalAll();
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
  // The job this call works on is the one whose claim word it reads first.
  int64_t word = next_task_.load(std::memory_order_acquire);
  const uint64_t job = static_cast<uint64_t>(word) >> kIndexBits;  // tag and count
  for (;;) {
    const auto w = static_cast<uint64_t>(word);
    const uint64_t index = w & kIndexMask;
    const uint64_t n = (w >> kIndexBits) & kIndexMask;
    if ((w >> kIndexBits) != job || index >= n) {
      return;  // job finished (or superseded)
    }
    if (next_task_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
      RunTask(*fn_, static_cast<int64_t>(index), thread);
      active_.fetch_sub(1, std::memory_order_release);
      word = next_task_.load(std::memory_order_acquire);
    }
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
          {
            absl::MutexLock lock(&mu_);
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            while (generation_.load(std::memory_order_seq_cst) == seen &&
                   !stop_.load(std::memory_order_seq_cst)) {
              cv_.Wait(&mu_);
            }
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            gen = generation_.load(std::memory_order_acquire);
          }
          break;
        }
      }
    }
    if (stop_.load(std::memory_order_acquire)) {
      return;
    }
    seen = gen;
    Work(thread);
  }
}

}  // namespace tandem::base
