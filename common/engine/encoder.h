#pragma once
// A BERT sentence encoder (all-MiniLM-L6-v2, docs/models.md): token ids in,
// one L2-normalized embedding per sequence out, as sentence-transformers
// computes it (BertModel -> mean pooling over the tokens -> Normalize).
//
// The GGUF is llama.cpp's BERT layout (scripts/convert_minilm.py): arch
// "bert", post-LN transformer, erf GELU, bidirectional attention, learned
// absolute positions, token type 0. Weights may be F32 or F16 (any type our
// MatMul takes; the converter writes F32); 1-D tensors F32, F16 or BF16.
//
// Batching: a call embeds several sequences at once. They are packed rather
// than padded: the matmuls run over all real tokens of the batch, and each
// token attends only to the tokens of its own sequence — exactly what an
// attention mask over a padded batch computes, without the padding's work.
// Every per-token operation is row-local and MatMul (and the BF16 GEMM) is
// batch invariant, so a sequence's embedding has the same bits whatever else
// is in the batch.
//
// Thread-compatible: Embed reuses scratch buffers and the pool; call it from
// one thread at a time.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/engine/encoder_ops/gemm_bf16.h"
#include "common/engine/format/gguf.h"
#include "common/engine/kernels/kernels.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::engine {

struct EncoderConfig {
  int64_t n_vocab = 0;
  int64_t n_positions = 0;  // bert.context_length: the longest sequence
  int64_t n_embd = 0;       // also the embedding's dimension
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  double norm_eps = 1e-12;
};

// How the encoder's matmuls compute. kF32: fp32 weights and activations (the
// reference; min cosine vs sentence-transformers 1 - 3e-13). kBf16: weights
// and matmul inputs rounded to bf16, fp32 sums, on AVX512-BF16 (~1.5x faster
// per prompt; min cosine 1 - 2e-5, docs/benchmarks.md); a CPU without
// AVX512-BF16 runs kF32 (precision() says which).
enum class EncoderPrecision { kF32, kBf16 };

class Encoder {
 public:
  // Maps the GGUF at `path` (a file; resolve names with ResolveModelPath).
  // InvalidArgument naming the key or tensor for a file that is not a
  // mean-pooled bidirectional BERT of consistent shapes.
  static absl::StatusOr<std::unique_ptr<Encoder>> Load(
      const std::string& path, int num_threads = 1,
      EncoderPrecision precision = EncoderPrecision::kF32);

  // The precision Embed runs (kF32 where kBf16 was asked but is unsupported).
  EncoderPrecision precision() const { return precision_; }

  const EncoderConfig& config() const { return config_; }
  int64_t dim() const { return config_.n_embd; }

  // One embedding (dim() floats, unit L2 norm) per sequence. Each sequence is
  // the tokenizer's full output ([CLS] ... [SEP]), 1..n_positions ids below
  // n_vocab; InvalidArgument naming the sequence otherwise. An empty batch
  // gives an empty result.
  absl::StatusOr<std::vector<std::vector<float>>> Embed(
      absl::Span<const std::vector<TokenId>> batch);

 private:
  struct Layer {
    WeightMatrix q, k, v, o, up, down;
    std::vector<float> q_bias, k_bias, v_bias, o_bias, up_bias, down_bias;
    std::vector<float> attn_norm_w, attn_norm_b, out_norm_w, out_norm_b;
    // The same matrices and biases for the BF16 GEMM (kBf16 only).
    encoder_ops::PackedBf16 q16, k16, v16, o16, up16, down16;
  };

  Encoder(std::unique_ptr<GgufFile> file, int num_threads, EncoderPrecision precision);
  absl::Status Init();
  // Self-attention of the packed tokens: token t of sequence s attends to
  // rows [starts[s], starts[s + 1]) of k and v. Writes attn_.
  void Attention(const std::vector<int64_t>& starts);
  // y = x w^T + bias for n rows of x: the BF16 GEMM on `packed` for kBf16,
  // else MatMul and the bias.
  void Linear(const WeightMatrix& w, const std::vector<float>& bias,
              const encoder_ops::PackedBf16& packed, const float* x, int64_t n, float* y);

  std::unique_ptr<GgufFile> file_;  // owns the mapping the weights borrow
  EncoderConfig config_;
  EncoderPrecision precision_;
  base::ThreadPool pool_;
  WeightMatrix token_embd_, position_embd_;
  std::vector<float> token_type0_, embd_norm_w_, embd_norm_b_;
  std::vector<Layer> layers_;
  // Scratch, [tokens][width] row-major, grown as needed.
  std::vector<float> x_, q_, k_, v_, attn_, proj_, ff_;
  std::vector<uint16_t> xb_;       // a matmul's input as bf16 (kBf16)
  std::vector<float> zero_bias_;  // n_ff zeros: GELU after a Linear that added the bias
};

}  // namespace tandem::engine
