#pragma once
// The main() of the worker binaries (tandem-prefill, tandem-decode), which
// differ only in the worker class they run:
//
//   int main(int argc, char** argv) {
//     return tandem::RunWorkerMain<tandem::decode_worker::DecodeWorker>(
//         argc, argv, {"tandem-decode", "tandem-decode --model=M.gguf [flags]",
//                      tandem::serving::WorkerRole::kDecode});
//   }
//
// common/serving/worker_main.cc defines --config and one string flag per
// WorkerConfig key, except the keys whose help differs per binary (role,
// max_running) and reservation_deadline (tandem-decode only), which the
// main.cc files define; an unset
// flag ("") keeps the file's or the default value. Only worker binaries may
// link worker_main.cc (it is pulled in by InitWorkerProcess): other binaries
// define flags of the same names.
//
// Process setup; everything here runs on the main thread.

#include <concepts>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/base/termination_signal.h"
#include "common/serving/worker_config.h"
#include "common/serving/worker_server.h"

namespace tandem::serving {

struct WorkerMainOptions {
  const char* program;      // "tandem-decode": starts its own log lines
  const char* usage;        // --help's usage line
  WorkerRole default_role;  // the role before the config file and flags
};

// The WorkerConfig of the command line: `default_role`, then the --config
// YAML file, then each key flag given, then Validate(). Logs the error and
// returns nullopt (exit status 2) on a bad file, flag value or config.
std::optional<WorkerConfig> WorkerConfigFromFlags(WorkerRole default_role);

// First thing in main(), before any thread starts: blocks SIGTERM and SIGINT
// (see common/base/termination_signal.h), parses the command line, logs to
// stderr, and returns WorkerConfigFromFlags(options.default_role).
std::optional<WorkerConfig> InitWorkerProcess(int argc, char** argv,
                                              const WorkerMainOptions& options);

// Prints the one line scripts and tests wait for on stdout:
// "READY address=... grpc_port=... metrics_port=... worker_id=...".
void PrintReadyLine(const WorkerServer& server);

// What RunWorkerMain needs of a worker class: DecodeWorker, PrefillWorker.
template <typename W>
concept RunnableWorker = requires(W& worker, const WorkerConfig& config, absl::Duration grace) {
  { W::Create(config) } -> std::same_as<absl::StatusOr<std::unique_ptr<W>>>;
  { worker.server() } -> std::same_as<const WorkerServer&>;
  { worker.Drain(grace) } -> std::same_as<bool>;
};

// The whole main() of a worker binary: sets the process up, creates the
// worker (exit 2 on a bad config, 1 when it cannot start), prints READY,
// waits for SIGTERM or SIGINT, drains for config.drain_grace and exits 0.
template <RunnableWorker W>
int RunWorkerMain(int argc, char** argv, const WorkerMainOptions& options) {
  const std::optional<WorkerConfig> config = InitWorkerProcess(argc, argv, options);
  if (!config.has_value()) {
    return 2;
  }
  absl::StatusOr<std::unique_ptr<W>> worker = W::Create(*config);
  if (!worker.ok()) {
    LOG(ERROR) << options.program << ": " << worker.status();
    return 1;
  }
  PrintReadyLine((*worker)->server());

  const int sig = base::WaitForTerminationSignal();
  LOG(INFO) << "signal " << sig << ": draining";
  const bool clean = (*worker)->Drain(config->drain_grace);
  worker->reset();
  LOG(INFO) << options.program << " exiting (" << (clean ? "drained" : "grace expired") << ")";
  return 0;
}

}  // namespace tandem::serving
