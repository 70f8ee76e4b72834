// tandem-prefill: a prefill worker. Flags mirror the YAML keys of
// common/serving/worker_config.h (where the defaults are documented); a flag given on
// the command line overrides the file. Prints one line "READY address=...
// grpc_port=... metrics_port=..." to stdout once serving; SIGTERM drains
// (exit 0). The flags and the process live in common/serving/worker_main.h; this
// file only defines the flags whose help is the prefill worker's own.

#include <string>

#include "absl/flags/flag.h"
#include "common/serving/worker_main.h"
#include "prefill_worker/prefill_worker.h"

ABSL_FLAG(std::string, role, "", "prefill (the only role of this binary)");
ABSL_FLAG(std::string, max_running, "", "requests prefilled at once (default 64)");

int main(int argc, char** argv) {
  return tandem::serving::RunWorkerMain<tandem::prefill_worker::PrefillWorker>(
      argc, argv,
      {.program = "tandem-prefill",
       .usage = "tandem-prefill --model=M.gguf [--config=prefill.yaml] [flags]",
       .default_role = tandem::serving::WorkerRole::kPrefill});
}
