#include "router/grpc_service.h"

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/executor.h"
#include "common/base/logging.h"
#include "common/base/utf8.h"
#include "proto/grpc_status.h"
#include "router/api_error.h"
#include "router/request.h"

namespace tandem::router {
namespace {

namespace v1 = ::tandem::v1;

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// Worker ids are role@address unless set: public clients see them only with
// expose_route_workers.
void ToProto(const RouteSummary& r, bool expose_workers, v1::RouteInfo* out) {
  out->set_model(r.model);
  if (expose_workers) {
    out->set_prefill_worker(r.prefill_worker);
    out->set_decode_worker(r.decode_worker);
  }
  out->set_colocated(r.colocated);
  out->set_cache_hit(r.cache_hit);
}

// The caller's tenant from the `authorization` metadata; with keys off, an
// unnamed tenant.
absl::StatusOr<Tenant> CallerTenant(const ApiKeys& keys, grpc::CallbackServerContext& context) {
  if (!keys.enabled()) {
    return Tenant{};
  }
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  return keys.Authenticate(it == metadata.end()
                               ? absl::string_view()
                               : absl::string_view(it->second.data(), it->second.size()));
}

// A refusal the client should retry later (RESOURCE_EXHAUSTED, UNAVAILABLE)
// carries when, as trailing metadata `retry-after` in whole seconds (the
// HTTP front's Retry-After): the status's own (admission control), else
// limits.retry_after.
void AddRetryAfter(grpc::CallbackServerContext& context, const absl::Status& s,
                   absl::Duration fallback) {
  if (s.code() == absl::StatusCode::kResourceExhausted ||
      s.code() == absl::StatusCode::kUnavailable) {
    context.AddTrailingMetadata("retry-after", RetryAfterSeconds(RetryAfter(s, fallback)));
  }
}

// Streams one Generate call. Owned by gRPC (deleted in OnDone). The
// observer (Sink) is owned by the request run and points back here; the
// writer stays alive until OnComplete because Finish is only called from it
// (or before any run exists).
class GenerateWriter : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  // Authenticates on the gRPC thread (cheap), then hands the rest to
  // `prepare`: tokenizing, the complexity router's and the semantic cache's
  // embeddings (which wait on the embedder's batch) and Router::Start never
  // run on a gRPC callback thread, where they would delay every other call
  // and the workers' heartbeat streams that share those threads.
  GenerateWriter(Router& router, const ApiKeys& api_keys, base::Executor& prepare,
                 grpc::CallbackServerContext* context, const v1::GenerateRequest& request)
      : router_(router), context_(context) {
    absl::StatusOr<Tenant> tenant = CallerTenant(api_keys, *context);
    if (!tenant.ok()) {
      Finish(proto::ToGrpcStatus(tenant.status()));
      return;
    }
    GenerationRequest gen = FromProto(request);
    if (api_keys.enabled()) {
      gen.tenant = std::move(tenant->name);  // never what the client claims
    }
    if (auto it = context->client_metadata().find("cache-control");
        it != context->client_metadata().end()) {
      gen.cache_control = std::string(it->second.data(), it->second.size());
    }
    const absl::Time deadline = absl::FromChrono(context->deadline());
    const std::string model = gen.model;
    if (!prepare.Post([this, gen = std::move(gen), deadline]() mutable {
          Begin(std::move(gen), deadline);
        })) {
      const absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
          "the router has ", prepare.max_queued(),
          " gRPC requests waiting to be prepared (limits.max_inflight); retry later"));
      router_.RecordRejected(model, s);
      AddRetryAfter(*context, s, router_.config().limits.retry_after);
      Finish(proto::ToGrpcStatus(s));
    }
  }

  // On the prepare executor. `this` lives until Finish: nothing calls it
  // before this runs, and while `starting_` holds, the Sink's end is
  // deferred to the end of Begin (a cached answer completes inside Start).
  void Begin(GenerationRequest gen, absl::Time deadline) {
    bool gone;
    {
      absl::MutexLock lock(&mu_);
      gone = client_cancelled_;  // gone while queued: prepare nothing
      if (gone) {
        finished_ = true;
      }
    }
    if (gone) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call"));
      return;
    }
    absl::StatusOr<PreparedRequest> prepared = router_.Prepare(gen, deadline);
    if (!prepared.ok()) {
      router_.RecordRejected(gen.model, prepared.status());
      Finish(proto::ToGrpcStatus(prepared.status()));
      return;
    }
    request_id_ = prepared->client_request_id;
    routed_ = !prepared->route_pool.empty();
    complexity_score_ = prepared->complexity_score;
    tokenizer_ = &prepared->model->tokenizer();
    want_logprobs_ = prepared->sampling.logprobs || prepared->sampling.top_logprobs > 0;
    auto sink = std::make_shared<Sink>(this);
    absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
        router_.Start(*std::move(prepared), sink);
    if (!handle.ok()) {
      AddRetryAfter(*context_, handle.status(), router_.config().limits.retry_after);
      Finish(proto::ToGrpcStatus(handle.status()));
      return;
    }
    bool cancel_now;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      handle_ = *handle;
      cancel_now = client_cancelled_;
      starting_ = false;
      if (finish_requested_ && !writing_ && !finished_) {
        finished_ = true;
        finish = true;
        status = finish_status_;
      }
    }
    if (cancel_now) {
      (*handle)->Cancel();
    }
    if (finish) {
      Finish(status);  // last touch of `this`
    }
  }

  void OnCancel() override {
    std::shared_ptr<RequestHandle> h;
    {
      absl::MutexLock lock(&mu_);
      client_cancelled_ = true;
      h = handle_;
    }
    if (h != nullptr) {
      h->Cancel();
    }
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<RequestHandle> cancel;
    bool write_next = false;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        // The client is gone: drop what is queued, stop the workers.
        queue_.clear();
        cancel = handle_;
      }
      if (!queue_.empty()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
        write_next = true;
      } else {
        writing_ = false;
        if (finish_requested_ && !finished_ && !starting_) {
          finished_ = true;
          finish = true;
          status = finish_status_;
        }
      }
    }
    if (cancel != nullptr) {
      cancel->Cancel();
    }
    if (write_next) {
      StartWrite(&current_);
    } else if (finish) {
      Finish(status);  // last touch of `this`
    }
  }

  void OnDone() override { delete this; }

 private:
  class Sink : public GenerationObserver {
   public:
    explicit Sink(GenerateWriter* w) : w_(w) {}
    void OnRoute(int32_t /*index*/, const RouteSummary& route) override {
      v1::GenerateResponse m;
      m.set_request_id(w_->request_id_);
      ToProto(route, w_->router_.config().expose_route_workers, m.mutable_route());
      w_->SetComplexity(m.mutable_route());
      w_->Enqueue(std::move(m));
    }
    void OnDelta(const ChoiceDelta& d) override {
      v1::GenerateResponse m;
      m.set_request_id(w_->request_id_);
      m.set_text(d.text);
      for (const TokenOutput& t : d.tokens) {
        v1::TokenDelta* td = m.add_tokens();
        td->set_token(t.id);
        if (w_->want_logprobs_) {
          td->set_logprob(t.logprob);
          for (const TopLogprob& tl : t.top_logprobs) {
            v1::TokenLogprob* p = td->add_top_logprobs();
            p->set_token(tl.token);
            p->set_logprob(tl.logprob);
            p->set_text(TokenDisplayText(*w_->tokenizer_, tl.token));
          }
        }
      }
      w_->Enqueue(std::move(m));
    }
    void OnChoiceDone(const ChoiceResult& r) override { reason_ = r.reason; }
    void OnComplete(const absl::Status& status, const RequestSummary& s) override {
      if (status.ok()) {
        v1::GenerateResponse m;
        m.set_request_id(s.client_request_id);
        m.set_finish_reason(ToProto(reason_));
        m.mutable_usage()->set_prompt_tokens(s.prompt_tokens);
        m.mutable_usage()->set_completion_tokens(s.completion_tokens);
        m.mutable_usage()->set_cached_prompt_tokens(s.cached_prompt_tokens);
        v1::Timings* t = m.mutable_timings();
        t->set_queue_seconds(absl::ToDoubleSeconds(s.queue));
        t->set_time_to_first_token_seconds(absl::ToDoubleSeconds(s.ttft));
        t->set_prefill_seconds(absl::ToDoubleSeconds(s.prefill));
        t->set_kv_transfer_seconds(absl::ToDoubleSeconds(s.kv_transfer));
        t->set_decode_seconds(absl::ToDoubleSeconds(s.decode));
        t->set_total_seconds(absl::ToDoubleSeconds(s.total));
        ToProto(s.route, w_->router_.config().expose_route_workers, m.mutable_route());
        w_->SetComplexity(m.mutable_route());
        w_->Enqueue(std::move(m));
      }
      w_->FinishWith(proto::ToGrpcStatus(status));
    }

   private:
    GenerateWriter* const w_;
    FinishReason reason_ = FinishReason::kLength;
  };

  void Enqueue(v1::GenerateResponse m) {
    {
      absl::MutexLock lock(&mu_);
      if (finish_requested_ || finished_) {
        return;
      }
      if (writing_) {
        queue_.push_back(std::move(m));
        return;
      }
      writing_ = true;
      current_ = std::move(m);
    }
    StartWrite(&current_);
  }

  void FinishWith(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      finish_requested_ = true;
      finish_status_ = std::move(status);
      if (writing_ || finished_ || starting_) {
        return;  // OnWriteDone (or Begin) finishes once the queue drains
      }
      finished_ = true;
    }
    Finish(finish_status_);  // last touch of `this`
  }

  // Complexity routing's score; RouteInfo.model names the pool's model.
  void SetComplexity(v1::RouteInfo* route) const {
    if (routed_) {
      route->set_complexity_score(static_cast<float>(complexity_score_));
    }
  }

  Router& router_;
  grpc::CallbackServerContext* const context_;  // gRPC's; valid until OnDone
  std::string request_id_;
  const engine::Tokenizer* tokenizer_ = nullptr;
  bool want_logprobs_ = false;
  bool routed_ = false;
  double complexity_score_ = 0;

  absl::Mutex mu_;
  std::shared_ptr<RequestHandle> handle_ ABSL_GUARDED_BY(mu_);
  bool client_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Until Begin has stored the handle: the Sink's end waits for Begin.
  bool starting_ ABSL_GUARDED_BY(mu_) = true;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse current_;  // being written; touched only by the writer in turn
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_;
};

}  // namespace

