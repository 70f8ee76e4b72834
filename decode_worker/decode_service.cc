#include "decode_worker/decode_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/serving/queued_write_reactor.h"
#include "common/serving/request_validation.h"
#include "decode_worker/internal/proto_convert.h"
#include "proto/grpc_status.h"

namespace tandem::decode_worker {
namespace {

using tandem::v1::DecodeEvent;
using tandem::v1::GenerateResponse;

// A token message not yet written absorbs the next one (the client sees the
// same tokens and text, in fewer messages when it reads slowly).
bool MergeResponse(GenerateResponse& last, const GenerateResponse& next) {
  if (last.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
    return false;
  }
  for (const auto& t : next.tokens()) *last.add_tokens() = t;
  last.mutable_text()->append(next.text());
  last.set_finish_reason(next.finish_reason());
  if (next.has_usage()) *last.mutable_usage() = next.usage();
  if (next.has_timings()) *last.mutable_timings() = next.timings();
  if (next.has_route()) *last.mutable_route() = next.route();
  return true;
}

// The stream of one request: a Reserve (DecodeEvent) or Generate
// (GenerateResponse) reactor that is also the engine's sink for it.
template <typename Msg>
class TokenStream final : public serving::QueuedWriteReactor<Msg>, public RequestSink {
 public:
  TokenStream(DecodeEngine* engine, engine::SequenceId key, tandem::v1::RouteInfo route)
      : serving::QueuedWriteReactor<Msg>(&Merge), engine_(engine), key_(key), route_(std::move(route)) {}

  void OnReservation(const Reservation& r) override {
    if constexpr (std::is_same_v<Msg, DecodeEvent>) {
      request_id_ = r.request_id;  // the engine names requests that came without one
      DecodeEvent ev;
      internal::ToProto(r, route_.decode_worker(), ev.mutable_reservation());
      this->Send(std::move(ev));
    }
  }

  void OnTokens(TokenEvent event) override {
    GenerateResponse resp = internal::ToProto(event, request_id_, engine_->engine().model());
    if (event.final) {
      *resp.mutable_route() = route_;
    }
    if constexpr (std::is_same_v<Msg, DecodeEvent>) {
      DecodeEvent ev;
      *ev.mutable_tokens() = std::move(resp);
      this->Send(std::move(ev));
    } else {
      this->Send(std::move(resp));
    }
    if (event.final) {
      this->Close(grpc::Status::OK);  // last touch of `this`
    }
  }

  void OnError(const absl::Status& status) override {
    this->Close(proto::ToGrpcStatus(status));  // last touch of `this`
  }

  void set_request_id(std::string id) { request_id_ = std::move(id); }

 private:
  static bool Merge(Msg& last, const Msg& next) {
    if constexpr (std::is_same_v<Msg, DecodeEvent>) {
      if (!last.has_tokens() || !next.has_tokens()) return false;
      return MergeResponse(*last.mutable_tokens(), next.tokens());
    } else {
      return MergeResponse(last, next);
    }
  }

  void OnCancelled() override { engine_->CancelKey(key_); }

  DecodeEngine* const engine_;
  const engine::SequenceId key_;
  const tandem::v1::RouteInfo route_;
  std::string request_id_;
};

template <typename Msg>
grpc::ServerWriteReactor<Msg>* FailedStream(const absl::Status& status) {
  class Failed final : public serving::QueuedWriteReactor<Msg> {};
  auto* r = new Failed();
  r->Close(proto::ToGrpcStatus(status));
  return r;
}

}  // namespace

DecodeService::DecodeService(DecodeEngine* engine) : engine_(engine) {}

void DecodeService::set_advertise_address(std::string address) {
  absl::MutexLock lock(&mu_);
  advertise_address_ = std::move(address);
}

std::string DecodeService::advertise_address() const {
  absl::MutexLock lock(&mu_);
  return advertise_address_;
}

absl::StatusOr<RequestSpec> DecodeService::ToSpec(grpc::CallbackServerContext* context,
                                                  const tandem::v1::DecodeSubmit& submit) const {
  RequestSpec spec;
  spec.request_id = submit.request_id();
  spec.prompt.assign(submit.prompt_ids().begin(), submit.prompt_ids().end());
  spec.max_tokens = submit.max_tokens();
  spec.sampling = serving::SamplingFromProto(submit.sampling());
  const absl::Status valid = serving::ValidateGenerationRequest(engine_->model_config(), spec.prompt,
                                                       spec.max_tokens, spec.sampling);
  if (!valid.ok()) {
    return valid;
  }
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    spec.deadline = absl::FromChrono(deadline);
  }
  return spec;
}

grpc::ServerWriteReactor<DecodeEvent>* DecodeService::Reserve(
    grpc::CallbackServerContext* context, const tandem::v1::ReserveRequest* request) {
  if (draining_.load(std::memory_order_relaxed)) {
    return FailedStream<DecodeEvent>(absl::UnavailableError("decode worker is draining"));
  }
  absl::StatusOr<RequestSpec> spec = ToSpec(context, request->request());
  if (!spec.ok()) {
    return FailedStream<DecodeEvent>(spec.status());
  }
  tandem::v1::RouteInfo route;
  route.set_decode_worker(advertise_address());
  route.set_colocated(false);
  const engine::SequenceId key = engine_->NewRequestKey();
  auto* stream = new TokenStream<DecodeEvent>(engine_, key, std::move(route));
  stream->set_request_id(spec->request_id);
  engine_->SubmitReserve(key, *std::move(spec), stream);
  return stream;
}

grpc::ServerWriteReactor<GenerateResponse>* DecodeService::Generate(
    grpc::CallbackServerContext* context, const tandem::v1::DecodeSubmit* request) {
  if (draining_.load(std::memory_order_relaxed)) {
    return FailedStream<GenerateResponse>(absl::UnavailableError("decode worker is draining"));
  }
  absl::StatusOr<RequestSpec> spec = ToSpec(context, *request);
  if (!spec.ok()) {
    return FailedStream<GenerateResponse>(spec.status());
  }
  tandem::v1::RouteInfo route;
  route.set_decode_worker(advertise_address());
  route.set_colocated(true);
  const engine::SequenceId key = engine_->NewRequestKey();
  auto* stream = new TokenStream<GenerateResponse>(engine_, key, std::move(route));
  stream->set_request_id(spec->request_id);
  engine_->SubmitGenerate(key, *std::move(spec), stream);
  return stream;
}

grpc::ServerUnaryReactor* DecodeService::Commit(grpc::CallbackServerContext* context,
                                                const tandem::v1::CommitRequest* request,
                                                tandem::v1::CommitResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->request_id().empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "commit: empty request_id"));
    return reactor;
  }
  CommitSpec commit;
  commit.request_id = request->request_id();
  commit.first.token = request->first_token();
  commit.first.logprob = request->first_logprob();
  for (const auto& t : request->first_top_logprobs()) {
    commit.first.top_logprobs.push_back(engine::TokenLogprob{t.token(), t.logprob()});
  }
  commit.num_tokens = request->num_tokens();
  commit.bytes_written = request->bytes_written();
  commit.abort = request->abort();
  engine_->Commit(std::move(commit),
                  [reactor](absl::Status s) { reactor->Finish(proto::ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::Cancel(grpc::CallbackServerContext* context,
                                                const tandem::v1::CancelRequest* request,
                                                tandem::v1::CancelResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  engine_->Cancel(request->request_id(), [reactor, response](bool found) {
    response->set_found(found);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

}  // namespace tandem::decode_worker
