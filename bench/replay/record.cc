#include "bench/replay/record.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace tandem::replay {
namespace {

using json = nlohmann::json;

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Reads j[key] into *out; InvalidArgument naming the key otherwise. A null
// leaves an optional empty.
template <typename T>
absl::Status Read(const json& j, const char* key, T* out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    return absl::InvalidArgumentError(absl::StrCat("request record: no field '", key, "'"));
  }
  try {
    it->get_to(*out);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("request record: field '", key, "': ", e.what()));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Read(const json& j, const char* key, std::optional<T>* out) {
  const auto it = j.find(key);
  if (it != j.end() && it->is_null()) {
    out->reset();
    return absl::OkStatus();
  }
  T v{};
  RETURN_IF_ERROR(Read(j, key, &v));
  *out = v;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RequestRecord> RecordFromJson(const json& j) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError("request record: not a JSON object");
  }
  RequestRecord r;
  RETURN_IF_ERROR(Read(j, "id", &r.id));
  RETURN_IF_ERROR(Read(j, "kind", &r.kind));
  RETURN_IF_ERROR(Read(j, "source_line", &r.source_line));
  RETURN_IF_ERROR(Read(j, "protocol", &r.protocol));
  RETURN_IF_ERROR(Read(j, "scheduled_s", &r.scheduled_s));
  RETURN_IF_ERROR(Read(j, "send_s", &r.send_s));
  RETURN_IF_ERROR(Read(j, "first_token_s", &r.first_token_s));
  RETURN_IF_ERROR(Read(j, "chunk_times_s", &r.chunk_times_s));
  RETURN_IF_ERROR(Read(j, "chunk_tokens", &r.chunk_tokens));
  RETURN_IF_ERROR(Read(j, "end_s", &r.end_s));
  RETURN_IF_ERROR(Read(j, "ok", &r.ok));
  RETURN_IF_ERROR(Read(j, "status", &r.status));
  RETURN_IF_ERROR(Read(j, "error", &r.error));
  RETURN_IF_ERROR(Read(j, "prompt_tokens", &r.prompt_tokens));
  RETURN_IF_ERROR(Read(j, "prompt_tokens_from_server", &r.prompt_tokens_from_server));
  RETURN_IF_ERROR(Read(j, "max_tokens", &r.max_tokens));
  RETURN_IF_ERROR(Read(j, "output_tokens", &r.output_tokens));
  RETURN_IF_ERROR(Read(j, "cached_prompt_tokens", &r.cached_prompt_tokens));
  RETURN_IF_ERROR(Read(j, "cache_hit", &r.cache_hit));
  RETURN_IF_ERROR(Read(j, "finish_reason", &r.finish_reason));
  json route;
  RETURN_IF_ERROR(Read(j, "route", &route));
  RETURN_IF_ERROR(Read(route, "model", &r.route_model));
  RETURN_IF_ERROR(Read(route, "prefill_worker", &r.prefill_worker));
  RETURN_IF_ERROR(Read(route, "decode_worker", &r.decode_worker));
  RETURN_IF_ERROR(Read(route, "colocated", &r.colocated));
  return r;
}

json RecordJson(const RequestRecord& r) {
  json j;
  j["id"] = r.id;
  j["kind"] = r.kind;
  j["source_line"] = r.source_line;
  j["protocol"] = r.protocol;
  j["scheduled_s"] = r.scheduled_s;
  j["send_s"] = r.send_s;
  j["first_token_s"] = OrNull(r.first_token_s);
  j["chunk_times_s"] = r.chunk_times_s;
  j["chunk_tokens"] = r.chunk_tokens;
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
