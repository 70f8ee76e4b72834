#pragma once
// Worker health, split as DESIGN.md §7 asks: liveness (the engine loops
// run) and readiness (live and not draining, so it can take requests now).
//
// LoopHeartbeat: an engine loop's progress mark. The loop calls Beat() at
// the top of every iteration and Idle() just before it waits for work; a
// loop waiting with nothing to do is not wedged. Any thread may Check() it:
// the loop is wedged when an iteration has run longer than the timeout.
//
// WorkerHealth: what a WorkerServer reports. It combines the loops of its
// worker with the drain state, and a watchdog thread re-evaluates both every
// `period` and hands each change to `on_change` (the server turns it into
// grpc.health.v1 status and Control.Watch streams). The HTTP probes
// (/health/live, /health/ready) call Live() and Ready() directly.
//
// Thread-safe. The watchdog thread is joined by Stop() (idempotent, run by
// the destructor).

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/clock.h"

namespace tandem::serving {

class LoopHeartbeat {
 public:
  // `name` says which loop in every report ("decode engine loop"). `clock`
  // (the loop's) must outlive the heartbeat.
  LoopHeartbeat(std::string name, base::Clock& clock) : name_(std::move(name)), clock_(clock) {}
  LoopHeartbeat(const LoopHeartbeat&) = delete;
  LoopHeartbeat& operator=(const LoopHeartbeat&) = delete;

  const std::string& name() const { return name_; }
  // The loop's thread: an iteration starts (one clock read, one relaxed store).
  void Beat() { busy_since_.store(absl::ToUnixNanos(clock_.Now()), std::memory_order_relaxed); }
  // The loop's thread: it waits for work now (or has stopped).
  void Idle() { busy_since_.store(kIdle, std::memory_order_relaxed); }

  // Any thread. OK while idle or when the current iteration started less
  // than `timeout` ago; otherwise Unavailable naming the loop and how long
  // it has been stuck. (Relaxed loads: a report may be one beat stale.)
  absl::Status Check(absl::Duration timeout) const;

 private:
  static constexpr int64_t kIdle = INT64_MIN;

  const std::string name_;
  base::Clock& clock_;
  std::atomic<int64_t> busy_since_{kIdle};  // Unix nanos on clock_, or kIdle
};

class WorkerHealth {
 public:
  // Called with (live, ready) whenever either turns from OK to an error or
  // back; the first call reports the first evaluation that differs from
  // (OK, OK). Runs under WorkerHealth's
  // lock (calls never overlap), so it must not call back into it.
  using OnChange = std::function<void(const absl::Status& live, const absl::Status& ready)>;

  // `liveness_timeout`: how long one loop iteration may run before the
  // worker counts as wedged (WorkerConfig::liveness_timeout).
  explicit WorkerHealth(absl::Duration liveness_timeout) : liveness_timeout_(liveness_timeout) {}
  ~WorkerHealth();
  WorkerHealth(const WorkerHealth&) = delete;
  WorkerHealth& operator=(const WorkerHealth&) = delete;

  // Any thread. Watches `loop` from now on; it must outlive Stop().
  void AddLoop(const LoopHeartbeat* loop) ABSL_LOCKS_EXCLUDED(mu_);
  // Any thread. The worker stopped accepting requests (SIGTERM): not ready
  // from now on. Reports the change before it returns.
  void SetDraining() ABSL_LOCKS_EXCLUDED(mu_);

  // Any thread. OK, or Unavailable naming the first wedged loop.
  absl::Status Live() const ABSL_LOCKS_EXCLUDED(mu_);
  // Any thread. Live(), then Unavailable("draining").
  absl::Status Ready() const ABSL_LOCKS_EXCLUDED(mu_);

  // Starts the watchdog: every `period` it evaluates Live() and Ready() and
  // calls `on_change` when either changed. Once.
  void StartWatchdog(absl::Duration period, OnChange on_change) ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the watchdog; `on_change` is not called after it returns.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status LiveLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvaluateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration liveness_timeout_;
  mutable absl::Mutex mu_;
  std::vector<const LoopHeartbeat*> loops_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  OnChange on_change_ ABSL_GUARDED_BY(mu_);
  absl::Status reported_live_ ABSL_GUARDED_BY(mu_);
  absl::Status reported_ready_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  // Serializes starting and joining the watchdog (Stop from several threads).
  absl::Mutex join_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::thread watchdog_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace tandem::serving
