#pragma once
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, shaped as Abseil's (absent from the
// pinned 20220623 release). Swap for absl's once it ships them.

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TANDEM_STATUS_CONCAT_INNER(a, b) a##b
#define TANDEM_STATUS_CONCAT(a, b) TANDEM_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                                 \
  do {                                                        \
    ::absl::Status tandem_status_ = (expr);                   \
    if (ABSL_PREDICT_FALSE(!tandem_status_.ok())) {           \
      return tandem_status_;                                  \
    }                                                         \
  } while (false)

#define TANDEM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (ABSL_PREDICT_FALSE(!tmp.ok())) {               \
    return std::move(tmp).status();                  \
  }                                                  \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL(TANDEM_STATUS_CONCAT(tandem_statusor_, __LINE__), lhs, expr)

namespace tandem::base {

// Prefixes `s`'s message with `context` ("prefill chunk 3: ..."), keeping the code.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) {
    return s;
  }
  return absl::Status(s.code(), std::string(context) + ": " + std::string(s.message()));
}

}  // namespace tandem::base
