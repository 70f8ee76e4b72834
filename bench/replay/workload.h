#pragma once

// The contract between the two halves of tandem-replay (bench/replay/):
// the input side (trace parsers, arrival processes, prompt synthesis) builds a
// Workload; the output side (clients, open-loop runner, records, statistics,
// plot, command line) sends it and measures. See docs/replay.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::replay {

// One row of a trace, after the time window and speed-up are applied.
struct TraceEntry {
  double arrival_s = 0;    // seconds after the first request of the replay
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  std::vector<uint64_t> hash_ids;  // Mooncake prefix blocks; empty otherwise
  int64_t line = 0;                // 1-based line in the trace file; 0 if synthetic
};

enum class TraceFormat { kAuto, kAzure, kMooncake };
enum class Arrival { kTrace, kPoisson, kGamma, kConcurrency };

struct WorkloadOptions {
  // Where the arrivals come from.
  Arrival arrival = Arrival::kTrace;
  std::string trace_path;          // kTrace, and source of lengths for synthetic arrivals if set
  TraceFormat format = TraceFormat::kAuto;
  double speedup = 1.0;            // divides trace inter-arrival times
  double window_start_s = 0;       // trace time window [start, start + duration)
  double duration_s = 0;           // 0 = whole trace (still capped by max_requests)
  double rate = 0;                 // kPoisson / kGamma: requests per second
  double burstiness = 1.0;         // kGamma shape parameter (1 = Poisson)
  int concurrency = 0;             // kConcurrency: requests kept in flight (> 0)
  int64_t max_requests = 0;        // 0 = no cap (then duration_s must bound it)
  uint64_t seed = 0;

  // Lengths.
  double input_scale = 1.0;        // multiply trace lengths, then cap
  double output_scale = 1.0;
  int64_t max_input_tokens = 0;    // 0 = no cap; the runner sets it from the model context
  int64_t max_output_tokens = 0;
  int64_t min_input_tokens = 1;
  int64_t fixed_input_tokens = 0;  // synthetic arrivals without a trace: these lengths
  int64_t fixed_output_tokens = 0;

  // Prompts.
  std::string prompt_source;       // ShareGPT JSON (../shared/traces/...); empty = built-in text
  int64_t hash_block_tokens = 512; // tokens per Mooncake hash id (scaled down for small models)
  double repeat_fraction = 0;      // fraction of requests that repeat an earlier prompt exactly
  double paraphrase_fraction = 0;  // fraction that paraphrase an earlier prompt
  std::string model;               // model name sent with each request
};

// One request to send.
struct ReplayRequest {
  int64_t id = 0;                  // 0, 1, 2, ... in send order
  double send_at_s = 0;            // scheduled offset from the replay start
  std::string prompt;              // the text sent (a raw completion prompt)
  int64_t prompt_tokens = 0;       // exact, as counted by the target tokenizer (no BOS)
  int64_t max_tokens = 0;          // output length, sent with ignore_eos
  std::string kind = "trace";      // "trace" | "repeat" | "paraphrase"
  int64_t source_line = 0;         // TraceEntry::line it came from
};

struct Workload {
  std::vector<ReplayRequest> requests;  // sorted by send_at_s
  // Fixed concurrency (Arrival::kConcurrency): the runner keeps this many in
  // flight and ignores send_at_s. 0 otherwise.
  int concurrency = 0;
};

// Parses a trace (format detected from the header / first line when kAuto).
// A malformed row is InvalidArgument naming the file and the 1-based line.
absl::StatusOr<std::vector<TraceEntry>> LoadTrace(const std::string& path, TraceFormat format);

// Builds the whole workload: arrivals, lengths, prompts of exact token length.
absl::StatusOr<Workload> BuildWorkload(const WorkloadOptions& options,
                                       const engine::Tokenizer& tokenizer);

}  // namespace tandem::replay
