#pragma once
// Executor: a fixed set of threads running posted tasks in FIFO order, for
// blocking work that must not run on a thread that serves others (the gRPC
// front's request preparation: tokenizing, embedding for the semantic cache
// and complexity routing, which waits on the embedder's batch).
//
// The queue is bounded: Post refuses a task (returns false, the task
// destroyed unrun) when `max_queued` tasks wait, so a flood is refused at
// the door rather than buffered without limit.
//
// Thread-safe. The destructor stops taking tasks, runs every queued task
// and joins the threads.

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace tandem::base {

class Executor {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // `num_threads` >= 1; `max_queued` >= 1 tasks waiting (not yet started).
  Executor(int num_threads, size_t max_queued);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Any thread. False when max_queued tasks wait or the executor is closing.
  bool Post(Task task);

  int num_threads() const { return static_cast<int>(threads_.size()); }
  size_t max_queued() const { return max_queued_; }
  // Tasks waiting (not started).
  size_t queued() const;

 private:
  void Loop();

  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::base
