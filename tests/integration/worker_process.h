#pragma once
// A worker binary (tandem-decode, tandem-prefill) run as a child process for
// integration tests: started with flags, awaited (bounded) until it prints
// its READY line, killed with any signal, reaped with a bounded wait. Its
// stderr (logs) goes to a file under the test's temp dir; Tail() returns the
// end of it for failure messages.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::testing {

class WorkerProcess {
 public:
  // Runs `binary args...`; waits up to `ready_timeout` for "READY ..." on its
  // stdout. Unavailable (with the log tail) when it exits or times out first.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      absl::Duration ready_timeout = absl::Seconds(60));
  ~WorkerProcess();  // SIGKILL if still running, then reap

  const std::string& address() const { return address_; }  // host:port of its gRPC server
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  void Signal(int sig);
  // Waits for the process to exit; its exit code (128 + signal when
  // killed), or DeadlineExceeded.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool running();
  // The last `bytes` of its log.
  std::string Tail(size_t bytes = 4000) const;

 private:
  WorkerProcess() = default;

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  std::string name_;
  std::string log_path_;
  std::string address_;
  int metrics_port_ = -1;
};

}  // namespace tandem::testing
