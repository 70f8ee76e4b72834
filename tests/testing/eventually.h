#pragma once
// Waiting in real time for a state another thread reaches (an engine thread,
// a child process): poll a predicate with a generous bound instead of
// sleeping a fixed time and asserting after it.

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace tandem::testing {

// Polls `pred` every `poll` until it holds (true) or `bound` has passed
// (false; the caller's assertion says what was missing).
bool Eventually(absl::FunctionRef<bool()> pred, absl::Duration bound = absl::Seconds(20),
                absl::Duration poll = absl::Milliseconds(1));

}  // namespace tandem::testing
