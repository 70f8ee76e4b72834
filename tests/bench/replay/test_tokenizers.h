#pragma once
// The vocabularies the replay workload tests run on, loaded once per process:
// "smollm2" and "qwen2" (SmolLM2-135M-Instruct and Qwen2.5-Coder-0.5B from the
// model cache, scripts/fetch_models.sh) and "stories260K" (../shared/models).
// A missing or bad model aborts the test binary after a failure naming it.

#include <cstdint>
#include <string>
#include <vector>

#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::replay::testing {

const engine::Tokenizer& TestTokenizer(const std::string& name);

// Ids of `text` without BOS or special-token parsing (a failure if it fails).
std::vector<engine::TokenId> EncodePlain(const engine::Tokenizer& tokenizer,
                                         const std::string& text);

}  // namespace tandem::replay::testing
