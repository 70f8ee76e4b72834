#include "common/base/clock.h"

namespace tandem::base {

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();
  return *clock;
}

absl::Time SimulatedClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void SimulatedClock::AdvanceTime(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void SimulatedClock::SetTime(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

}  // namespace tandem::base
