#pragma once
// PrefillService: the gRPC edge of a prefill worker (tandem.v1.Prefill).
// Validates the request and its reservation (layout mismatch ->
// FAILED_PRECONDITION naming both layouts), converts them to a PrefillJob and
// posts it to the PrefillEngine; never blocks. A call the client cancels (or
// whose deadline passes) cancels its job.
//
// Thread-safe. The engine must outlive the service's server.

#include <atomic>

#include "absl/status/statusor.h"
#include "prefill_worker/prefill_engine.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::prefill_worker {

class PrefillService final : public tandem::v1::Prefill::CallbackService {
 public:
  explicit PrefillService(PrefillEngine* engine);

  // While draining, new Prefill calls answer UNAVAILABLE.
  void set_draining(bool draining) { draining_.store(draining, std::memory_order_relaxed); }

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const tandem::v1::PrefillRequest* request,
                                    tandem::v1::PrefillResponse* response) override;

  // The conversion and checks Prefill applies (pure; any thread).
  static absl::StatusOr<PrefillJob> ToJob(const tandem::v1::PrefillRequest& request,
                                          const engine::ModelConfig& model,
                                          const kvtransfer::KvLayout& local_layout);

 private:
  PrefillEngine* const engine_;
  std::atomic<bool> draining_{false};
};

}  // namespace tandem::prefill_worker
