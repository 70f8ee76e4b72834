#include "kvtransfer/internal/task_thread.h"

#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem::kvtransfer::internal {

TaskThread::TaskThread() : thread_([this] { Run(); }), thread_id_(thread_.get_id()) {}

TaskThread::~TaskThread() { Stop(); }

bool TaskThread::Post(Task task, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return false;
  }
  // multimap inserts equal keys after the existing ones: FIFO among equals.
  tasks_.emplace(absl::Now() + delay, std::move(task));
  cv_.Signal();
  return true;
}

void TaskThread::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.Signal();
  }
  if (IsCurrent()) {
    return;
  }
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) {
    thread_.join();
  }
}

void TaskThread::Run() {
  while (true) {
    Task task;
    bool shutting_down = false;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        if (stopping_) {
          if (tasks_.empty()) {
            return;
          }
          shutting_down = true;
          break;
        }
        if (!tasks_.empty() && tasks_.begin()->first <= absl::Now()) {
          break;
        }
        if (tasks_.empty()) {
          cv_.Wait(&mu_);
        } else {
          cv_.WaitWithDeadline(&mu_, tasks_.begin()->first);
        }
      }
      task = std::move(tasks_.begin()->second);
      tasks_.erase(tasks_.begin());
    }
    std::move(task)(shutting_down);
  }
}

}  // namespace tandem::kvtransfer::internal
