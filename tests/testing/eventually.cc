#include "tests/testing/eventually.h"

#include "absl/time/clock.h"

namespace tandem::testing {

::testing::AssertionResult Eventually(absl::FunctionRef<bool()> pred, absl::string_view what,
                                      absl::Duration bound, absl::Duration poll) {
  const absl::Time until = absl::Now() + bound;
  while (!pred()) {
    if (absl::Now() >= until) {
      return ::testing::AssertionFailure()
             << "timed out after " << absl::FormatDuration(bound) << " waiting for " << what;
    }
    absl::SleepFor(poll);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tandem::testing
