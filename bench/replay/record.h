#pragma once

// What tandem-replay records of one request (one line of requests.jsonl).
// Times are seconds from the replay's origin (the instant request 0 is
// scheduled for), on the runner's monotonic clock.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace tandem::replay {

struct RequestRecord {
  int64_t id = 0;
  std::string kind;                  // ReplayRequest::kind
  int64_t source_line = 0;           // trace line (0: synthetic)
  std::string protocol;              // "grpc" | "http"

  double scheduled_s = 0;            // ReplayRequest::send_at_s (or the slot's turn)
  double send_s = 0;                 // the call was started
  std::optional<double> first_token_s;  // first chunk carrying output
  // Arrival of every streamed chunk carrying output (gRPC: a GenerateResponse
  // with tokens; HTTP: an SSE event with text). The router sends a token as
  // soon as it is decoded, but coalesces the tokens decoded while a write is
  // still in flight, so a chunk may carry several (seen with tiny models).
  std::vector<double> chunk_times_s;
  // Tokens in each chunk (gRPC: exact). Empty when unknown (HTTP: an SSE
  // event carries text, not a token count).
  std::vector<int64_t> chunk_tokens;
  double end_s = 0;                  // the stream ended (or failed)

  bool ok = false;
  // gRPC: the code's name ("OK", "UNAVAILABLE", "CANCELLED", ...). HTTP: the
  // response status ("200", "503"), or what stopped it before or after the
  // status line: "CONNECT_FAILED", "READ_ERROR", "STREAM_ERROR",
  // "CANCELLED" (the replay's hard stop), "HTTP_CLIENT_ERROR".
  std::string status;
  std::string error;                 // the server's or the client's message; "" when ok

  int64_t prompt_tokens = 0;         // the server's usage when given, else ours
  bool prompt_tokens_from_server = false;
  int64_t max_tokens = 0;            // requested (ignore_eos)
  int64_t output_tokens = 0;         // the server's usage when given, else tokens received
  std::optional<int64_t> cached_prompt_tokens;  // prefix-cache reuse (usage)
  std::optional<bool> cache_hit;     // answered by the semantic cache (gRPC route only)
  std::string route_model;           // the model that served it
  std::string prefill_worker;        // only when the router exposes workers
  std::string decode_worker;
  std::optional<bool> colocated;     // gRPC route only
  std::string finish_reason;         // "length" | "stop" | "cancelled" | ""

  // Derived; meaningful when ok.
  double e2e_s() const { return end_s - send_s; }
  std::optional<double> ttft_s() const {
    if (!first_token_s) {
      return std::nullopt;
    }
    return *first_token_s - send_s;
  }
};

// One requests.jsonl object: every field above, plus ttft_s and e2e_s
// (null when absent).
nlohmann::json RecordJson(const RequestRecord& record);

// The inverse of RecordJson (ttft_s and e2e_s are derived, so ignored), for
// summarizing a requests.jsonl again. InvalidArgument naming the field that
// is missing or of the wrong type.
absl::StatusOr<RequestRecord> RecordFromJson(const nlohmann::json& j);

// requests.jsonl: one RecordJson per line, in id order.
std::string RecordsJsonl(absl::Span<const RequestRecord> records);

}  // namespace tandem::replay
