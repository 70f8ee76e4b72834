#include "router/cli/generate_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/grpc_status.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::router::cli {

absl::StatusOr<tandem::v1::GenerateResponse> RunGenerate(const GenerateOptions& o,
                                                         std::ostream& out) {
  auto channel = grpc::CreateChannel(o.router, grpc::InsecureChannelCredentials());
  auto stub = tandem::v1::Generation::NewStub(channel);
  tandem::v1::GenerateRequest req;
  req.set_model(o.model);
  if (!o.prompt_ids.empty()) {
    req.mutable_token_ids()->mutable_ids()->Add(o.prompt_ids.begin(), o.prompt_ids.end());
  } else {
    req.set_text(o.prompt);
  }
  req.set_max_tokens(o.max_tokens);
  req.set_add_special_tokens(o.add_special_tokens);
  tandem::v1::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(o.temperature);
  s->set_top_k(o.top_k);
  s->set_top_p(o.top_p);
  if (o.seed.has_value()) {
    s->set_seed(*o.seed);
  }
  for (const std::string& stop : o.stop) {
    s->add_stop(stop);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + o.timeout));
  if (!o.api_key.empty()) {
    ctx.AddMetadata("authorization", "Bearer " + o.api_key);
  }
  std::unique_ptr<grpc::ClientReader<tandem::v1::GenerateResponse>> reader =
      stub->Generate(&ctx, req);
  tandem::v1::GenerateResponse m;
  tandem::v1::GenerateResponse last;
  while (reader->Read(&m)) {
    if (!m.text().empty()) {
      out << m.text() << std::flush;
    }
    last = m;
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) {
    return proto::FromGrpcStatus(st);
  }
  return last;
}

std::string SummaryLine(const tandem::v1::GenerateResponse& last) {
  const char* finish = "unspecified";
  switch (last.finish_reason()) {
    case tandem::v1::FINISH_REASON_LENGTH:
      finish = "length";
      break;
    case tandem::v1::FINISH_REASON_STOP:
      finish = "stop";
      break;
    case tandem::v1::FINISH_REASON_CANCELLED:
      finish = "cancelled";
      break;
    default:
      break;
  }
  // The workers are named only when the router exposes them
  // (expose_route_workers).
  std::string route = last.route().colocated() ? "colocated" : "disaggregated";
  if (!last.route().prefill_worker().empty()) {
    absl::StrAppend(&route, " prefill=", last.route().prefill_worker());
  }
  if (!last.route().decode_worker().empty()) {
    absl::StrAppend(&route, " decode=", last.route().decode_worker());
  }
  return absl::StrFormat(
      "finish=%s prompt_tokens=%d completion_tokens=%d ttft=%.3fs total=%.3fs route=%s", finish,
      last.usage().prompt_tokens(), last.usage().completion_tokens(),
      last.timings().time_to_first_token_seconds(), last.timings().total_seconds(), route);
}

}  // namespace tandem::router::cli
