#include "bench/replay/workload.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/replay/arrivals.h"
#include "bench/replay/prompts.h"
#include "bench/replay/trace.h"
#include "common/base/status_macros.h"

namespace tandem::replay {
namespace {

bool IsFraction(double f) { return f >= 0 && f <= 1; }

absl::Status Validate(const WorkloadOptions& o) {
  if (o.arrival == Arrival::kTrace && o.trace_path.empty()) {
    return absl::InvalidArgumentError("trace arrivals need a trace file");
  }
  if (o.arrival == Arrival::kConcurrency && o.concurrency <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fixed concurrency ", o.concurrency, " must be >= 1"));
  }
  if (o.arrival != Arrival::kTrace && o.trace_path.empty() &&
      (o.fixed_input_tokens <= 0 || o.fixed_output_tokens <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic arrivals without a trace need fixed input and output lengths (got ",
                     o.fixed_input_tokens, " and ", o.fixed_output_tokens, ")"));
  }
  if (!(o.input_scale > 0) || !(o.output_scale > 0) || !std::isfinite(o.input_scale) ||
      !std::isfinite(o.output_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("length scales (input ", o.input_scale,
                                                   ", output ", o.output_scale, ") must be > 0"));
  }
  if (o.max_input_tokens < 0 || o.max_output_tokens < 0 || o.min_input_tokens < 0 ||
      o.max_requests < 0) {
    return absl::InvalidArgumentError(
        "max_input_tokens, max_output_tokens, min_input_tokens and max_requests must be >= 0");
  }
  if (o.max_input_tokens > 0 && o.min_input_tokens > o.max_input_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_input_tokens ", o.min_input_tokens, " exceeds max_input_tokens ", o.max_input_tokens));
  }
  if (o.hash_block_tokens < kMinBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("hash_block_tokens ", o.hash_block_tokens,
                                                   " is below the minimum ", kMinBlockTokens));
  }
  if (!IsFraction(o.repeat_fraction) || !IsFraction(o.paraphrase_fraction) ||
      o.repeat_fraction + o.paraphrase_fraction > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeat fraction ", o.repeat_fraction, " and paraphrase fraction ",
                     o.paraphrase_fraction, " must be in [0, 1] with a sum <= 1"));
  }
  return absl::OkStatus();
}

// Trace length scaled, rounded, capped, then raised to the minimum.
int64_t ScaleLength(int64_t length, double scale, int64_t cap, int64_t floor) {
  int64_t scaled = std::llround(static_cast<double>(length) * scale);
  if (cap > 0) {
    scaled = std::min(scaled, cap);
  }
  return std::max<int64_t>({scaled, floor, 1});
}

// Arrival offsets and the trace rows their lengths come from (in order,
// wrapping around; none when lengths are fixed).
struct Schedule {
  std::vector<double> send_at_s;
  std::vector<const TraceEntry*> rows;
};

absl::StatusOr<Schedule> MakeSchedule(const WorkloadOptions& o,
                                      const std::vector<TraceEntry>& window) {
  Schedule schedule;
  switch (o.arrival) {
    case Arrival::kTrace:
      for (const TraceEntry& entry : window) {
        schedule.send_at_s.push_back(entry.arrival_s);
      }
      break;
    case Arrival::kPoisson:
    case Arrival::kGamma: {
      ASSIGN_OR_RETURN(schedule.send_at_s, SyntheticArrivals(o.arrival, o.rate, o.burstiness,
                                                             o.max_requests, o.duration_s, o.seed));
      break;
    }
    case Arrival::kConcurrency: {
      const int64_t count =
          o.max_requests > 0 ? o.max_requests : static_cast<int64_t>(window.size());
      if (count == 0) {
        return absl::InvalidArgumentError(
            "fixed concurrency needs max_requests (or a trace to take the count from)");
      }
      schedule.send_at_s.assign(count, 0.0);
      break;
    }
  }
  if (!window.empty()) {
    for (size_t i = 0; i < schedule.send_at_s.size(); ++i) {
      schedule.rows.push_back(&window[i % window.size()]);
    }
  }
  return schedule;
}

}  // namespace

