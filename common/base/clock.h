#pragma once
// Injected time, shaped like absl::Clock (absent from Abseil 20220623):
// components that decide on deadlines take a `Clock&`; production passes
// RealClock, tests a SimulatedClock they advance by hand.
//
// Thread-safe: every method may be called from any thread.

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem::base {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

class RealClock final : public Clock {
 public:
  // The process-wide real clock (never destroyed).
  static RealClock& Get();
  absl::Time Now() override { return absl::Now(); }
};

class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() override;
  void AdvanceTime(absl::Duration d);
  void SetTime(absl::Time t);

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::base
