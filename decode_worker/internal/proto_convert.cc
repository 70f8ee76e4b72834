#include "decode_worker/internal/proto_convert.h"

#include "absl/time/time.h"
#include "common/engine/format/ggml_type.h"

namespace tandem::decode_worker::internal {

void ToProto(const kvtransfer::KvLayout& layout, tandem::v1::KvLayout* out) {
  out->set_num_layers(layout.num_layers);
  out->set_num_kv_heads(layout.num_kv_heads);
  out->set_head_dim(layout.head_dim);
  out->set_block_size(layout.block_size);
  out->set_dtype(std::string(engine::GgmlTypeName(layout.dtype)));
  out->set_model_id(layout.model_id);
}

void ToProto(const Reservation& r, const std::string& decode_worker,
             tandem::v1::KvReservation* out) {
  out->set_request_id(r.request_id);
  for (int32_t b : r.block_ids) out->add_block_ids(b);
  ToProto(r.layout, out->mutable_layout());
  out->set_worker_address(r.region.worker_address);
  out->set_rkey(r.region.rkey);
  out->set_pool_base(r.region.base);
  out->set_pool_bytes(r.region.bytes);
  out->set_transfer_mode(r.transfer_mode);
  out->set_deadline_unix_seconds(absl::ToDoubleSeconds(r.deadline - absl::UnixEpoch()));
  out->set_decode_worker(decode_worker);
  out->set_transfer_tag(r.transfer_tag);
  out->set_expected_bytes(r.expected_bytes);
}

tandem::v1::GenerateResponse ToProto(const TokenEvent& event, const std::string& request_id,
                                     const engine::Model& model) {
  tandem::v1::GenerateResponse resp;
  resp.set_request_id(request_id);
  const engine::Tokenizer* tok = model.tokenizer();
  for (const engine::SampleResult& s : event.tokens) {
    tandem::v1::TokenDelta* d = resp.add_tokens();
    d->set_token(s.token);
    d->set_logprob(s.logprob);
    for (const engine::TokenLogprob& t : s.top_logprobs) {
      tandem::v1::TokenLogprob* p = d->add_top_logprobs();
      p->set_token(t.token);
      p->set_logprob(t.logprob);
      if (tok != nullptr) p->set_text(tok->TokenToPiece(t.token));
    }
  }
  resp.set_text(event.text);
  if (event.final) {
    resp.set_finish_reason(event.finish == Finish::kStop ? tandem::v1::FINISH_REASON_STOP
                                                         : tandem::v1::FINISH_REASON_LENGTH);
    tandem::v1::Usage* u = resp.mutable_usage();
    u->set_prompt_tokens(event.usage.prompt_tokens);
    u->set_completion_tokens(event.usage.completion_tokens);
    u->set_cached_prompt_tokens(event.usage.cached_prompt_tokens);
    tandem::v1::Timings* t = resp.mutable_timings();
    t->set_queue_seconds(absl::ToDoubleSeconds(event.timings.queue));
    t->set_time_to_first_token_seconds(absl::ToDoubleSeconds(event.timings.time_to_first_token));
    t->set_prefill_seconds(absl::ToDoubleSeconds(event.timings.prefill));
    t->set_kv_transfer_seconds(absl::ToDoubleSeconds(event.timings.kv_transfer));
    t->set_decode_seconds(absl::ToDoubleSeconds(event.timings.decode));
    t->set_total_seconds(absl::ToDoubleSeconds(event.timings.total));
  }
  return resp;
}

}  // namespace tandem::decode_worker::internal
