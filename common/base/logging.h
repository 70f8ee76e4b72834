#pragma once
// The only logging include: LOG(INFO|WARNING|ERROR), VLOG(n), CHECK, DCHECK as
// absl/log spells them, backed by glog until the pinned Abseil has absl/log.

#include <glog/logging.h>

#include "absl/status/status.h"

// CHECK_OK(status_expr): crash with the status message when not OK. Only for
// invariants (a failure means a bug), never for request or peer input.
#define CHECK_OK(expr)                                      \
  do {                                                      \
    const ::absl::Status tandem_check_status_ = (expr);     \
    CHECK(tandem_check_status_.ok()) << tandem_check_status_; \
  } while (false)
