#pragma once
// grpc.health.v1.Health/Check without generated stubs (Debian's gRPC ships
// the service, not the client): the request for the server's overall health
// is the empty message and the answer's field 1 is the serving status.

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tandem::router::cli {

// OK when `address` answers SERVING within `timeout`; UNAVAILABLE (not
// reachable / NOT_SERVING) or DEADLINE_EXCEEDED otherwise. Blocking.
absl::Status CheckHealth(const std::string& address, absl::Duration timeout);

}  // namespace tandem::router::cli
