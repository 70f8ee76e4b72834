// tandem-decode: a decode worker (role decode) or a colocated worker (role
// colocated). Flags mirror the YAML keys of common/serving/worker_config.h (where the
// defaults are documented); a flag given on the command line overrides the
// file. Prints one line "READY address=... grpc_port=... metrics_port=..." to
// stdout once serving; SIGTERM drains (exit 0). The flags and the process
// live in common/serving/worker_main.h; this file only defines the flags whose help
// is the decode worker's own.

#include <string>

#include "absl/flags/flag.h"
#include "common/serving/worker_main.h"
#include "decode_worker/decode_worker.h"

ABSL_FLAG(std::string, role, "", "decode | colocated (default decode)");
ABSL_FLAG(std::string, max_running, "", "requests in the running batch (default 64)");
ABSL_FLAG(std::string, reservation_deadline, "", "free a reservation not committed by then (30s)");

int main(int argc, char** argv) {
  return tandem::serving::RunWorkerMain<tandem::decode_worker::DecodeWorker>(
      argc, argv,
      {.program = "tandem-decode",
       .usage = "tandem-decode --model=M.gguf [--config=decode.yaml] [flags]",
       .default_role = tandem::serving::WorkerRole::kDecode});
}
