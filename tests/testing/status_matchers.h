#pragma once
// StatusIs / IsOk / IsOkAndHolds matchers shaped as absl/status/status_matchers.h
// (absent from Abseil 20220623).

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace tandem::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& s = GetStatus(arg);
  if (s.code() != code) {
    *result_listener << "status is " << s;
    return false;
  }
  return ::testing::ExplainMatchResult(message_matcher, std::string(s.message()),
                                       result_listener);
}

MATCHER(IsOk, "") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) {
    *result_listener << "status is " << s;
  }
  return s.ok();
}

}  // namespace tandem::testing

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::tandem::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::tandem::testing::IsOk())
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                                 \
  auto TANDEM_TEST_CONCAT(statusor_, __LINE__) = (expr);                                \
  ASSERT_THAT(TANDEM_TEST_CONCAT(statusor_, __LINE__).status(), ::tandem::testing::IsOk()); \
  lhs = std::move(TANDEM_TEST_CONCAT(statusor_, __LINE__)).value()
#define TANDEM_TEST_CONCAT_INNER(a, b) a##b
#define TANDEM_TEST_CONCAT(a, b) TANDEM_TEST_CONCAT_INNER(a, b)
