#pragma once
// Single-process generation loop on top of Engine::Step: chunked prefill then
// decode with a Sampler, stop ids and stop strings. Used by tandem-generate and
// by tests as the reference the cluster must reproduce token for token.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/engine/engine.h"
#include "common/engine/sampling.h"

namespace tandem::engine {

struct GenerateOptions {
  int32_t max_tokens = 64;
  int32_t prefill_chunk = 512;          // tokens per prefill step
  SamplingParams sampling;
  // Logits after every prompt position ([prompt, vocab]) when set.
  std::vector<float>* prompt_logits = nullptr;
  // Called with each newly sampled token.
  std::function<void(const SampleResult&)> on_token;
};

enum class FinishReason { kLength, kStop, kContext };
const char* FinishReasonName(FinishReason r);

struct GenerateResult {
  std::vector<int32_t> tokens;          // generated tokens (a stop token id excluded)
  std::string text;                     // detokenized, cut before a matched stop string
  std::vector<SampleResult> samples;
  FinishReason finish = FinishReason::kLength;
  int32_t cached_prompt_tokens = 0;
  absl::Duration prefill_time;
  absl::Duration decode_time;
};

// Runs `prompt` on sequence `seq` of `engine` and frees the sequence after.
absl::StatusOr<GenerateResult> Generate(Engine& engine, SequenceId seq,
                                        absl::Span<const int32_t> prompt,
                                        const GenerateOptions& options);

}  // namespace tandem::engine
