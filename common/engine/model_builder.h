#pragma once
// Writes random-weight GGUF models of a given shape, for tests and benchmarks
// (tandem-mkmodel). The tokenizer is copied from a vocab GGUF when given.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/engine/format/ggml_type.h"

namespace tandem::engine {

struct RandomModelSpec {
  std::string arch = "llama";   // llama or qwen2 (qwen2 gets QKV biases)
  int32_t dim = 256;
  int32_t layers = 2;
  int32_t heads = 8;
  int32_t kv_heads = 4;
  int32_t ffn = 512;
  int32_t context = 2048;
  int32_t vocab_size = 512;     // used when vocab_path is empty
  std::string vocab_path;       // GGUF whose tokenizer.* metadata (and size) to copy
  GgmlType dtype = GgmlType::kF32;  // type of 2-D weights; norms and biases stay F32
  bool tied_embeddings = false;
  float rope_theta = 10000.0f;
  uint64_t seed = 1;

  absl::Status Validate() const;
};

absl::Status WriteRandomModel(const RandomModelSpec& spec, const std::string& path);

}  // namespace tandem::engine
