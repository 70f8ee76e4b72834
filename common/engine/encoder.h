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
// Every per-token operation is row-local and MatMul is batch invariant, so a
// sequence's embedding has the same bits whatever else is in the batch.
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

class Encoder {
 public:
  // Maps the GGUF at `path` (a file; resolve names with ResolveModelPath).
  // InvalidArgument naming the key or tensor for a file that is not a
  // mean-pooled bidirectional BERT of consistent shapes.
  static absl::StatusOr<std::unique_ptr<Encoder>> Load(const std::string& path,
                                                       int num_threads = 1);

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
  };

  Encoder(std::unique_ptr<GgufFile> file, int num_threads);
  absl::Status Init();
  // Self-attention of the packed tokens: token t of sequence s attends to
  // rows [starts[s], starts[s + 1]) of k and v. Writes attn_.
  void Attention(const std::vector<int64_t>& starts);

  std::unique_ptr<GgufFile> file_;  // owns the mapping the weights borrow
  EncoderConfig config_;
  base::ThreadPool pool_;
  WeightMatrix token_embd_, position_embd_;
  std::vector<float> token_type0_, embd_norm_w_, embd_norm_b_;
  std::vector<Layer> layers_;
  // Scratch, [tokens][width] row-major, grown as needed.
  std::vector<float> x_, q_, k_, v_, attn_, proj_, ff_;
};

}  // namespace tandem::engine
