#pragma once
// One admitted request (RequestRun) and one worker attempt of one of its
// choices (ChoiceCall). Private to router.cc.
//
// Ownership: the front holds the RequestRun through its RequestHandle; the
// run holds each choice's live ChoiceCall until it ends; a ChoiceCall holds
// its run and is kept alive by its in-flight gRPC reactions (each holds a
// shared_ptr released in OnDone). No cycle outlives the request.
//
// Threads: gRPC callback threads. ChoiceCall's stream-side state is touched
// only by its stream's reactions (serialized by gRPC); state shared with the
// prefill callback and Cancel() is under mu_. RequestRun serializes observer
// calls (Enqueue under mu_, Flush outside it, one deliverer at a time) so no
// lock is held while the front runs.

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/sampling.h"
#include "common/tokenizer.h"
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
  class ReserveReactor;
  class GenerateReactor;

  // Stream reactions (serialized).
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
  Detokenizer detok_;
  StopStringMatcher matcher_;
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

class RequestRun : public RequestHandle, public std::enable_shared_from_this<RequestRun> {
 public:
  RequestRun(Router& router, uint64_t id, PreparedRequest request,
             std::shared_ptr<GenerationObserver> observer, absl::Time start);

  // Starts one call per choice on the given routes (one per choice).
  void Launch(const std::vector<RouteDecision>& routes);

  void Cancel() override;
  void CancelWith(const absl::Status& why);

  // From ChoiceCall.
  void OnOutput(int32_t index, int32_t attempt, ChoiceDelta delta);
  void OnChoiceEnded(int32_t index, int32_t attempt, const ChoiceOutcome& outcome);

  const PreparedRequest& request() const { return request_; }
  Router& router() { return router_; }
  uint64_t id() const { return id_; }

 private:
  struct ChoiceState {
    int32_t attempt = 0;
    std::shared_ptr<ChoiceCall> call;
    std::set<std::string> exclude;
    bool done = false;
    ChoiceResult result;
    RouteSummary route;
  };
  using Event = absl::AnyInvocable<void(GenerationObserver&) &&>;

  std::shared_ptr<ChoiceCall> StartAttemptLocked(int32_t index, const RouteDecision& route)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueLocked(Event e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pending_.push_back(std::move(e));
  }
  // Delivers queued events unless another thread is already doing so.
  void Flush();
  void CompleteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Router& router_;
  const uint64_t id_;
  const PreparedRequest request_;
  const std::shared_ptr<GenerationObserver> observer_;
  const absl::Time start_;

  absl::Mutex mu_;
  std::vector<ChoiceState> choices_ ABSL_GUARDED_BY(mu_);
  absl::Status cancel_reason_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  bool completed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time first_token_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_token_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time reserved_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int32_t cached_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration prefill_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration kv_transfer_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::deque<Event> pending_ ABSL_GUARDED_BY(mu_);
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::router::internal
