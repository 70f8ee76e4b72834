#pragma once
// Trace files for tandem-replay: the Azure LLM inference CSV
// (TIMESTAMP,ContextTokens,GeneratedTokens) and Mooncake JSON Lines
// (timestamp ms, input_length, output_length, hash_ids). LoadTrace
// (workload.h) parses a whole file; SelectWindow cuts the replayed slice.
// Pure functions, any thread.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/replay/workload.h"

namespace tandem::replay {

// "2023-11-16 18:15:46.6805900" (any number of fractional digits, or none;
// no time zone: read as UTC) -> seconds since the Unix epoch.
// InvalidArgument quoting the text otherwise.
absl::StatusOr<double> ParseAzureTimestamp(absl::string_view text);

// The format of a trace from its first non-empty line: a line starting with
// "TIMESTAMP" (an Azure header, after an optional UTF-8 BOM) is kAzure, one
// starting with '{' is kMooncake. InvalidArgument "FILE:LINE: ..." otherwise.
absl::StatusOr<TraceFormat> DetectTraceFormat(const std::string& path);

// Parses trace text (`path` names it in errors). Entries keep their file
// order; arrival_s is relative to the first row, so the first is 0.
// Timestamps that go backwards are InvalidArgument: a replay is ordered.
absl::StatusOr<std::vector<TraceEntry>> ParseTrace(absl::string_view text, TraceFormat format,
                                                   const std::string& path);

// The rows with arrival in [start_s, start_s + duration_s) of trace time
// (duration_s 0: to the end), at most max_requests of them (0: all), with
// arrival_s made relative to the first row kept and divided by `speedup`.
// InvalidArgument when speedup <= 0, start_s or duration_s < 0, or max_requests < 0.
absl::StatusOr<std::vector<TraceEntry>> SelectWindow(const std::vector<TraceEntry>& trace,
                                                     double start_s, double duration_s,
                                                     double speedup, int64_t max_requests);

}  // namespace tandem::replay
