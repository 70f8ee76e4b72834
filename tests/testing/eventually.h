#pragma once
// Eventually: polls a condition until it holds or a timeout passes, failing
// with what it waited for instead of hanging.

#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tandem::testing {

// Waits (bounded, polling every 5 ms) until `pred` holds.
inline ::testing::AssertionResult Eventually(const std::function<bool()>& pred,
                                             const std::string& what,
                                             absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    if (pred()) {
      return ::testing::AssertionSuccess();
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return ::testing::AssertionFailure() << "timed out after " << absl::FormatDuration(timeout)
                                       << " waiting for " << what;
}

}  // namespace tandem::testing
