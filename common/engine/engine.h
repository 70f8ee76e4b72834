#pragma once
// The batch step: one forward pass over a mixed batch of prefill chunks (any
// length) and decode tokens from many sequences, over a paged KV cache, with
// logits only where asked. Prefill workers, decode workers and colocated mode
// all drive the model through this one call.
//
// Engine thread only: an Engine is owned and called by one thread; it runs
// kernels on its own ThreadPool.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/engine/kv_cache.h"
#include "common/engine/model.h"

namespace tandem::engine {

struct EngineConfig {
  int num_threads = 0;                   // 0: all hardware threads
  int32_t num_kv_blocks = 0;             // 0: derive from kv_cache_bytes
  int64_t kv_cache_bytes = 256ll << 20;  // KV pool size when num_kv_blocks == 0
  int32_t block_size = 16;               // tokens per KV block
  GgmlType kv_dtype = GgmlType::kF32;    // F32 or F16
  bool enable_prefix_cache = true;

  absl::Status Validate() const;
};

enum class LogitsMode { kNone, kLast, kAll };

// One sequence's share of a step: `tokens` are appended after the tokens the
// sequence already holds (its KV length), e.g. a prefill chunk or one decode
// token.
struct BatchEntry {
  SequenceId seq = 0;
  absl::Span<const int32_t> tokens;
  LogitsMode logits = LogitsMode::kLast;
};

// Logits of a step, flat: rows are [vocab] floats.
class StepOutput {
 public:
  int32_t vocab_size() const { return vocab_; }
  // Logits after token `i` of entry `entry` (i counts within the entry; with
  // kLast only the last token, index tokens.size()-1, has logits).
  absl::Span<const float> logits(size_t entry, size_t i) const;
  bool has_logits(size_t entry, size_t i) const;
  absl::Span<const float> last_logits(size_t entry) const;

 private:
  friend class Engine;
  int32_t vocab_ = 0;
  std::vector<float> data_;
  std::vector<int64_t> first_row_;  // per entry: row of its first logits, -1 if none
  std::vector<int32_t> first_token_;  // per entry: token index of that row
  std::vector<int32_t> num_rows_;
};

class Engine {
 public:
  // `model` must outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const Model& model,
                                                        const EngineConfig& config);
  ~Engine();

  const Model& model() const { return model_; }
  const EngineConfig& config() const { return config_; }
  KvCacheManager& kv_cache() { return kv_; }
  const KvCacheManager& kv_cache() const { return kv_; }
  base::ThreadPool& pool() { return *pool_; }

  // Starts a sequence for `prompt`; attaches the longest cached prefix.
  // Returns how many prompt tokens are already in the KV (the caller runs
  // prompt[returned:] through Step). InvalidArgument for bad token ids or a
  // prompt longer than the context; AlreadyExists for a live id.
  absl::StatusOr<int32_t> AddSequence(SequenceId seq, absl::Span<const int32_t> prompt);
  // A new sequence sharing src's KV (copy-on-write).
  absl::Status ForkSequence(SequenceId src, SequenceId dst);
  absl::Status FreeSequence(SequenceId seq);
  // Tokens whose KV the sequence holds.
  int32_t SequenceLength(SequenceId seq) const;

  // Runs one forward pass. Each sequence may appear at most once. All-or-
  // nothing on errors detected before compute: InvalidArgument (unknown
  // sequence, bad token id, over context), ResourceExhausted (KV pool cannot
  // hold the batch; nothing reserved). `layer_done(l)`, when given, runs on
  // the calling thread as soon as layer l's K and V of every batch token are
  // in the pool (before that layer's attention), so a prefill worker can push
  // them while later layers compute.
  absl::StatusOr<StepOutput> Step(absl::Span<const BatchEntry> batch,
                                  absl::FunctionRef<void(int layer)> layer_done = [](int) {});

  // KV import (decode side of disaggregation): starts `seq` with room for
  // `prompt` and returns its block ids, whose KV a transport then writes.
  // The prefix cache is not consulted (the writer fills every block).
  // ResourceExhausted (nothing kept) when the pool cannot hold the prompt.
  absl::StatusOr<std::vector<BlockId>> AddSequenceForImport(SequenceId seq,
                                                            absl::Span<const int32_t> prompt);
  // Marks the imported prompt KV as present: the sequence now holds
  // `prompt` (as given to AddSequenceForImport) and can decode.
  absl::Status CommitImport(SequenceId seq);

  // Bytes of one block in one layer for K (same for V).
  int64_t block_bytes_per_layer() const { return block_bytes_; }
  int32_t num_blocks() const { return num_blocks_; }
  // Byte offset in the pool of block `block` of layer `layer`, K (kv = 0) or V (1).
  int64_t BlockOffset(int layer, int kv, BlockId block) const {
    return ((int64_t{layer} * 2 + kv) * num_blocks_ + block) * block_bytes_;
  }
  // Base of the whole KV pool ([layer][K|V][block]) for transports.
  void* kv_pool_base() { return kv_pool_; }
  int64_t kv_pool_bytes() const { return kv_pool_bytes_; }
  // Copies one block's K and V (all layers) out, for tests comparing KV.
  std::vector<uint8_t> ReadBlockForTest(BlockId block) const;

 private:
  Engine(const Model& model, const EngineConfig& config, int32_t num_blocks);
  PagedKv LayerKv(int layer) const;
  void CopyBlock(BlockId src, BlockId dst);
  void EnsureScratch(int64_t tokens);

  const Model& model_;
  EngineConfig config_;
  KvCacheManager kv_;
  std::unique_ptr<base::ThreadPool> pool_;
  uint8_t* kv_pool_ = nullptr;
  int64_t kv_pool_bytes_ = 0;
  int64_t block_bytes_ = 0;
  int32_t num_blocks_ = 0;
  absl::flat_hash_map<SequenceId, std::vector<int32_t>> tokens_;  // all tokens per sequence
  absl::flat_hash_map<SequenceId, std::vector<int32_t>> imports_;  // prompts awaiting CommitImport

  // Scratch, grown on demand.
  int64_t scratch_tokens_ = 0;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, o_, gate_, up_, ffn_;
  std::vector<int32_t> positions_;
  std::vector<const int32_t*> tables_;
};

}  // namespace tandem::engine
