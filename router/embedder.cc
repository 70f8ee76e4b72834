#include "router/embedder.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/engine/format/gguf.h"
#include "common/base/logging.h"
#include "common/engine/model_store.h"

namespace tandem::router {

// One caller's work: its texts' token ids in, embeddings (or an error) out.
struct Embedder::Pending {
  std::vector<std::vector<engine::TokenId>> ids;
  std::vector<std::vector<float>> out;
  absl::Status status;
  bool done = false;
};

absl::StatusOr<std::unique_ptr<Embedder>> Embedder::Load(const EmbeddingConfig& config) {
  if (config.model.empty()) return absl::InvalidArgumentError("embedding.model: empty");
  if (config.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("embedding.threads: ", config.threads, ", want >= 1"));
  }
  if (config.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding.max_batch: ", config.max_batch, ", want >= 1"));
  }
  absl::StatusOr<std::string> path = engine::ResolveModelPath(config.model);
  if (!path.ok()) return path.status();
  absl::StatusOr<std::unique_ptr<engine::GgufFile>> file = engine::GgufFile::Open(*path);
  if (!file.ok()) return file.status();
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return tokenizer.status();
  if (config.precision != "f32" && config.precision != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding.precision: '", config.precision, "' (known: f32, bf16)"));
  }
  const engine::EncoderPrecision precision = config.precision == "bf16"
                                                 ? engine::EncoderPrecision::kBf16
                                                 : engine::EncoderPrecision::kF32;
  absl::StatusOr<std::unique_ptr<engine::Encoder>> encoder =
      engine::Encoder::Load(*path, config.threads, precision);
  if (!encoder.ok()) return encoder.status();
  if (precision == engine::EncoderPrecision::kBf16 &&
      (*encoder)->precision() != engine::EncoderPrecision::kBf16) {
    LOG(WARNING) << "embedding.precision: bf16 needs AVX512-BF16; this CPU runs the encoder in f32";
  }
  const int64_t positions = (*encoder)->config().n_positions;
  if (config.max_seq_tokens < 2 || config.max_seq_tokens > positions) {
    return absl::InvalidArgumentError(absl::StrCat("embedding.max_seq_tokens: ",
                                                   config.max_seq_tokens, ", want 2..", positions,
                                                   " (the model's context)"));
  }
  return std::unique_ptr<Embedder>(
      new Embedder(config, std::move(*tokenizer), std::move(*encoder)));
}

Embedder::Embedder(EmbeddingConfig config, std::unique_ptr<engine::Tokenizer> tokenizer,
                   std::unique_ptr<engine::Encoder> encoder)
    : config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      encoder_(std::move(encoder)) {}

Embedder::~Embedder() = default;

absl::StatusOr<std::vector<engine::TokenId>> Embedder::Tokenize(absl::string_view text,
                                                                bool* truncated) const {
  absl::StatusOr<std::vector<engine::TokenId>> ids =
      tokenizer_->Encode(text, /*add_bos=*/true, /*parse_special=*/false);
  if (!ids.ok()) return ids.status();
  *truncated = false;
  const size_t max = static_cast<size_t>(config_.max_seq_tokens);
  if (ids->size() > max) {  // keep [CLS] ... [SEP], as sentence-transformers does
    const engine::TokenId sep = ids->back();
    ids->resize(max - 1);
    ids->push_back(sep);
    *truncated = true;
  }
  return ids;
}

absl::StatusOr<Embedding> Embedder::Embed(absl::string_view text) {
  const std::string one(text);
  {
    absl::MutexLock lock(&recent_mu_);
    if (auto it = recent_index_.find(one); it != recent_index_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second);
      ++recent_hits_;
      return it->second->second;
    }
  }
  absl::StatusOr<std::vector<Embedding>> all = EmbedAll(absl::MakeConstSpan(&one, 1));
  if (!all.ok()) return all.status();
  absl::MutexLock lock(&recent_mu_);
  if (!recent_index_.contains(one)) {
    recent_.emplace_front(one, (*all)[0]);
    recent_index_[one] = recent_.begin();
    if (recent_.size() > kRecentTexts) {
      recent_index_.erase(recent_.back().first);
      recent_.pop_back();
    }
  }
  return std::move((*all)[0]);
}

absl::StatusOr<std::vector<Embedding>> Embedder::EmbedAll(absl::Span<const std::string> texts) {
  std::vector<Embedding> result(texts.size());
  Pending pending;
  pending.ids.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    bool truncated = false;
    absl::StatusOr<std::vector<engine::TokenId>> ids = Tokenize(texts[i], &truncated);
    if (!ids.ok()) {
      return absl::Status(ids.status().code(),
                          absl::StrCat("embedding text ", i, ": ", ids.status().message()));
    }
    result[i].tokens = static_cast<int32_t>(ids->size());
    result[i].truncated = truncated;
    pending.ids.push_back(std::move(*ids));
  }
  if (texts.empty()) return result;

  bool lead = false;
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(&pending);
    if (!leader_running_) leader_running_ = lead = true;
  }
  if (lead) RunBatches();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&pending.done));
  }
  if (!pending.status.ok()) return pending.status;
  for (size_t i = 0; i < texts.size(); ++i) result[i].vector = std::move(pending.out[i]);
  return result;
}

void Embedder::RunBatches() {
  for (;;) {
    // Take whole callers until max_batch texts (at least one caller).
    std::vector<Pending*> batch;
    {
      absl::MutexLock lock(&mu_);
      size_t texts = 0;
      while (!queue_.empty() &&
             (batch.empty() ||
              texts + queue_.front()->ids.size() <= static_cast<size_t>(config_.max_batch))) {
        texts += queue_.front()->ids.size();
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      if (batch.empty()) {
        leader_running_ = false;
        return;
      }
    }
    std::vector<std::vector<engine::TokenId>> ids;
    for (Pending* p : batch) {
      for (const auto& seq : p->ids) ids.push_back(seq);
    }
    absl::StatusOr<std::vector<std::vector<float>>> vectors = encoder_->Embed(ids);
    absl::MutexLock lock(&mu_);
    ++encoder_calls_;
    size_t next = 0;
    for (Pending* p : batch) {
      if (vectors.ok()) {
        for (size_t i = 0; i < p->ids.size(); ++i) p->out.push_back(std::move((*vectors)[next++]));
        texts_embedded_ += static_cast<int64_t>(p->ids.size());
      } else {
        p->status = vectors.status();
      }
      p->done = true;  // p may be gone once mu_ is released
    }
  }
}

int64_t Embedder::encoder_calls() const {
  absl::MutexLock lock(&mu_);
  return encoder_calls_;
}

int64_t Embedder::recent_hits() const {
  absl::MutexLock lock(&recent_mu_);
  return recent_hits_;
}

int64_t Embedder::texts_embedded() const {
  absl::MutexLock lock(&mu_);
  return texts_embedded_;
}

}  // namespace tandem::router
