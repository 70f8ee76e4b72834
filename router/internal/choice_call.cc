#include "router/internal/choice_call.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "proto/grpc_status.h"
#include "router/internal/request_run.h"
#include "router/router.h"

namespace tandem::router::internal {
namespace {

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

void ToProto(const engine::SamplingParams& s, uint64_t seed, tandem::v1::SamplingParams* p) {
  p->set_temperature(s.temperature);
  p->set_top_k(s.top_k);
  p->set_top_p(s.top_p);
  p->set_min_p(s.min_p);
  p->set_repetition_penalty(s.repetition_penalty);
  p->set_seed(seed);
  p->set_top_logprobs(s.top_logprobs);
  p->set_logprobs(s.logprobs || s.top_logprobs > 0);
  for (int32_t id : s.stop_token_ids) {
    p->add_stop_token_ids(id);
  }
  for (const std::string& stop : s.stop_strings) {
    p->add_stop(stop);
  }
  p->set_ignore_eos(s.ignore_eos);
}

// A worker's status as the client should see it: the code (CANCELLED that
// we did not ask for means the worker went away: retry elsewhere) and the
// worker's role, never its address nor its message (which may name peers);
// the detail goes to the log with the request's id.
absl::Status WorkerError(const grpc::Status& s, absl::string_view role,
                         absl::string_view address, absl::string_view request_id) {
  absl::Status st = proto::FromGrpcStatus(s);
  LOG(WARNING) << "router: request " << request_id << ": " << role << " worker " << address
               << " failed: " << st;
  absl::StatusCode code = st.code();
  if (code == absl::StatusCode::kCancelled || code == absl::StatusCode::kUnknown) {
    code = absl::StatusCode::kUnavailable;
  }
  return absl::Status(code, absl::StrCat("the ", role, " worker failed (",
                                         absl::StatusCodeToString(st.code()), ")"));
}

}  // namespace

// --- reactors -----------------------------------------------------------------

// A Decode stream (Reserve or Generate): hands each message to the call and
// reports the end. The stub binds the RPC to the reactor before Start().
template <typename Message>
class ChoiceCall::StreamReactor : public grpc::ClientReadReactor<Message> {
 public:
  explicit StreamReactor(std::shared_ptr<ChoiceCall> call) : call_(std::move(call)) {}
  void Start() {
    this->StartRead(&message_);
    this->StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      return;
    }
    call_->OnMessage(message_);
    this->StartRead(&message_);
  }
  void OnDone(const grpc::Status& s) override {
    call_->OnStreamDone(s);
    call_.reset();
    delete this;
  }

 private:
  std::shared_ptr<ChoiceCall> call_;
  Message message_;
};

// --- ChoiceCall ---------------------------------------------------------------

ChoiceCall::ChoiceCall(std::shared_ptr<RequestRun> run, int32_t index, int32_t attempt,
                       const RouteDecision& route)
    : run_(std::move(run)),
      req_(run_->request()),
      router_(run_->router()),
      index_(index),
      attempt_(attempt),
      colocated_(route.colocated),
      prefill_address_(route.prefill != nullptr ? route.prefill->address : ""),
      decode_address_(route.decode->address),
      prefill_channel_(route.prefill != nullptr ? route.prefill->channel : nullptr),
      decode_channel_(route.decode->channel),
      detok_(req_.model->tokenizer()),
      matcher_(req_.stop_strings) {
  submit_.set_request_id(req_.n == 1 && attempt == 0
                             ? req_.request_id
                             : absl::StrCat(req_.request_id, ".", index, ".", attempt));
  submit_.mutable_prompt_ids()->Add(req_.prompt_ids.begin(), req_.prompt_ids.end());
  submit_.set_max_tokens(req_.max_tokens);
  ToProto(req_.sampling, req_.has_seed ? req_.sampling.seed + index : RandomSeed(),
          submit_.mutable_sampling());
  const int32_t block_size = route.decode->desc.kv_block_size;
  local_load_.requests = 1;
  local_load_.prompt_tokens = static_cast<int64_t>(req_.prompt_ids.size());
  local_load_.kv_blocks =
      BlocksNeeded(static_cast<int32_t>(req_.prompt_ids.size()), req_.max_tokens, block_size);
}

ChoiceCall::~ChoiceCall() = default;

