#pragma once
// One worker attempt of one choice of an admitted request (ChoiceCall), and
// what it reports to its RequestRun when it ends (ChoiceOutcome). Private to
// the router (see request_run.h for who owns what).
//
// Ownership: a ChoiceCall holds its run and is kept alive by its in-flight
// gRPC reactions (each holds a shared_ptr released in OnDone); the run holds
// the call while it is live.
//
// Threads: gRPC callback threads. Stream-side state is touched only by its
// stream's reactions (serialized by gRPC); state shared with the prefill
// callback and Cancel() is under mu_.

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine/sampling.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "router/generation.h"
#include "router/picker.h"
#include "router/request.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::router {
class Router;
}

namespace tandem::router::internal {

struct ChoiceOutcome {
  absl::Status status;                 // OK: finished with `reason`
  FinishReason reason = FinishReason::kLength;
  bool produced_output = false;        // any token arrived (no retry after that)
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  absl::Duration prefill = absl::ZeroDuration();
  absl::Duration kv_transfer = absl::ZeroDuration();
  absl::Time reserved_at = absl::InfinitePast();
  std::string failed_worker;           // address to exclude on retry
};

class RequestRun;

class ChoiceCall : public std::enable_shared_from_this<ChoiceCall> {
 public:
  ChoiceCall(std::shared_ptr<RequestRun> run, int32_t index, int32_t attempt,
             const RouteDecision& route);
  ~ChoiceCall();

  void Start();
  // Any thread; first reason wins; no-op once finished.
  void Cancel(const absl::Status& why);
  // A worker left rotation: cancel unless it is a prefill worker that is done.
  void OnWorkerDeparted(const std::string& address, const absl::Status& why);

  const std::string& decode_address() const { return decode_address_; }
  const std::string& prefill_address() const { return prefill_address_; }

 private:
  template <typename Message>
  class StreamReactor;

  // Stream reactions (serialized). Decode.Reserve sends the reservation, then
  // token events; Decode.Generate (colocated) token events only.
  void OnMessage(const tandem::v1::DecodeEvent& event);
  void OnMessage(const tandem::v1::GenerateResponse& message) { OnTokens(message); }
  void OnReservation(const tandem::v1::KvReservation& reservation);
  void OnTokens(const tandem::v1::GenerateResponse& message);
  void OnStreamDone(const grpc::Status& status);
  // Prefill callback.
  void OnPrefillDone(const grpc::Status& status);
  void Finish(FinishReason reason, bool cancel_stream);
  void Finalize();

  std::shared_ptr<RequestRun> run_;
  const PreparedRequest& req_;
  Router& router_;
  const int32_t index_;
  const int32_t attempt_;
  const bool colocated_;
  const std::string prefill_address_;
  const std::string decode_address_;
  std::shared_ptr<grpc::Channel> prefill_channel_;
  std::shared_ptr<grpc::Channel> decode_channel_;
  std::unique_ptr<tandem::v1::Decode::Stub> decode_stub_;
  std::unique_ptr<tandem::v1::Prefill::Stub> prefill_stub_;
  grpc::ClientContext stream_ctx_;
  grpc::ClientContext prefill_ctx_;
  tandem::v1::DecodeSubmit submit_;
  tandem::v1::ReserveRequest reserve_req_;
  tandem::v1::PrefillRequest prefill_req_;
  tandem::v1::PrefillResponse prefill_resp_;
  LocalLoad local_load_;
  uint64_t track_decode_ = 0;
  uint64_t track_prefill_ = 0;

  // Stream-reaction state.
  engine::Detokenizer detok_;
  engine::StopStringMatcher matcher_;
  int32_t tokens_ = 0;
  int32_t cached_prompt_tokens_ = 0;
  absl::Time reserved_at_ = absl::InfinitePast();
  absl::Status stream_error_;          // a protocol error we detected (bad token id)

  absl::Mutex mu_;
  absl::Status cancel_reason_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  FinishReason reason_ ABSL_GUARDED_BY(mu_) = FinishReason::kLength;
  bool prefill_started_ ABSL_GUARDED_BY(mu_) = false;
  bool prefill_done_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finalized_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status prefill_status_ ABSL_GUARDED_BY(mu_);
  grpc::Status stream_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router::internal