GenerationRequest FromProto(const v1::GenerateRequest& request) {
  GenerationRequest g;
  g.model = request.model();
  if (request.has_token_ids()) {
    g.prompt_ids = std::vector<int32_t>(request.token_ids().ids().begin(),
                                        request.token_ids().ids().end());
  } else {
    g.prompt_text = request.text();
  }
  if (request.max_tokens() != 0) {
    g.max_tokens = request.max_tokens();
  }
  const v1::SamplingParams& s = request.sampling();
  g.sampling.temperature = s.temperature();
  g.sampling.top_k = s.top_k();
  g.sampling.top_p = s.top_p() == 0.0f ? 1.0f : s.top_p();
  g.sampling.min_p = s.min_p();
  g.sampling.repetition_penalty = s.repetition_penalty() == 0.0f ? 1.0f : s.repetition_penalty();
  if (s.has_seed()) {
    g.sampling.seed = s.seed();
    g.has_seed = true;
  }
  g.sampling.top_logprobs = s.top_logprobs();
  g.sampling.logprobs = s.logprobs();
  g.sampling.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  g.sampling.stop_strings.assign(s.stop().begin(), s.stop().end());
  g.sampling.ignore_eos = s.ignore_eos();
  g.request_id = request.request_id();
  g.tenant = request.tenant();
  g.add_special_tokens = request.add_special_tokens();
  g.logprobs_param = "sampling.top_logprobs";
  return g;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateWriter(router_, api_keys_, prepare_, context, *request);
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* context,
                                                        const v1::ListModelsRequest* /*request*/,
                                                        v1::ListModelsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::StatusOr<Tenant> t = CallerTenant(api_keys_, *context); !t.ok()) {
    reactor->Finish(proto::ToGrpcStatus(t.status()));
    return reactor;
  }
  for (const auto& m : router_.catalog().models()) {
    v1::ModelInfo* info = response->add_models();
    info->set_id(m->name());
    info->set_architecture(m->architecture());
    info->set_context_length(m->context_length());
    info->set_vocab_size(m->vocab_size());
  }
  if (const ModelCatalog& c = router_.catalog(); !c.routed_alias().empty()) {
    v1::ModelInfo* info = response->add_models();  // complexity routing's alias
    info->set_id(c.routed_alias());
    info->set_architecture("router");
    info->set_context_length(c.RoutedContextLength());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const v1::TokenizeRequest* request,
                                                      v1::TokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::StatusOr<Tenant> t = CallerTenant(api_keys_, *context); !t.ok()) {
    reactor->Finish(proto::ToGrpcStatus(t.status()));
    return reactor;
  }
  absl::StatusOr<const ServedModel*> model = router_.catalog().Find(request->model());
  if (!model.ok()) {
    reactor->Finish(proto::ToGrpcStatus(model.status()));
    return reactor;
  }
  if (!base::IsValidUtf8(request->text())) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "text is not valid UTF-8"));
    return reactor;
  }
  const engine::Tokenizer& tok = (*model)->tokenizer();
  absl::StatusOr<std::vector<engine::TokenId>> ids =
      tok.Encode(request->text(), request->add_special_tokens() && tok.add_bos(),
                 // As llama.cpp's /tokenize by default: control-token text in
                 // the raw text is that token. Nothing is generated from it
                 // (the chat path keeps message content literal).
                 /*parse_special=*/true);
  if (!ids.ok()) {
    reactor->Finish(proto::ToGrpcStatus(ids.status()));
    return reactor;
  }
  for (engine::TokenId id : *ids) {
    response->add_ids(id);
    response->add_pieces(TokenDisplayText(tok, id));
  }
  // Each token's text plus its id: the reply outgrows the text several times
  // over. Refuse one the front cannot send (nor a default client receive).
  const size_t reply_bytes = response->ByteSizeLong();
  const int32_t limit = router_.config().limits.max_grpc_message_bytes;
  if (reply_bytes > static_cast<size_t>(limit)) {
    const size_t tokens = ids->size();
    response->Clear();
    reactor->Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the Tokenize reply would be ", reply_bytes, " bytes (", tokens,
                     " tokens), over the router's limits.max_grpc_message_bytes of ", limit,
                     "; tokenize less text per call")));
    return reactor;
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::router