absl::StatusOr<Workload> BuildWorkload(const WorkloadOptions& options,
                                       const engine::Tokenizer& tokenizer) {
  RETURN_IF_ERROR(Validate(options));
  std::vector<TraceEntry> window;
  if (!options.trace_path.empty()) {
    ASSIGN_OR_RETURN(const std::vector<TraceEntry> trace,
                     LoadTrace(options.trace_path, options.format));
    // Synthetic arrivals cycle through the window's lengths; max_requests
    // bounds the arrivals, not the rows they draw from.
    ASSIGN_OR_RETURN(
        window, SelectWindow(trace, options.window_start_s, options.duration_s, options.speedup,
                             options.arrival == Arrival::kTrace ? options.max_requests : 0));
    if (window.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.trace_path, ": no rows in the window [", options.window_start_s,
                       ", ", options.window_start_s + options.duration_s, ") s"));
    }
  }
  ASSIGN_OR_RETURN(const Schedule schedule, MakeSchedule(options, window));

  std::vector<std::string> texts;
  if (options.prompt_source.empty()) {
    texts = BuiltInPromptTexts();
  } else {
    ASSIGN_OR_RETURN(texts, LoadShareGptPrompts(options.prompt_source));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<PromptSynthesizer> synthesizer,
                   PromptSynthesizer::Create(tokenizer, texts));

  // Its own stream, so the choice of repeats does not move the arrivals.
  std::mt19937_64 rng(options.seed ^ 0x5eed'0f'9e'7a'11ull);
  // The seed also moves the text: each hash id's block and each request's
  // own text come from other corpus positions under another seed, so a rerun
  // with a new seed against a kept server finds nothing of the last run in
  // its prefix cache. Seed 0 is the unsalted text.
  const uint64_t text_salt = options.seed * 0x9e37'79b9'7f4a'7c15ull;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int64_t> originals;  // indices of kind "trace"
  Workload workload;
  workload.concurrency = options.arrival == Arrival::kConcurrency ? options.concurrency : 0;
  workload.requests.reserve(schedule.send_at_s.size());
  for (size_t i = 0; i < schedule.send_at_s.size(); ++i) {
    const TraceEntry* row = schedule.rows.empty() ? nullptr : schedule.rows[i];
    ReplayRequest request;
    request.id = static_cast<int64_t>(i);
    request.send_at_s = schedule.send_at_s[i];
    request.source_line = row != nullptr ? row->line : 0;
    const int64_t input =
        ScaleLength(row != nullptr ? row->input_tokens : options.fixed_input_tokens,
                    row != nullptr ? options.input_scale : 1.0, options.max_input_tokens,
                    options.min_input_tokens);
    request.max_tokens =
        ScaleLength(row != nullptr ? row->output_tokens : options.fixed_output_tokens,
                    row != nullptr ? options.output_scale : 1.0, options.max_output_tokens, 1);
    const double u = uniform(rng);
    const uint64_t pick = rng();
    if (!originals.empty() && u < options.repeat_fraction + options.paraphrase_fraction) {
      const ReplayRequest& source = workload.requests[originals[pick % originals.size()]];
      if (u < options.repeat_fraction) {
        request.kind = "repeat";
        request.prompt = source.prompt;
        request.prompt_tokens = source.prompt_tokens;
      } else {
        request.kind = "paraphrase";
        ASSIGN_OR_RETURN(const Prompt prompt, synthesizer->Paraphrase(source.prompt, pick >> 32,
                                                                      options.max_input_tokens));
        request.prompt = prompt.text;
        request.prompt_tokens = prompt.tokens;
      }
    } else {
      std::vector<uint64_t> hashes;
      if (row != nullptr) {
        hashes = row->hash_ids;
        for (uint64_t& h : hashes) {
          h ^= text_salt;  // one-to-one: equal ids stay equal, distinct stay distinct
        }
      }
      auto prompt = synthesizer->Compose(hashes, options.hash_block_tokens, input,
                                         request.id + static_cast<int64_t>(text_salt >> 24));
      if (!prompt.ok()) {
        return base::Annotate(prompt.status(), absl::StrCat("request ", request.id, " (trace line ",
                                                            request.source_line, ")"));
      }
      request.kind = "trace";
      request.prompt = std::move(prompt->text);
      request.prompt_tokens = prompt->tokens;
      originals.push_back(request.id);
    }
    workload.requests.push_back(std::move(request));
  }
  return workload;
}

}  // namespace tandem::replay
