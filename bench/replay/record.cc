#include "bench/replay/record.h"

namespace tandem::replay {
namespace {

using json = nlohmann::json;

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

json RecordJson(const RequestRecord& r) {
  json j;
  j["id"] = r.id;
  j["kind"] = r.kind;
  j["source_line"] = r.source_line;
  j["protocol"] = r.protocol;
  j["scheduled_s"] = r.scheduled_s;
  j["send_s"] = r.send_s;
  j["first_token_s"] = OrNull(r.first_token_s);
  j["token_times_s"] = r.token_times_s;
  j["end_s"] = r.end_s;
  j["ttft_s"] = OrNull(r.ttft_s());
  j["e2e_s"] = r.e2e_s();
  j["ok"] = r.ok;
  j["status"] = r.status;
  j["error"] = r.error;
  j["prompt_tokens"] = r.prompt_tokens;
  j["prompt_tokens_from_server"] = r.prompt_tokens_from_server;
  j["max_tokens"] = r.max_tokens;
  j["output_tokens"] = r.output_tokens;
  j["cached_prompt_tokens"] = OrNull(r.cached_prompt_tokens);
  j["cache_hit"] = OrNull(r.cache_hit);
  j["route"] = json{{"model", r.route_model},
                    {"prefill_worker", r.prefill_worker},
                    {"decode_worker", r.decode_worker},
                    {"colocated", OrNull(r.colocated)}};
  j["finish_reason"] = r.finish_reason;
  return j;
}

std::string RecordsJsonl(absl::Span<const RequestRecord> records) {
  std::string out;
  for (const RequestRecord& r : records) {
    out += RecordJson(r).dump(-1, ' ', false, json::error_handler_t::replace);
    out += '\n';
  }
  return out;
}

}  // namespace tandem::replay
