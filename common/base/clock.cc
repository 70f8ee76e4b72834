#include "common/base/clock.h"

#include <algorithm>
#include <utility>

namespace tandem::base {

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();
  return *clock;
}

// A thread in SimulatedClock::AwaitWithDeadline. Lock order: the waiter's
// `*mu` before the clock's `mu_`; a waker holds neither while it takes the
// other, and the waiter outlives every waker that picked it (`wakers`).
struct SimulatedClock::Waiter {
  absl::Mutex* const mu;
  const absl::Time deadline;
  bool due = false;  // guarded by *mu
  int wakers = 0;    // guarded by the clock's mu_
};

absl::Time SimulatedClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

bool SimulatedClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                       absl::Time deadline) {
  Waiter w{mu, deadline};
  {
    absl::MutexLock lock(&mu_);
    if (now_ >= deadline) {
      return cond.Eval();
    }
    waiters_.push_back(&w);
  }
  auto ready = [&w, &cond]() { return w.due || cond.Eval(); };
  mu->Await(absl::Condition(&ready));
  bool picked;
  {
    absl::MutexLock lock(&mu_);
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &w));
    picked = w.wakers > 0;
  }
  if (picked) {
    // A waker is about to lock *mu to wake us: let it, then wait it out.
    mu->Unlock();
    {
      absl::MutexLock lock(&mu_);
      auto unpicked = [&w]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return w.wakers == 0; };
      mu_.Await(absl::Condition(&unpicked));
    }
    mu->Lock();
  }
  return cond.Eval();
}

void SimulatedClock::AdvanceTime(absl::Duration d) {
  MoveTo([d](absl::Time now) { return now + d; });
}

void SimulatedClock::SetTime(absl::Time t) {
  MoveTo([t](absl::Time) { return t; });
}

void SimulatedClock::MoveTo(absl::FunctionRef<absl::Time(absl::Time)> to) {
  std::vector<Waiter*> due;
  {
    absl::MutexLock lock(&mu_);
    now_ = to(now_);
    for (Waiter* w : waiters_) {
      if (w->deadline <= now_) {
        ++w->wakers;
        due.push_back(w);
      }
    }
  }
  for (Waiter* w : due) {
    {
      absl::MutexLock lock(w->mu);
      w->due = true;  // the unlock makes the waiter re-check
    }
    absl::MutexLock lock(&mu_);
    --w->wakers;  // `w` may be gone from here on
  }
}

std::vector<absl::Time> SimulatedClock::wakeups() {
  std::vector<absl::Time> out;
  {
    absl::MutexLock lock(&mu_);
    for (const Waiter* w : waiters_) out.push_back(w->deadline);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tandem::base
