#pragma once
// grpc.health.v1.Health/Check without generated stubs (Debian's gRPC ships
// the service, not the client): the request for the server's overall health
// is the empty message and the answer's field 1 is the serving status.

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tandem::router::cli {

// OK when `address` answers SERVING within `timeout`; UNAVAILABLE (not
// reachable / NOT_SERVING) or DEADLINE_EXCEEDED otherwise. Blocking.
// `credentials`: a worker's internal mTLS (proto::MakeChannelCredentials);
// null: insecure (the router's public port).
absl::Status CheckHealth(const std::string& address, absl::Duration timeout,
                         const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr);

}  // namespace tandem::router::cli
