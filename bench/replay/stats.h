#pragma once

// tandem-replay's statistics over the request records (summary.json and the
// table printed at the end). Definitions, as vLLM's benchmark_serving:
//   TTFT  = first_token_s - send_s, per OK request;
//   TPOT  = (e2e - TTFT) / (output_tokens - 1), per OK request with >= 2
//           output tokens;
//   ITL   = the gaps between consecutive output chunks, pooled over the OK
//           requests; a chunk of k tokens (known on gRPC) counts as k gaps
//           of gap/k each, as SGLang's bench_serving does; where the count
//           is unknown (HTTP), one gap per chunk, as vLLM's does;
//   E2E   = end_s - send_s, per OK request.
// Percentiles interpolate linearly between closest ranks (numpy.percentile's
// default): the p-th of n sorted values x[0..n) is x[k] + f (x[k+1] - x[k])
// with k + f = p/100 (n - 1).
// Rates divide by duration_s, from the first send to the last end.
// Goodput: OK requests meeting every SLO given (TTFT, TPOT, E2E; a request
// with one output token has no TPOT and meets that SLO) per second; with no
// SLO it equals throughput_rps.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bench/replay/record.h"
#include "nlohmann/json.hpp"

namespace tandem::replay {

struct Slo {
  std::optional<double> ttft_s;
  std::optional<double> tpot_s;
  std::optional<double> e2e_s;
};

// "ttft=2s,tpot=200ms,e2e=30s" (any subset, any order; "" = none). Each value
// needs its unit, ms or s. Errors name the item.
absl::StatusOr<Slo> ParseSlo(absl::string_view spec);

// The p-th percentile (0..100) of `sorted` (ascending, not empty), linear
// interpolation as above.
double Percentile(absl::Span<const double> sorted, double p);

// One request's TPOT (nullopt below 2 output tokens or without a first token),
// and its inter-token gaps appended to `itl`.
std::optional<double> Tpot(const RequestRecord& record);
void AppendItl(const RequestRecord& record, std::vector<double>& itl);

struct Distribution {
  int64_t count = 0;  // values; the others are meaningless when 0
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
};
Distribution Describe(std::vector<double> values);

struct Summary {
  int64_t requests_sent = 0;
  int64_t requests_ok = 0;
  int64_t requests_error = 0;
  std::map<std::string, int64_t> errors;  // status -> count, failed requests only
  int64_t requests_meeting_slo = 0;
  double duration_s = 0;
  int64_t input_tokens = 0;   // OK requests
  int64_t output_tokens = 0;  // OK requests
  double throughput_rps = 0;
  double input_tokens_per_s = 0;
  double output_tokens_per_s = 0;
  double goodput_rps = 0;
  int64_t cached_prompt_tokens = 0;  // OK requests whose usage said so
  int64_t cache_hits = 0;            // semantic-cache answers (gRPC)
  Slo slo;
  Distribution ttft_s, tpot_s, itl_s, e2e_s;
};

// Only records with a send (every record the runner returns) count.
Summary Summarize(absl::Span<const RequestRecord> records, const Slo& slo);

// summary.json (distributions with count 0 have null statistics).
nlohmann::json SummaryJson(const Summary& summary);

// The human-readable table printed at the end of a run.
std::string SummaryTable(const Summary& summary);

}  // namespace tandem::replay
