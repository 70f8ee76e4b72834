#pragma once
// WorkQueue: the "post, don't lock" primitive. State owned by one thread (an
// engine thread) is changed only by that thread; other threads Post()
// closures that the owner runs between its own work (RunPending), and the
// owner sleeps in WaitFor() when it has nothing else to do.
//
// Post() is thread-safe and never blocks on the owner's work (a short mutex
// only). RunPending() and WaitFor() are for the owner thread only.

#include <cstddef>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"

namespace tandem::base {

class WorkQueue {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // Any thread. Returns false (and destroys `task` unrun) once Close()d.
  bool Post(Task task);

  // Owner thread. Runs every task posted before the call, in Post() order
  // (tasks posted by those tasks run on the next call). Returns how many ran.
  size_t RunPending();

  // Owner thread. Returns when a task is pending, the queue is closed, or
  // `timeout` (real time) has passed.
  void WaitFor(absl::Duration timeout);
  // Owner thread. Returns when a task is pending, the queue is closed, or
  // `clock` reaches `deadline` (a SimulatedClock moved past it wakes this).
  void WaitUntil(Clock& clock, absl::Time deadline);

  // Any thread. Later Posts fail; tasks already queued still run on the
  // owner's next RunPending().
  void Close();
  bool closed() const;
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::base
