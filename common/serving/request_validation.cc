#include "common/serving/request_validation.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace tandem::serving {

engine::SamplingParams SamplingFromProto(const tandem::v1::SamplingParams& p) {
  engine::SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  s.seed = p.has_seed() ? p.seed() : 0;
  s.top_logprobs = p.top_logprobs();
  s.logprobs = p.logprobs();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.stop_strings.assign(p.stop().begin(), p.stop().end());
  s.ignore_eos = p.ignore_eos();
  return s;
}

absl::Status ValidateGenerationRequest(const engine::ModelConfig& model, absl::Span<const int32_t> prompt,
                                       int32_t max_tokens, const engine::SamplingParams& sampling) {
  if (prompt.empty()) {
    return absl::InvalidArgumentError("prompt is empty");
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= model.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " has id ", prompt[i],
                                                     ", outside the vocabulary [0, ",
                                                     model.vocab_size, ")"));
    }
  }
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens must be > 0, got ", max_tokens));
  }
  if (static_cast<int64_t>(prompt.size()) + max_tokens > model.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", prompt.size(),
                                                   " tokens) + max_tokens (", max_tokens,
                                                   ") exceeds the model context of ",
                                                   model.context_length, " tokens"));
  }
  RETURN_IF_ERROR(base::Annotate(sampling.Validate(), "sampling"));
  for (int32_t id : sampling.stop_token_ids) {
    if (id < 0 || id >= model.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: stop token id ", id,
                                                     " outside the vocabulary [0, ",
                                                     model.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::serving
