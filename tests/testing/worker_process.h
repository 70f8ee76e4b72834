#pragma once
// A worker binary (tandem-decode, tandem-prefill) run as a child process for
// integration tests: a ChildProcess started with flags and awaited (bounded)
// until it prints its READY line, whose address and ports it keeps. Its
// stderr (logs) goes to a file under the test's temp dir; Tail() returns the
// end of it for failure messages.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/child_process.h"

namespace tandem::testing {

class WorkerProcess : public ChildProcess {
 public:
  // Runs `binary args...`; waits up to `ready_timeout` for "READY ..." on its
  // stdout. Unavailable or DeadlineExceeded (with the log tail) when it exits
  // or times out first.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      absl::Duration ready_timeout = absl::Seconds(60));

  const std::string& address() const { return address_; }  // host:port of its gRPC server
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  WorkerProcess() = default;

  std::string address_;
  int grpc_port_ = -1;
  int metrics_port_ = -1;
};

}  // namespace tandem::testing
