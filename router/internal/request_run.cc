#include "router/internal/request_run.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "common/base/logging.h"
#include "router/internal/choice_call.h"
#include "router/router.h"

namespace tandem::router::internal {
namespace {

bool Retryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kAborted;
}

}  // namespace

RequestRun::RequestRun(Router& router, uint64_t id, PreparedRequest request,
                       std::shared_ptr<GenerationObserver> observer, absl::Time start)
    : router_(router),
      id_(id),
      request_(std::move(request)),
      observer_(std::move(observer)),
      start_(start) {
  absl::MutexLock lock(&mu_);
  choices_.resize(request_.n);
  for (int32_t i = 0; i < request_.n; ++i) {
    choices_[i].result.index = i;
  }
}

std::shared_ptr<ChoiceCall> RequestRun::StartAttemptLocked(int32_t index,
                                                           const RouteDecision& route) {
  ChoiceState& c = choices_[index];
  c.call = std::make_shared<ChoiceCall>(shared_from_this(), index, c.attempt, route);
  c.route.model = request_.model->name();
  c.route.colocated = route.colocated;
  c.route.decode_worker = route.decode->address;
  c.route.prefill_worker = route.prefill != nullptr ? route.prefill->address : "";
  c.route.attempt = c.attempt;
  EnqueueLocked([index, r = c.route](GenerationObserver& o) { o.OnRoute(index, r); });
  router_.metrics().CountRoute(request_.model->name(),
                               c.attempt > 0    ? "retry"
                               : route.colocated ? "colocated"
                                                 : "disaggregated");
  return c.call;
}

void RequestRun::Launch(const std::vector<RouteDecision>& routes) {
  std::vector<std::shared_ptr<ChoiceCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    for (int32_t i = 0; i < request_.n; ++i) {
      calls.push_back(StartAttemptLocked(i, routes[i]));
    }
  }
  Flush();
  for (auto& c : calls) {
    c->Start();
  }
}

void RequestRun::Cancel() { CancelWith(absl::CancelledError("request cancelled by the client")); }

void RequestRun::CancelWith(const absl::Status& why) {
  std::vector<std::shared_ptr<ChoiceCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (completed_) {
      return;
    }
    if (cancel_reason_.ok()) {
      cancel_reason_ = why;
    }
    for (ChoiceState& c : choices_) {
      if (c.call != nullptr) {
        calls.push_back(c.call);
      }
    }
  }
  for (auto& c : calls) {
    c->Cancel(why);
  }
}

void RequestRun::OnOutput(int32_t index, int32_t attempt, ChoiceDelta delta) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    if (completed_ || choices_[index].attempt != attempt) {
      return;
    }
    const absl::Time now = router_.clock().Now();
    if (!delta.tokens.empty()) {
      if (first_token_at_ == absl::InfinitePast()) {
        first_token_at_ = now;
        first = true;
      }
      last_token_at_ = now;
    }
    EnqueueLocked([d = std::move(delta)](GenerationObserver& o) { o.OnDelta(d); });
  }
  if (first) {
    router_.FirstToken(id_, request_.model->name());  // leaves the admission queue
  }
  Flush();
}

