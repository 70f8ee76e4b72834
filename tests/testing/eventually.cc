#include "tests/testing/eventually.h"

#include "absl/time/clock.h"

namespace tandem::testing {

bool Eventually(absl::FunctionRef<bool()> pred, absl::Duration bound, absl::Duration poll) {
  const absl::Time until = absl::Now() + bound;
  while (!pred()) {
    if (absl::Now() >= until) {
      return false;
    }
    absl::SleepFor(poll);
  }
  return true;
}

}  // namespace tandem::testing
