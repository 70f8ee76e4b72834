// tandem-replay's gRPC client: the router's public Generation/Generate stream.
#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/replay/client.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::replay::internal {
namespace {

namespace v1 = ::tandem::v1;

const char* FinishName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "";
  }
}

class GrpcClient : public Client {
 public:
  explicit GrpcClient(const ClientOptions& options)
      : options_(options),
        stub_(v1::Generation::NewStub(
            grpc::CreateChannel(options.target, grpc::InsecureChannelCredentials()))) {}

  RequestRecord Send(const ReplayRequest& request, absl::Time origin,
                     Cancellation& cancel) override {
    RequestRecord r = NewRecord(request, Protocol::kGrpc);
    v1::GenerateRequest req;
    req.set_model(options_.model);
    req.set_text(request.prompt);
    req.set_max_tokens(static_cast<int32_t>(request.max_tokens));
    req.set_request_id(absl::StrCat("replay-", request.id));
    req.set_add_special_tokens(true);  // as the HTTP front does for a text prompt
    req.mutable_sampling()->set_temperature(static_cast<float>(options_.temperature));
    req.mutable_sampling()->set_ignore_eos(true);

    grpc::ClientContext ctx;
    if (!options_.api_key.empty()) {
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", options_.api_key));
    }
    cancel.SetHook([&ctx] { ctx.TryCancel(); });
    r.send_s = SecondsSince(origin);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse m;
    int64_t received = 0;
    while (reader->Read(&m)) {
      if (m.tokens_size() > 0 || !m.text().empty()) {
        const double now = SecondsSince(origin);
        if (!r.first_token_s) {
          r.first_token_s = now;
        }
        r.chunk_times_s.push_back(now);
        r.chunk_tokens.push_back(m.tokens_size());
        received += m.tokens_size();
      }
      if (m.has_route()) {
        r.route_model = m.route().model();
        r.prefill_worker = m.route().prefill_worker();
        r.decode_worker = m.route().decode_worker();
        r.colocated = m.route().colocated();
        r.cache_hit = m.route().cache_hit();
      }
      if (m.has_usage()) {
        if (m.usage().prompt_tokens() > 0) {
          r.prompt_tokens = m.usage().prompt_tokens();
          r.prompt_tokens_from_server = true;
        }
        r.output_tokens = m.usage().completion_tokens();
        r.cached_prompt_tokens = m.usage().cached_prompt_tokens();
      }
      if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        r.finish_reason = FinishName(m.finish_reason());
      }
    }
    const grpc::Status status = reader->Finish();
    r.end_s = SecondsSince(origin);
    cancel.ClearHook();
    if (r.output_tokens == 0) {
      r.output_tokens = received;
    }
    r.ok = status.ok();
    r.status = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    r.error = status.error_message();
    if (r.ok && r.finish_reason == "cancelled") {
      r.ok = false;
      r.status = "CANCELLED";
      r.error = "the stream ended with finish reason CANCELLED";
    }
    return r;
  }

 private:
  ClientOptions options_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> MakeGrpcClient(const ClientOptions& options) {
  return std::make_unique<GrpcClient>(options);
}

}  // namespace tandem::replay::internal