void RequestRun::OnChoiceEnded(int32_t index, int32_t attempt, const ChoiceOutcome& outcome) {
  std::shared_ptr<ChoiceCall> retry;
  std::vector<std::shared_ptr<ChoiceCall>> to_cancel;
  absl::Status cancel_why;
  {
    absl::MutexLock lock(&mu_);
    ChoiceState& c = choices_[index];
    if (completed_ || c.attempt != attempt || c.done) {
      return;
    }
    c.call.reset();
    cached_prompt_tokens_ = std::max(cached_prompt_tokens_, outcome.cached_prompt_tokens);
    prefill_ = std::max(prefill_, outcome.prefill);
    kv_transfer_ = std::max(kv_transfer_, outcome.kv_transfer);
    if (outcome.reserved_at != absl::InfinitePast() &&
        (reserved_at_ == absl::InfinitePast() || outcome.reserved_at < reserved_at_)) {
      reserved_at_ = outcome.reserved_at;
    }
    if (outcome.status.ok()) {
      c.done = true;
      c.result.reason = outcome.reason;
      c.result.completion_tokens = outcome.completion_tokens;
      EnqueueLocked([r = c.result](GenerationObserver& o) { o.OnChoiceDone(r); });
    } else {
      bool retried = false;
      if (cancel_reason_.ok() && first_error_.ok() && !outcome.produced_output &&
          Retryable(outcome.status.code()) &&
          c.attempt + 1 < router_.config().max_route_attempts &&
          router_.clock().Now() < request_.deadline) {
        if (!outcome.failed_worker.empty()) {
          c.exclude.insert(outcome.failed_worker);
        }
        std::shared_ptr<const RegistrySnapshot> snap = router_.snapshot();
        absl::StatusOr<RouteDecision> route = router_.Pick(request_, *snap, c.exclude);
        if (route.ok()) {
          LOG(WARNING) << "router: request " << request_.request_id << " (client id \""
                       << absl::CEscape(request_.client_request_id) << "\") choice " << index
                       << " retrying after: " << outcome.status;
          ++c.attempt;
          retry = StartAttemptLocked(index, *route);
          // The snapshot owns the WorkerInfo the route points at; the call
          // copied what it needs in its constructor.
          retried = true;
        }
      }
      if (!retried) {
        c.done = true;
        c.result.completion_tokens = outcome.completion_tokens;
        if (first_error_.ok()) {
          first_error_ = outcome.status;
          cancel_why = outcome.status;
          for (ChoiceState& other : choices_) {
            if (other.call != nullptr) {
              to_cancel.push_back(other.call);
            }
          }
        }
      }
    }
    bool all_done = true;
    for (const ChoiceState& s : choices_) {
      all_done = all_done && s.done;
    }
    if (all_done) {
      CompleteLocked();
    }
  }
  Flush();
  for (auto& call : to_cancel) {
    call->Cancel(cancel_why);
  }
  if (retry != nullptr) {
    retry->Start();
  }
}

void RequestRun::CompleteLocked() {
  completed_ = true;
  absl::Status status = first_error_;
  const absl::Time now = router_.clock().Now();
  RequestSummary s;
  s.request_id = request_.request_id;
  s.client_request_id = request_.client_request_id;
  s.tenant = request_.tenant;
  s.model = request_.model->name();
  s.prompt_tokens = static_cast<int32_t>(request_.prompt_ids.size());
  s.cached_prompt_tokens = cached_prompt_tokens_;
  for (const ChoiceState& c : choices_) {
    s.completion_tokens += c.result.completion_tokens;
    if (c.done && (status.ok() || c.result.completion_tokens > 0)) {
      s.choices.push_back(c.result);
    }
  }
  if (!choices_.empty()) {
    s.route = choices_[0].route;
  }
  s.total = now - start_;
  if (reserved_at_ != absl::InfinitePast()) {
    s.queue = reserved_at_ - start_;
  }
  if (first_token_at_ != absl::InfinitePast()) {
    s.ttft = first_token_at_ - start_;
    s.decode = now - first_token_at_;
  }
  s.prefill = prefill_;
  s.kv_transfer = kv_transfer_;
  const int32_t decode_tokens =
      choices_.empty() ? 0 : choices_[0].result.completion_tokens;  // tpot from choice 0
  absl::Duration tpot = absl::ZeroDuration();
  if (decode_tokens > 1 && last_token_at_ > first_token_at_) {
    tpot = (last_token_at_ - first_token_at_) / (decode_tokens - 1);
  }
  EnqueueLocked([this, status, s, tpot](GenerationObserver& o) {
    router_.RunFinished(id_, status, s, tpot);
    o.OnComplete(status, s);
    router_.ReleaseSlot();  // last: the router may be destroyed once all slots are free
  });
}

void RequestRun::Flush() {
  std::shared_ptr<RequestRun> self = shared_from_this();  // alive while delivering
  {
    absl::MutexLock lock(&mu_);
    if (delivering_) {
      return;
    }
    delivering_ = true;
  }
  while (true) {
    std::deque<Event> batch;
    {
      absl::MutexLock lock(&mu_);
      if (pending_.empty()) {
        delivering_ = false;
        return;
      }
      batch.swap(pending_);
    }
    for (Event& e : batch) {
      std::move(e)(*observer_);
    }
  }
}

}  // namespace tandem::router::internal
