#pragma once

// What tandem-replay leaves in --output DIR: requests.jsonl, summary.json,
// and (with gnuplot) latency_cdf.png and throughput.png, with the data and
// the gnuplot script that drew them (plot.gp, *.dat) so a plot can be
// redrawn or restyled.
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "bench/replay/record.h"
#include "bench/replay/stats.h"
#include "nlohmann/json.hpp"

namespace tandem::replay {

// Creates `dir` if needed; writes requests.jsonl and summary.json
// (SummaryJson plus `run`, the run's settings, under "run").
absl::Status WriteReport(const std::string& dir, absl::Span<const RequestRecord> records,
                         const Summary& summary, const nlohmann::json& run);

// Writes the plot data and plot.gp into `dir` and runs `gnuplot` (found on
// PATH). No gnuplot: FailedPrecondition saying so (the caller warns; the
// data and the script are still there). gnuplot failing: Internal.
absl::Status WritePlots(const std::string& dir, absl::Span<const RequestRecord> records);

}  // namespace tandem::replay
