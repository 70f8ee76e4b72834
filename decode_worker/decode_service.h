#pragma once
// DecodeService: the gRPC edge of a decode worker (tandem.v1.Decode). Each
// callback validates its request, converts it to the engine's domain types
// and posts it to the DecodeEngine; it never blocks. Streams (Reserve,
// Generate) are QueuedWriteReactors the engine thread feeds; a stream the
// client cancels (or whose deadline passes) cancels its request.
//
// Thread-safe. The engine must outlive the service's server.

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "decode_worker/decode_engine.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::decode_worker {

class DecodeService final : public tandem::v1::Decode::CallbackService {
 public:
  explicit DecodeService(DecodeEngine* engine);

  // The address peers dial for Commit (set once the port is bound, before
  // serving traffic; any thread).
  void set_advertise_address(std::string address);
  std::string advertise_address() const;
  // While draining, Reserve and Generate answer UNAVAILABLE; Commit and
  // Cancel still work (they finish requests in flight).
  void set_draining(bool draining) { draining_.store(draining, std::memory_order_relaxed); }

  grpc::ServerWriteReactor<tandem::v1::DecodeEvent>* Reserve(
      grpc::CallbackServerContext* context, const tandem::v1::ReserveRequest* request) override;
  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* context,
                                   const tandem::v1::CommitRequest* request,
                                   tandem::v1::CommitResponse* response) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const tandem::v1::CancelRequest* request,
                                   tandem::v1::CancelResponse* response) override;
  grpc::ServerWriteReactor<tandem::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const tandem::v1::DecodeSubmit* request) override;

 private:
  absl::StatusOr<RequestSpec> ToSpec(grpc::CallbackServerContext* context,
                                     const tandem::v1::DecodeSubmit& submit) const;

  DecodeEngine* const engine_;
  std::atomic<bool> draining_{false};
  mutable absl::Mutex mu_;
  std::string advertise_address_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::decode_worker
