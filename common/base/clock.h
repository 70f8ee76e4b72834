#pragma once
// Injected time, shaped like absl::Clock (absent from Abseil 20220623):
// components that decide on deadlines take a `Clock&`; production passes
// RealClock, tests a SimulatedClock they advance by hand.
//
// Thread-safe: every method may be called from any thread.

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem::base {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // absl::Mutex::AwaitWithDeadline on this clock's time: `*mu` is held by
  // the caller and released while waiting, until `cond` holds or Now()
  // reaches `deadline` (a SimulatedClock's AdvanceTime/SetTime wakes the
  // waiter). Returns whether `cond` holds; `*mu` is held again on return.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

class RealClock final : public Clock {
 public:
  // The process-wide real clock (never destroyed).
  static RealClock& Get();
  absl::Time Now() override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu->AwaitWithDeadline(cond, deadline);
  }
};

class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Both wake every AwaitWithDeadline whose deadline the new time reaches.
  void AdvanceTime(absl::Duration d);
  void SetTime(absl::Time t);
  // The deadlines threads blocked in AwaitWithDeadline wait for, earliest
  // first (a test can wait until an engine thread sleeps until a given time
  // before it moves the clock).
  std::vector<absl::Time> wakeups();

 private:
  struct Waiter;
  // Sets now_ to to(now_), then wakes the waiters that are due.
  void MoveTo(absl::FunctionRef<absl::Time(absl::Time)> to);

  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::base