void ChoiceCall::Start() {
  const absl::Time deadline = req_.deadline;
  if (deadline != absl::InfiniteFuture()) {
    stream_ctx_.set_deadline(absl::ToChronoTime(deadline));
    prefill_ctx_.set_deadline(absl::ToChronoTime(deadline));
  }
  router_.AddLocalLoad(decode_address_, local_load_, +1);
  track_decode_ = router_.TrackCall(decode_address_, weak_from_this());
  if (!colocated_) {
    router_.AddLocalLoad(prefill_address_, local_load_, +1);
    track_prefill_ = router_.TrackCall(prefill_address_, weak_from_this());
  }
  if (decode_channel_ == nullptr || (!colocated_ && prefill_channel_ == nullptr)) {
    // Snapshots from tests may lack channels; treat as an unreachable worker.
    {
      absl::MutexLock lock(&mu_);
      stream_done_ = true;
      stream_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "no channel to the worker");
    }
    Finalize();
    return;
  }
  decode_stub_ = tandem::v1::Decode::NewStub(decode_channel_);
  if (colocated_) {
    auto* reactor = new StreamReactor<tandem::v1::GenerateResponse>(shared_from_this());
    decode_stub_->async()->Generate(&stream_ctx_, &submit_, reactor);
    reactor->Start();
  } else {
    prefill_stub_ = tandem::v1::Prefill::NewStub(prefill_channel_);
    *reserve_req_.mutable_request() = submit_;
    auto* reactor = new StreamReactor<tandem::v1::DecodeEvent>(shared_from_this());
    decode_stub_->async()->Reserve(&stream_ctx_, &reserve_req_, reactor);
    reactor->Start();
  }
}

void ChoiceCall::Cancel(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || finalized_) {
      return;
    }
    if (cancel_reason_.ok()) {
      cancel_reason_ = why;
    }
  }
  stream_ctx_.TryCancel();
  prefill_ctx_.TryCancel();
}

void ChoiceCall::OnWorkerDeparted(const std::string& address, const absl::Status& why) {
  const bool decode = address == decode_address_;
  if (!decode) {
    absl::MutexLock lock(&mu_);
    if (prefill_done_) {
      return;  // the prefill worker already committed the KV: nothing depends on it
    }
  }
  // `why` says what happened ("sent no heartbeat for 3s"), not where.
  Cancel(absl::Status(why.code(), absl::StrCat("the ", decode ? "decode" : "prefill", " worker ",
                                               why.message())));
}

void ChoiceCall::OnMessage(const tandem::v1::DecodeEvent& event) {
  if (event.has_reservation()) {
    OnReservation(event.reservation());
  } else if (event.has_tokens()) {
    OnTokens(event.tokens());
  }
}

void ChoiceCall::OnReservation(const tandem::v1::KvReservation& reservation) {
  if (reserved_at_ != absl::InfinitePast()) {
    return;  // a second reservation is a worker bug; ignore it
  }
  reserved_at_ = router_.clock().Now();
  *prefill_req_.mutable_request() = submit_;
  *prefill_req_.mutable_reservation() = reservation;
  {
    absl::MutexLock lock(&mu_);
    if (!cancel_reason_.ok() || finished_) {
      return;
    }
    prefill_started_ = true;
  }
  prefill_stub_->async()->Prefill(&prefill_ctx_, &prefill_req_, &prefill_resp_,
                                  [self = shared_from_this()](grpc::Status s) {
                                    self->OnPrefillDone(s);
                                  });
}

void ChoiceCall::OnTokens(const tandem::v1::GenerateResponse& message) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || !stream_error_.ok()) {
      return;  // draining after a local finish
    }
  }
  if (reserved_at_ == absl::InfinitePast()) {
    reserved_at_ = router_.clock().Now();  // colocated: the stream is the reservation
  }
  const engine::Tokenizer& tok = req_.model->tokenizer();
  ChoiceDelta delta;
  delta.index = index_;
  bool stopped = false;
  bool local_finish = false;
  FinishReason reason = FinishReason::kLength;
  bool finish = false;
  for (const tandem::v1::TokenDelta& t : message.tokens()) {
    if (tokens_ >= req_.max_tokens) {
      finish = local_finish = true;
      reason = FinishReason::kLength;
      break;
    }
    if (t.token() < 0 || t.token() >= tok.vocab_size()) {
      LOG(WARNING) << "router: request " << req_.request_id << ": decode worker "
                   << decode_address_ << " sent token id " << t.token()
                   << " outside the vocabulary [0, " << tok.vocab_size() << ")";
      stream_error_ = absl::InternalError(
          absl::StrCat("the decode worker sent token id ", t.token(),
                       " outside the vocabulary [0, ", tok.vocab_size(), ")"));
      break;
    }
    ++tokens_;
    TokenOutput out;
    out.id = t.token();
    out.logprob = t.logprob();
    for (const tandem::v1::TokenLogprob& tl : t.top_logprobs()) {
      out.top_logprobs.push_back({tl.token(), tl.logprob()});
    }
    delta.tokens.push_back(std::move(out));
    delta.text += matcher_.Append(detok_.Push(t.token()), &stopped);
    if (stopped) {
      finish = local_finish = true;
      reason = FinishReason::kStop;
      break;
    }
  }
  if (message.has_usage()) {
    cached_prompt_tokens_ = message.usage().cached_prompt_tokens();
  }
  if (stream_error_.ok() && !finish) {
    switch (message.finish_reason()) {
      case tandem::v1::FINISH_REASON_LENGTH:
        finish = true;
        reason = FinishReason::kLength;
        break;
      case tandem::v1::FINISH_REASON_STOP:
        finish = true;
        reason = FinishReason::kStop;
        break;
      case tandem::v1::FINISH_REASON_CANCELLED:
        LOG(WARNING) << "router: request " << req_.request_id << ": decode worker "
                     << decode_address_ << " cancelled it";
        stream_error_ = absl::UnavailableError("the decode worker cancelled the request");
        break;
      default:
        if (tokens_ >= req_.max_tokens) {
          finish = local_finish = true;
          reason = FinishReason::kLength;
        }
        break;
    }
  }
  if (finish && !stopped) {
    // The end: release bytes held for a partial code point or a stop prefix.
    delta.text += matcher_.Append(detok_.Flush(), &stopped);
    if (stopped) {
      reason = FinishReason::kStop;
    } else {
      delta.text += matcher_.Flush();
    }
  }
  if (!delta.text.empty() || !delta.tokens.empty()) {
    run_->OnOutput(index_, attempt_, std::move(delta));
  }
  if (!stream_error_.ok()) {
    stream_ctx_.TryCancel();
    prefill_ctx_.TryCancel();
    return;
  }
  if (finish) {
    Finish(reason, local_finish);
  }
}

