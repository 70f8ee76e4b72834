#pragma once
// One admitted request (RequestRun): its choices, their retries and the
// events it delivers to the front's observer. Private to router.cc; each
// worker attempt of a choice is a ChoiceCall (choice_call.h).
//
// Ownership: the front holds the RequestRun through its RequestHandle; the
// run holds each choice's live ChoiceCall until it ends; a ChoiceCall holds
// its run and is kept alive by its in-flight gRPC reactions (each holds a
// shared_ptr released in OnDone). No cycle outlives the request.
//
// Threads: gRPC callback threads. RequestRun serializes observer calls
// (Enqueue under mu_, Flush outside it, one deliverer at a time) so no lock
// is held while the front runs.

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/generation.h"
#include "router/internal/choice_call.h"
#include "router/picker.h"
#include "router/request.h"

namespace tandem::router {
class Router;
}

namespace tandem::router::internal {

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

  // Set by Router::Start before the handle is returned.
  void set_cache_status(CacheStatus s) { cache_status_ = s; }
  CacheStatus cache_status() const override { return cache_status_; }

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
  CacheStatus cache_status_ = CacheStatus::kBypass;
};

}  // namespace tandem::router::internal
