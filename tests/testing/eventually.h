#pragma once
// Waiting in real time for a state another thread or process reaches (an
// engine thread, a child process): poll a predicate with a generous bound
// instead of sleeping a fixed time and asserting after it.

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tandem::testing {

// Polls `pred` every `poll` until it holds (success) or `bound` has passed
// (failure naming `what` and the bound, so the assertion says what was
// missing). Converts to bool for helpers that return one.
::testing::AssertionResult Eventually(absl::FunctionRef<bool()> pred,
                                      absl::string_view what = "the condition",
                                      absl::Duration bound = absl::Seconds(20),
                                      absl::Duration poll = absl::Milliseconds(1));

}  // namespace tandem::testing