void ChoiceCall::Finish(FinishReason reason, bool cancel_stream) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancel_reason_.ok()) {
      return;  // cancelled first: the cancellation stands
    }
    finished_ = true;
    reason_ = reason;
  }
  if (cancel_stream) {
    // A stop string or max_tokens ended it here: free the decode worker's slot.
    stream_ctx_.TryCancel();
  }
}

void ChoiceCall::OnStreamDone(const grpc::Status& status) {
  bool prefill_pending;
  bool failed;
  {
    absl::MutexLock lock(&mu_);
    stream_done_ = true;
    stream_status_ = status;
    prefill_pending = prefill_started_ && !prefill_done_;
    failed = !finished_;
  }
  if (prefill_pending) {
    if (failed) {
      prefill_ctx_.TryCancel();
    }
    return;  // Finalize when the prefill call returns
  }
  Finalize();
}

void ChoiceCall::OnPrefillDone(const grpc::Status& status) {
  bool stream_done;
  {
    absl::MutexLock lock(&mu_);
    prefill_done_ = true;
    prefill_status_ = status;
    stream_done = stream_done_;
  }
  if (!status.ok() && !stream_done) {
    // The KV will never arrive: don't leave D waiting for its reservation deadline.
    stream_ctx_.TryCancel();
  }
  if (stream_done) {
    Finalize();
  }
}

void ChoiceCall::Finalize() {
  ChoiceOutcome out;
  {
    absl::MutexLock lock(&mu_);
    if (finalized_) {
      return;
    }
    finalized_ = true;
    out.produced_output = tokens_ > 0;
    out.completion_tokens = tokens_;
    out.reserved_at = reserved_at_;
    out.cached_prompt_tokens = cached_prompt_tokens_;
    if (prefill_done_ && prefill_status_.ok()) {
      out.cached_prompt_tokens = std::max(out.cached_prompt_tokens,
                                          prefill_resp_.cached_prompt_tokens());
      out.prefill = absl::Seconds(prefill_resp_.prefill_seconds());
      out.kv_transfer = absl::Seconds(prefill_resp_.kv_transfer_seconds());
    }
    if (finished_) {
      out.status = absl::OkStatus();
      out.reason = reason_;
    } else if (!cancel_reason_.ok()) {
      out.status = cancel_reason_;
      if (cancel_reason_.code() == absl::StatusCode::kUnavailable) {
        out.failed_worker = decode_address_;
      }
    } else if (!stream_error_.ok()) {
      out.status = stream_error_;
      out.failed_worker = decode_address_;
    } else if (prefill_done_ && !prefill_status_.ok()) {
      out.status = WorkerError(prefill_status_, "prefill", prefill_address_, req_.request_id);
      out.failed_worker = prefill_address_;
    } else if (!stream_status_.ok()) {
      out.status = WorkerError(stream_status_, "decode", decode_address_, req_.request_id);
      out.failed_worker = decode_address_;
    } else {
      LOG(WARNING) << "router: request " << req_.request_id << ": decode worker "
                   << decode_address_ << " ended the stream without a finish reason";
      out.status =
          absl::UnavailableError("the decode worker ended the stream without a finish reason");
      out.failed_worker = decode_address_;
    }
  }
  if (!out.status.ok() && out.status.code() != absl::StatusCode::kCancelled) {
    router_.metrics().worker_failures->Increment();
  }
  router_.AddLocalLoad(decode_address_, local_load_, -1);
  router_.UntrackCall(decode_address_, track_decode_);
  if (!colocated_) {
    router_.AddLocalLoad(prefill_address_, local_load_, -1);
    router_.UntrackCall(prefill_address_, track_prefill_);
  }
  // Last: this may release the run (and with it, eventually, this call).
  std::shared_ptr<RequestRun> run = run_;
  run->OnChoiceEnded(index_, attempt_, out);
}
}  // namespace tandem::router::internal
