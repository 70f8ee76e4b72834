#pragma once
// A decoder-only transformer loaded from GGUF: hyper-parameters, weights and
// tokenizer. Architectures: `llama` (Llama 2/3 incl. llama3 rope scaling via
// rope_freqs, TinyLlama, SmolLM, Mistral without sliding window) and `qwen2`
// (QKV bias, tied embeddings, NeoX rope).
//
// Immutable after Load; safe to share between threads. Weight data is read
// from the file's mapping, which the Model keeps alive.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/format/gguf.h"
#include "common/engine/kernels/kernels.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::engine {

enum class Architecture { kLlama, kQwen2 };

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string arch_name;
  std::string name;            // general.name, or the file name
  int32_t vocab_size = 0;
  int32_t dim = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t ffn_dim = 0;
  int32_t context_length = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int32_t rope_dim = 0;        // rotated dims per head (<= head_dim)
  RopeStyle rope_style = RopeStyle::kNormal;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  std::string rope_scaling;    // "", "linear", "llama3" (rope_freqs)
  GgmlType weight_type = GgmlType::kF32;  // type of the attention q weight, for reporting
};

struct LayerWeights {
  std::vector<float> attn_norm;
  WeightMatrix wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;  // empty unless qkv_bias
  std::vector<float> ffn_norm;
  WeightMatrix w_gate, w_up, w_down;
};

class Model {
 public:
  // Opens and validates a GGUF model. Errors name the file and the missing or
  // inconsistent key / tensor ("blk.3.attn_k.weight: shape [64, 32], want [64, 64]").
  // A file without tokenizer metadata loads with tokenizer() == nullptr.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const GgufFile& gguf() const { return *file_; }
  // Identifies the weights (hash of the GGUF header: metadata and tensor
  // infos); seeds the prefix-cache hash chain.
  uint64_t model_id() const { return model_id_; }

  const WeightMatrix& token_embedding() const { return token_embd_; }
  const WeightMatrix& output() const { return tied_output_ ? token_embd_ : output_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  const LayerWeights& layer(int i) const { return layers_[i]; }
  // rope_dim/2 inverse frequencies, scaling folded in.
  const std::vector<float>& rope_inv_freq() const { return inv_freq_; }
  // Bytes of weights one forward token reads (all matrices, embeddings excluded).
  int64_t weight_bytes_per_token() const;

 private:
  Model() = default;
  absl::Status Init();

  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelConfig config_;
  uint64_t model_id_ = 0;
  WeightMatrix token_embd_;
  WeightMatrix output_;
  bool tied_output_ = false;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;
};

}  // namespace tandem::engine
