#include "common/base/work_queue.h"

#include <utility>

namespace tandem::base {

bool WorkQueue::Post(Task task) {
  absl::MutexLock lock(&mu_);
  if (closed_) {
    return false;
  }
  tasks_.push_back(std::move(task));
  return true;
}

size_t WorkQueue::RunPending() {
  std::deque<Task> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(tasks_);
  }
  for (Task& t : batch) {
    std::move(t)();
  }
  return batch.size();
}

void WorkQueue::WaitFor(absl::Duration timeout) {
  WaitUntil(RealClock::Get(), absl::Now() + timeout);
}

void WorkQueue::WaitUntil(Clock& clock, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !tasks_.empty() || closed_; };
  clock.AwaitWithDeadline(&mu_, absl::Condition(&ready), deadline);
}

void WorkQueue::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool WorkQueue::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

size_t WorkQueue::size() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

}  // namespace tandem::base
