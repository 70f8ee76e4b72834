#pragma once
// The request checks every worker (and the router) applies before admitting a
// generation request, and the conversion of the wire's sampling parameters
// into the engine's. Pure; any thread.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/model.h"
#include "common/engine/sampling.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::serving {

// Wire -> engine: top_p 0 and repetition_penalty 0 mean "off" (proto3
// defaults), an absent seed is 0. Other values pass through unchanged so
// Validate() can reject them.
engine::SamplingParams SamplingFromProto(const tandem::v1::SamplingParams& p);

// InvalidArgument naming the problem: empty prompt, a token id outside the
// vocabulary (index and id), max_tokens <= 0, prompt + max_tokens over the
// model's context, bad sampling parameters (SamplingParams::Validate), stop
// token ids outside the vocabulary.
absl::Status ValidateGenerationRequest(const engine::ModelConfig& model, absl::Span<const int32_t> prompt,
                                       int32_t max_tokens, const engine::SamplingParams& sampling);

}  // namespace tandem::serving
