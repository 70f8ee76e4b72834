#include "tests/testing/watch_load.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::testing {

::testing::AssertionResult WatchLoadUntil(
    const std::string& address, const std::string& label,
    const std::function<bool(int, const tandem::v1::WorkerLoad&)>& done, const std::string& what,
    absl::Duration timeout, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  auto stub = tandem::v1::Control::NewStub(grpc::CreateChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  auto reader = stub->Watch(&ctx, tandem::v1::WatchRequest());
  tandem::v1::WorkerEvent ev;
  tandem::v1::WorkerLoad load;
  while (reader->Read(&ev)) {
    if (ev.has_snapshot()) load = ev.snapshot().load();
    if (ev.has_load()) load = ev.load();
    if (load.total_kv_blocks() > 0 && done(load.total_kv_blocks() - load.free_kv_blocks(), load)) {
      ctx.TryCancel();
      reader->Finish().ok();
      return ::testing::AssertionSuccess();
    }
  }
  const grpc::Status finished = reader->Finish();
  return ::testing::AssertionFailure()
         << label << ": not " << what << " after " << absl::FormatDuration(timeout) << " (Watch: "
         << finished.error_code() << " " << finished.error_message() << "): "
         << (load.total_kv_blocks() - load.free_kv_blocks()) << " KV blocks used ("
         << load.running_requests() << " running, " << load.waiting_requests() << " waiting, "
         << load.cached_kv_blocks() << " cached)";
}

bool Idle(int used, const tandem::v1::WorkerLoad& load) {
  return used == 0 && load.running_requests() == 0 && load.waiting_requests() == 0;
}

}  // namespace tandem::testing
