#include "common/base/executor.h"

#include <algorithm>
#include <utility>

namespace tandem::base {

Executor::Executor(int num_threads, size_t max_queued) : max_queued_(std::max<size_t>(max_queued, 1)) {
  const int n = std::max(num_threads, 1);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  for (std::thread& t : threads_) {
    t.join();
  }
}

bool Executor::Post(Task task) {
  absl::MutexLock lock(&mu_);
  if (closing_ || tasks_.size() >= max_queued_) {
    return false;
  }
  tasks_.push_back(std::move(task));
  return true;
}

size_t Executor::queued() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

void Executor::Loop() {
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closing_ || !tasks_.empty(); };
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) {
        return;  // closing, nothing left
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace tandem::base
