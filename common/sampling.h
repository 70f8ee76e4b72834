#pragma once
// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition
// penalty, per-request seed, stop token ids and stop strings, top-n logprobs.
//
// A Sampler belongs to one sequence and is used from one thread.

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tandem {

struct SamplingParams {
  float temperature = 0.0f;         // 0 = greedy (argmax, lowest id on ties)
  int32_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off; keep p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1 = off; CTRL-style over the last repetition_window tokens
  int32_t repetition_window = 64;   // 0 = all tokens seen
  uint64_t seed = 0;                // same seed and inputs -> same tokens
  int32_t top_logprobs = 0;         // n most likely tokens to report per step (0..20)
  bool logprobs = false;            // report the chosen token's logprob
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;

  // InvalidArgument naming the field (temperature < 0, top_p outside (0,1],
  // min_p outside [0,1], top_k < 0, repetition_penalty <= 0, top_logprobs
  // outside [0, 20], empty stop string).
  absl::Status Validate() const;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;                    // log-softmax of the raw logits (before penalties/temperature)
  std::vector<TokenLogprob> top_logprobs;  // sorted, most likely first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token from `logits` (one per vocab entry) given the tokens
  // so far (`history`: prompt and generated, for the repetition penalty).
  // Draws from this sampler's own RNG stream, seeded by params.seed.
  SampleResult Sample(absl::Span<const float> logits, absl::Span<const int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> index_scratch_;
};

// Tracks generated text against stop strings; holds back text that could be
// the start of a stop string so a client never sees part of one.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  // Appends `text`; returns the text safe to emit now. Sets *stopped when a
  // stop string completed (the returned text ends right before it).
  std::string Append(absl::string_view text, bool* stopped);
  // Text held back at the end of generation (no stop matched).
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  size_t max_len_ = 0;
};

}  // namespace tandem
