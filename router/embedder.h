#pragma once
// Sentence embeddings for the router (semantic cache, complexity routing):
// text -> our WordPiece tokenizer -> engine::Encoder (all-MiniLM-L6-v2 by
// default, docs/models.md) -> one unit-norm vector.
//
// Batching: concurrent callers are served together. A caller queues its text;
// if no batch is running it becomes the leader and embeds everything queued
// (up to max_batch texts per encoder call) until the queue is empty, while the
// others wait for their own result. A lone caller pays one encoder call and no
// waiting; under load the encoder's matmuls run over many prompts at once. The
// encoder is batch invariant (engine/encoder.h), so a text's vector has the
// same bits whoever it was batched with.
//
// Long texts: sentence-transformers truncates this model to max_seq_length
// (256) tokens; so does Embed, and says so in Embedding::truncated — two texts
// that differ only after the cut get the same vector, which a cache must not
// take for similarity.
//
// Recent texts: the last `kRecentTexts` distinct texts embedded keep their
// vectors, so a request whose text is embedded twice on its way through the
// router (complexity routing in Prepare, then the semantic cache in Start)
// pays for one encoder pass.
//
// Thread-safe.

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/engine/encoder.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "router/config.h"

namespace tandem::router {

struct Embedding {
  std::vector<float> vector;  // dim() floats, unit L2 norm
  int32_t tokens = 0;         // after truncation, [CLS] and [SEP] included
  bool truncated = false;
};

class Embedder {
 public:
  // Resolves config.model with engine::ResolveModelPath; NotFound names the
  // fetch command for a missing model, InvalidArgument a bad file or config.
  static absl::StatusOr<std::unique_ptr<Embedder>> Load(const EmbeddingConfig& config);
  ~Embedder();

  int dim() const { return static_cast<int>(encoder_->dim()); }
  // The precision the encoder runs (f32 where bf16 was asked but unsupported).
  engine::EncoderPrecision precision() const { return encoder_->precision(); }
  const EmbeddingConfig& config() const { return config_; }

  absl::StatusOr<Embedding> Embed(absl::string_view text);
  // Several texts in one call (still batched with concurrent callers).
  absl::StatusOr<std::vector<Embedding>> EmbedAll(absl::Span<const std::string> texts);

  // Encoder calls so far, texts embedded by them, and texts answered from
  // the recent texts (tests and metrics).
  int64_t encoder_calls() const;
  int64_t texts_embedded() const;
  int64_t recent_hits() const;

  static constexpr size_t kRecentTexts = 64;

 private:
  struct Pending;
  Embedder(EmbeddingConfig config, std::unique_ptr<engine::Tokenizer> tokenizer,
           std::unique_ptr<engine::Encoder> encoder);
  absl::StatusOr<std::vector<engine::TokenId>> Tokenize(absl::string_view text, bool* truncated) const;
  // Leader: embeds queued work until the queue is empty.
  void RunBatches() ABSL_LOCKS_EXCLUDED(mu_);

  const EmbeddingConfig config_;
  const std::unique_ptr<engine::Tokenizer> tokenizer_;
  const std::unique_ptr<engine::Encoder> encoder_;  // used by the leader only

  mutable absl::Mutex mu_;
  std::deque<Pending*> queue_ ABSL_GUARDED_BY(mu_);
  bool leader_running_ ABSL_GUARDED_BY(mu_) = false;
  int64_t encoder_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t texts_embedded_ ABSL_GUARDED_BY(mu_) = 0;

  // Recent texts, most recent first (text -> its embedding).
  mutable absl::Mutex recent_mu_;
  std::list<std::pair<std::string, Embedding>> recent_ ABSL_GUARDED_BY(recent_mu_);
  absl::flat_hash_map<std::string, std::list<std::pair<std::string, Embedding>>::iterator>
      recent_index_ ABSL_GUARDED_BY(recent_mu_);
  int64_t recent_hits_ ABSL_GUARDED_BY(recent_mu_) = 0;
};

}  // namespace tandem::router
