#pragma once
// TaskThread: one owned thread running posted closures in order of their due
// time (FIFO among equal times). The progress thread of LoopbackTransport
// and the delay thread of FaultInjectingTransport.

#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::kvtransfer::internal {

class TaskThread {
 public:
  // `shutting_down`: the task runs early because Stop() was called; it
  // should only complete its work with an error.
  using Task = absl::AnyInvocable<void(bool shutting_down) &&>;

  TaskThread();
  ~TaskThread();  // Stop()
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  // Any thread. Runs `task` once `delay` has passed. False (and `task`
  // destroyed without running) once Stop() was called.
  bool Post(Task task, absl::Duration delay = absl::ZeroDuration());

  // Any thread; idempotent. Refuses new tasks, runs every queued one at once
  // with shutting_down = true, and joins. From the thread itself it only
  // asks for the stop (a later Stop() or the destructor joins).
  void Stop();

  bool IsCurrent() const { return std::this_thread::get_id() == thread_id_; }

 private:
  void Run();

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::multimap<absl::Time, Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // serializes joins of thread_
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);  // last: starts after the fields above exist
  // thread_'s id, kept apart because thread_ changes on join. Set by the
  // constructor, then only read; Run() never reads it, and the thread's tasks
  // read it after the Post() that queued them.
  const std::thread::id thread_id_;
};

}  // namespace tandem::kvtransfer::internal
