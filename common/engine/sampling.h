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
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem::engine {

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

  // InvalidArgument naming the field (temperature < 0 or not finite, top_p
  // outside (0,1], min_p outside [0,1], top_k < 0, repetition_penalty <= 0 or
  // not finite, repetition_window < 0, top_logprobs outside [0, 20], empty
  // stop string).
  absl::Status Validate() const;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  // log-softmax of the raw logits (before penalties/temperature) at `token`.
  // Computed only when params.logprobs or top_logprobs > 0 (it costs a pass of
  // exp over the vocabulary); 0 otherwise.
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // sorted, most likely first (ties: lower id)
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token from `logits` (one per vocab entry) given the tokens
  // so far (`history`: prompt and generated, for the repetition penalty).
  // Draws from this sampler's own RNG stream, seeded by params.seed.
  //
  // Steps: repetition penalty (each distinct id in the window once: positive
  // logits divided by the penalty, others multiplied; ids outside the vocab
  // ignored) -> temperature 0: argmax, lowest id on ties -> otherwise top-k,
  // softmax at the temperature, top-p (smallest most-likely set with mass >=
  // top_p, at least one token), min-p (p >= min_p * p_max), renormalise, draw.
  // The draw converts one 64-bit mt19937_64 output to a double in [0, 1), so
  // a seed gives the same tokens with any standard library. NaN logits are
  // never drawn. An empty `logits` returns token -1.
  SampleResult Sample(absl::Span<const float> logits, absl::Span<const int32_t> history);

  // Advances the RNG stream past `steps` Sample() calls made elsewhere (every
  // call with temperature > 0 consumes exactly one draw; greedy none), so a
  // decode worker continuing after a prefill worker sampled the first token
  // draws what a single process would have drawn.
  void SkipSteps(int64_t steps);

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t token;
    float logit;   // after the repetition penalty
    float weight;  // exp((logit - max) / temperature), unnormalised
  };

  static bool Better(const Candidate& a, const Candidate& b);
  // The k best (by Better) of x[0..n) into *out, unordered; NaN never, -inf
  // only unless finite_only.
  static void SelectTop(const float* x, int32_t n, size_t k, bool finite_only,
                        std::vector<Candidate>* out);
  // Reorders candidates_ so that its first N entries are the smallest most-likely
  // set whose weight reaches `target` (N >= 1), and returns N.
  size_t TopPCut(double target);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;          // penalised logits (only with a penalty)
  std::vector<int32_t> index_scratch_;  // distinct ids in the penalty window
  std::vector<Candidate> candidates_;
  std::vector<float> weights_;          // per-vocab exp weights (logprobs; no top-k)
};

// Tracks generated text against stop strings; holds back text that could be
// the start of a stop string so a client never sees part of one.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  // Appends `text`; returns the text safe to emit now. Sets *stopped when a
  // stop string completed (the returned text ends right before it); of
  // several, the one that completes first wins (the longest if they complete
  // together), so the result does not depend on how the text was split.
  // Empty stop strings are ignored.
  std::string Append(absl::string_view text, bool* stopped);
  // Text held back at the end of generation (no stop matched).
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  size_t max_len_ = 0;
  bool stopped_ = false;  // a stop matched: later Appends emit nothing
};

}  // namespace tandem::engine
