#include "tests/testing/worker_process.h"

#include "common/base/status_macros.h"
#include "tests/testing/test_paths.h"

namespace tandem::testing {

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args,
    absl::Duration ready_timeout) {
  ChildOptions options;
  options.argv = {binary};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.log_dir = TempDir();
  std::unique_ptr<WorkerProcess> p(new WorkerProcess());
  RETURN_IF_ERROR(p->Spawn(std::move(options)));
  ASSIGN_OR_RETURN(const std::string ready, p->WaitForLine("READY ", ready_timeout));
  p->address_ = Field(ready, "address");
  p->grpc_port_ = IntField(ready, "grpc_port");
  p->metrics_port_ = IntField(ready, "metrics_port");
  return p;
}

}  // namespace tandem::testing
