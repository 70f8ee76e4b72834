#pragma once
// Test helper: watches a worker's load over Control.Watch (the snapshot, then
// load updates) until a condition holds or a timeout passes.

#include <grpcpp/security/credentials.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::testing {

// Watches the worker at `address` (host:port) until `done(used blocks, load)`
// holds, used = total - free. On timeout the failure names `label`, `what`
// and the last load seen. `credentials`: the worker's internal mTLS; null:
// plaintext.
::testing::AssertionResult WatchLoadUntil(
    const std::string& address, const std::string& label,
    const std::function<bool(int, const tandem::v1::WorkerLoad&)>& done, const std::string& what,
    absl::Duration timeout,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr);

// No used blocks, nothing running or waiting.
bool Idle(int used, const tandem::v1::WorkerLoad& load);

}  // namespace tandem::testing
