#pragma once
// The client side of `tandem generate`: one streaming Generation/Generate
// call, text written to `out` as it arrives.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::router::cli {

struct GenerateOptions {
  std::string router;            // host:port of the router's gRPC front
  std::string model;             // "" = the router's only model
  std::string prompt;
  std::vector<int32_t> prompt_ids;   // used instead of `prompt` when not empty
  int32_t max_tokens = 0;        // 0 = the router's default
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool add_special_tokens = true;
  absl::Duration timeout = absl::Seconds(120);   // the call's deadline
  std::string api_key;           // sent as "authorization: Bearer <key>" when set
};

// Streams the answer into `out`; returns the last message (finish reason,
// usage, timings, route) or the call's status (INVALID_ARGUMENT,
// UNAVAILABLE, ...).
absl::StatusOr<tandem::v1::GenerateResponse> RunGenerate(const GenerateOptions& options,
                                                         std::ostream& out);

// "finish=stop prompt_tokens=5 completion_tokens=12 ttft=0.012s total=0.080s
// route=colocated decode=127.0.0.1:7001".
std::string SummaryLine(const tandem::v1::GenerateResponse& last);

}  // namespace tandem::router::cli
