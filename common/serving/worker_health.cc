#include "common/serving/worker_health.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::serving {

absl::Status LoopHeartbeat::Check(absl::Duration timeout) const {
  const int64_t since = busy_since_.load(std::memory_order_relaxed);
  if (since == kIdle) {
    return absl::OkStatus();
  }
  const absl::Duration stuck = clock_.Now() - absl::FromUnixNanos(since);
  if (stuck <= timeout) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(name_, " wedged: one iteration has run for ",
                                             absl::FormatDuration(absl::Trunc(stuck, absl::Milliseconds(1))),
                                             " (liveness_timeout ", absl::FormatDuration(timeout),
                                             ")"));
}

WorkerHealth::~WorkerHealth() { Stop(); }

void WorkerHealth::AddLoop(const LoopHeartbeat* loop) {
  absl::MutexLock lock(&mu_);
  loops_.push_back(loop);
}

void WorkerHealth::SetDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  EvaluateLocked();
}

absl::Status WorkerHealth::Live() const {
  absl::MutexLock lock(&mu_);
  return LiveLocked();
}

absl::Status WorkerHealth::Ready() const {
  absl::MutexLock lock(&mu_);
  return ReadyLocked();
}

absl::Status WorkerHealth::LiveLocked() const {
  for (const LoopHeartbeat* loop : loops_) {
    if (absl::Status s = loop->Check(liveness_timeout_); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerHealth::ReadyLocked() const {
  absl::Status live = LiveLocked();
  if (!live.ok()) {
    return live;
  }
  if (draining_) {
    return absl::UnavailableError("draining: the worker accepts no new requests");
  }
  return absl::OkStatus();
}

void WorkerHealth::EvaluateLocked() {
  if (stopped_ || !on_change_) {
    return;
  }
  absl::Status live = LiveLocked();
  absl::Status ready = ReadyLocked();
  // A wedged loop's message grows every tick: only a change of state counts.
  if (live.ok() == reported_live_.ok() && ready.ok() == reported_ready_.ok()) {
    return;
  }
  reported_live_ = std::move(live);
  reported_ready_ = std::move(ready);
  on_change_(reported_live_, reported_ready_);
}

void WorkerHealth::StartWatchdog(absl::Duration period, OnChange on_change) {
  absl::MutexLock join_lock(&join_mu_);
  if (watchdog_.joinable() || stop_.HasBeenNotified()) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    on_change_ = std::move(on_change);
  }
  watchdog_ = std::thread([this, period] {
    while (!stop_.WaitForNotificationWithTimeout(period)) {
      absl::MutexLock lock(&mu_);
      EvaluateLocked();
    }
  });
}

void WorkerHealth::Stop() {
  absl::MutexLock join_lock(&join_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (!stop_.HasBeenNotified()) {
    stop_.Notify();
  }
  if (watchdog_.joinable()) {
    watchdog_.join();
  }
}

}  // namespace tandem::serving
