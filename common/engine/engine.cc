#include "common/engine/engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"

namespace tandem::engine {

absl::Status EngineConfig::Validate() const {
  if (num_threads < 0 || num_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads ", num_threads, " out of range"));
  }
  if (block_size < 1 || block_size > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("block_size ", block_size, " out of range"));
  }
  if (kv_dtype != GgmlType::kF32 && kv_dtype != GgmlType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_dtype ", GgmlTypeName(kv_dtype), " unsupported; use F32 or F16"));
  }
  if (num_kv_blocks < 0 || (num_kv_blocks == 0 && kv_cache_bytes <= 0)) {
    return absl::InvalidArgumentError("KV pool size must be positive");
  }
  return absl::OkStatus();
}

absl::Span<const float> StepOutput::logits(size_t entry, size_t i) const {
  CHECK(has_logits(entry, i)) << "no logits for entry " << entry << " token " << i;
  int64_t row = first_row_[entry] + (static_cast<int64_t>(i) - first_token_[entry]);
  return absl::MakeConstSpan(data_.data() + row * vocab_, vocab_);
}

bool StepOutput::has_logits(size_t entry, size_t i) const {
  if (entry >= first_row_.size() || first_row_[entry] < 0) return false;
  int64_t k = static_cast<int64_t>(i) - first_token_[entry];
  return k >= 0 && k < num_rows_[entry];
}

absl::Span<const float> StepOutput::last_logits(size_t entry) const {
  CHECK(entry < first_row_.size() && num_rows_[entry] > 0) << "no logits for entry " << entry;
  return logits(entry, first_token_[entry] + num_rows_[entry] - 1);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model,
                                                       const EngineConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  const ModelConfig& mc = model.config();
  int64_t block_bytes = static_cast<int64_t>(config.block_size) * mc.num_kv_heads * mc.head_dim *
                        (config.kv_dtype == GgmlType::kF16 ? 2 : 4);
  int64_t per_block_all_layers = block_bytes * 2 * mc.num_layers;
  int32_t num_blocks = config.num_kv_blocks;
  if (num_blocks == 0) {
    num_blocks = static_cast<int32_t>(
        std::min<int64_t>(config.kv_cache_bytes / per_block_all_layers, 1 << 30));
  }
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV pool of ", config.kv_cache_bytes,
                                                   " bytes holds no block of ",
                                                   per_block_all_layers, " bytes"));
  }
  std::unique_ptr<Engine> engine(new Engine(model, config, num_blocks));
  engine->block_bytes_ = block_bytes;
  engine->kv_pool_bytes_ = per_block_all_layers * num_blocks;
  void* mem = mmap(nullptr, engine->kv_pool_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map a KV pool of ", engine->kv_pool_bytes_, " bytes"));
  }
  engine->kv_pool_ = static_cast<uint8_t*>(mem);
  return engine;
}

Engine::Engine(const Model& model, const EngineConfig& config, int32_t num_blocks)
    : model_(model),
      config_(config),
      kv_(KvCacheConfig{.num_blocks = num_blocks,
                        .block_size = config.block_size,
                        .enable_prefix_cache = config.enable_prefix_cache,
                        .model_id = model.model_id() ^
                                    (static_cast<uint64_t>(config.kv_dtype) << 56)}),
      pool_(std::make_unique<base::ThreadPool>(
          config.num_threads > 0 ? config.num_threads
                                 : std::max(1u, std::thread::hardware_concurrency()))),
      num_blocks_(num_blocks) {}

Engine::~Engine() {
  if (kv_pool_ != nullptr) munmap(kv_pool_, kv_pool_bytes_);
}

PagedKv Engine::LayerKv(int layer) const {
  PagedKv kv;
  uint8_t* base = kv_pool_ + static_cast<int64_t>(layer) * 2 * num_blocks_ * block_bytes_;
  kv.k = base;
  kv.v = base + static_cast<int64_t>(num_blocks_) * block_bytes_;
  kv.dtype = config_.kv_dtype;
  kv.block_size = config_.block_size;
  kv.n_kv_heads = model_.config().num_kv_heads;
  kv.head_dim = model_.config().head_dim;
  return kv;
}

void Engine::CopyBlock(BlockId src, BlockId dst) {
  for (int l = 0; l < model_.config().num_layers; ++l) {
    PagedKv kv = LayerKv(l);
    std::memcpy(static_cast<uint8_t*>(kv.k) + dst * block_bytes_,
                static_cast<uint8_t*>(kv.k) + src * block_bytes_, block_bytes_);
    std::memcpy(static_cast<uint8_t*>(kv.v) + dst * block_bytes_,
                static_cast<uint8_t*>(kv.v) + src * block_bytes_, block_bytes_);
  }
}

std::vector<uint8_t> Engine::ReadBlockForTest(BlockId block) const {
  std::vector<uint8_t> out;
  for (int l = 0; l < model_.config().num_layers; ++l) {
    PagedKv kv = LayerKv(l);
    const uint8_t* k = static_cast<const uint8_t*>(kv.k) + block * block_bytes_;
    const uint8_t* v = static_cast<const uint8_t*>(kv.v) + block * block_bytes_;
    out.insert(out.end(), k, k + block_bytes_);
    out.insert(out.end(), v, v + block_bytes_);
  }
  return out;
}

absl::StatusOr<int32_t> Engine::AddSequence(SequenceId seq, absl::Span<const int32_t> prompt) {
  const ModelConfig& mc = model_.config();
  if (prompt.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": empty prompt"));
  }
  if (static_cast<int64_t>(prompt.size()) > mc.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": prompt of ",
                                                   prompt.size(), " tokens exceeds the context of ",
                                                   mc.context_length));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= mc.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": token ", i, " id ",
                                                     prompt[i], " outside vocabulary [0, ",
                                                     mc.vocab_size, ")"));
    }
  }
  ASSIGN_OR_RETURN(int32_t cached, kv_.AddSequence(seq, prompt));
  tokens_[seq].assign(prompt.begin(), prompt.begin() + cached);
  return cached;
}

absl::Status Engine::ForkSequence(SequenceId src, SequenceId dst) {
  auto it = tokens_.find(src);
  if (it == tokens_.end()) {
    return absl::NotFoundError(absl::StrCat("fork: unknown sequence ", src));
  }
  RETURN_IF_ERROR(kv_.Fork(src, dst));
  std::vector<int32_t> copy = it->second;
  tokens_[dst] = std::move(copy);
  return absl::OkStatus();
}

absl::Status Engine::FreeSequence(SequenceId seq) {
  RETURN_IF_ERROR(kv_.Free(seq));
  tokens_.erase(seq);
  imports_.erase(seq);
  return absl::OkStatus();
}

int32_t Engine::SequenceLength(SequenceId seq) const {
  auto it = tokens_.find(seq);
  return it == tokens_.end() ? 0 : static_cast<int32_t>(it->second.size());
}

void Engine::EnsureScratch(int64_t t) {
  if (t <= scratch_tokens_) return;
  const ModelConfig& c = model_.config();
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  x_.resize(t * c.dim);
  xn_.resize(t * c.dim);
  q_.resize(t * q_dim);
  k_.resize(t * kv_dim);
  v_.resize(t * kv_dim);
  attn_.resize(t * q_dim);
  o_.resize(t * c.dim);
  gate_.resize(t * c.ffn_dim);
  up_.resize(t * c.ffn_dim);
  ffn_.resize(t * c.ffn_dim);
  positions_.resize(t);
  tables_.resize(t);
  scratch_tokens_ = t;
}

absl::StatusOr<std::vector<BlockId>> Engine::AddSequenceForImport(
    SequenceId seq, absl::Span<const int32_t> prompt) {
  const ModelConfig& mc = model_.config();
  if (prompt.empty() || static_cast<int64_t>(prompt.size()) > mc.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": prompt of ", prompt.size(),
                                                   " tokens (context ", mc.context_length, ")"));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= mc.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": token ", i, " id ",
                                                     prompt[i], " outside vocabulary [0, ",
                                                     mc.vocab_size, ")"));
    }
  }
  if (kv_.BlocksNeeded(prompt.size()) > kv_.num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV pool: sequence ", seq, " needs ", kv_.BlocksNeeded(prompt.size()), " blocks, ",
        kv_.num_free_blocks(), " free"));
  }
  RETURN_IF_ERROR(kv_.AddSequence(seq, {}).status());
  std::vector<BlockCopy> copies;
  absl::Status s = kv_.Reserve(seq, static_cast<int32_t>(prompt.size()), &copies);
  if (!s.ok()) {
    kv_.Free(seq).IgnoreError();  // Nothing was reserved; the sequence is dropped.
    return s;
  }
  tokens_[seq].clear();
  imports_[seq].assign(prompt.begin(), prompt.end());
  absl::Span<const BlockId> table = kv_.block_table(seq);
  return std::vector<BlockId>(table.begin(), table.end());
}

absl::Status Engine::CommitImport(SequenceId seq) {
  auto it = imports_.find(seq);
  if (it == imports_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", seq, " has no KV import in progress"));
  }
  RETURN_IF_ERROR(kv_.Commit(seq, it->second));
  tokens_[seq] = std::move(it->second);
  imports_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<StepOutput> Engine::Step(absl::Span<const BatchEntry> batch,
                                        absl::FunctionRef<void(int layer)> layer_done) {
  const ModelConfig& c = model_.config();
  // Validate everything before touching state.
  int64_t total = 0;
  int32_t blocks_needed = 0;
  absl::flat_hash_set<SequenceId> seen;
  for (size_t e = 0; e < batch.size(); ++e) {
    const BatchEntry& b = batch[e];
    auto it = tokens_.find(b.seq);
    if (it == tokens_.end() || imports_.contains(b.seq)) {
      return absl::InvalidArgumentError(absl::StrCat("step entry ", e, ": unknown sequence ",
                                                     b.seq, imports_.contains(b.seq)
                                                                ? " (KV import not committed)"
                                                                : ""));
    }
    if (!seen.insert(b.seq).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("step entry ", e, ": sequence ", b.seq, " appears twice in one batch"));
    }
    if (b.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("step entry ", e, ": no tokens"));
    }
    const int64_t len = static_cast<int64_t>(it->second.size());
    if (len + static_cast<int64_t>(b.tokens.size()) > c.context_length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", b.seq, ": ", len + b.tokens.size(), " tokens exceed the context of ",
          c.context_length));
    }
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      if (b.tokens[i] < 0 || b.tokens[i] >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", b.seq, ": token id ",
                                                       b.tokens[i], " outside vocabulary [0, ",
                                                       c.vocab_size, ")"));
      }
    }
    absl::Span<const BlockId> table = kv_.block_table(b.seq);
    const int32_t have = static_cast<int32_t>(table.size());
    blocks_needed += std::max(0, kv_.BlocksNeeded(len + b.tokens.size()) - have);
    // Writing into a shared partial last block copies it first.
    if (len % config_.block_size != 0 && have > 0 && kv_.ref_count(table.back()) > 1) {
      ++blocks_needed;
    }
    total += b.tokens.size();
  }
  if (blocks_needed > kv_.num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool: batch needs ", blocks_needed,
                                                     " new blocks, ", kv_.num_free_blocks(),
                                                     " free"));
  }
  std::vector<BlockCopy> copies;
  for (const BatchEntry& b : batch) {
    const int32_t len = SequenceLength(b.seq);
    // Cannot fail: the whole batch's blocks were counted above.
    CHECK_OK(kv_.Reserve(b.seq, len + static_cast<int32_t>(b.tokens.size()), &copies));
  }
  for (const BlockCopy& cp : copies) CopyBlock(cp.src, cp.dst);

  EnsureScratch(total);
  const int64_t dim = c.dim;
  const int64_t hd = c.head_dim;
  const int64_t q_dim = int64_t{c.num_heads} * hd;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * hd;
  const int64_t ffn = c.ffn_dim;
  base::ThreadPool& pool = *pool_;

  // Token positions, block tables and embeddings.
  {
    int64_t t = 0;
    for (const BatchEntry& b : batch) {
      const int32_t start = SequenceLength(b.seq);
      const int32_t* table = kv_.block_table(b.seq).data();
      for (size_t i = 0; i < b.tokens.size(); ++i, ++t) {
        positions_[t] = start + static_cast<int32_t>(i);
        tables_[t] = table;
      }
    }
    const WeightMatrix& embd = model_.token_embedding();
    std::vector<int32_t> flat;
    flat.reserve(total);
    for (const BatchEntry& b : batch) flat.insert(flat.end(), b.tokens.begin(), b.tokens.end());
    pool.ParallelFor(total, 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) embd.DequantizeRowTo(flat[i], &x_[i * dim]);
    });
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* inv_freq = model_.rope_inv_freq().data();
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = model_.layer(l);
    const PagedKv kv = LayerKv(l);
    RmsNorm(x_.data(), w.attn_norm.data(), total, dim, c.rms_eps, xn_.data());
    MatMul(w.wq, xn_.data(), total, q_.data(), pool);
    MatMul(w.wk, xn_.data(), total, k_.data(), pool);
    MatMul(w.wv, xn_.data(), total, v_.data(), pool);
    pool.ParallelFor(total, 8, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* q = &q_[t * q_dim];
        float* k = &k_[t * kv_dim];
        float* v = &v_[t * kv_dim];
        if (c.qkv_bias) {
          for (int64_t i = 0; i < q_dim; ++i) q[i] += w.bq[i];
          for (int64_t i = 0; i < kv_dim; ++i) k[i] += w.bk[i];
          for (int64_t i = 0; i < kv_dim; ++i) v[i] += w.bv[i];
        }
        Rope(q, c.num_heads, hd, c.rope_dim, positions_[t], inv_freq, c.rope_style);
        Rope(k, c.num_kv_heads, hd, c.rope_dim, positions_[t], inv_freq, c.rope_style);
        const int32_t pos = positions_[t];
        WriteKv(kv, tables_[t][pos / config_.block_size], pos % config_.block_size, k, v);
      }
    });
    layer_done(l);
    PagedAttention(q_.data(), total, positions_.data(), tables_.data(), kv, c.num_heads, scale,
                   attn_.data(), pool);
    MatMul(w.wo, attn_.data(), total, o_.data(), pool);
    for (int64_t i = 0; i < total * dim; ++i) x_[i] += o_[i];
    RmsNorm(x_.data(), w.ffn_norm.data(), total, dim, c.rms_eps, xn_.data());
    MatMul(w.w_gate, xn_.data(), total, gate_.data(), pool);
    MatMul(w.w_up, xn_.data(), total, up_.data(), pool);
    SwiGlu(gate_.data(), up_.data(), total * ffn, ffn_.data());
    MatMul(w.w_down, ffn_.data(), total, o_.data(), pool);
    for (int64_t i = 0; i < total * dim; ++i) x_[i] += o_[i];
  }

  // Logits only for the rows asked for.
  StepOutput out;
  out.vocab_ = c.vocab_size;
  out.first_row_.assign(batch.size(), -1);
  out.first_token_.assign(batch.size(), 0);
  out.num_rows_.assign(batch.size(), 0);
  std::vector<int64_t> rows;
  {
    int64_t t = 0;
    for (size_t e = 0; e < batch.size(); ++e) {
      const int64_t n = static_cast<int64_t>(batch[e].tokens.size());
      int64_t first = batch[e].logits == LogitsMode::kAll    ? 0
                      : batch[e].logits == LogitsMode::kLast ? n - 1
                                                             : n;
      if (first < n) {
        out.first_row_[e] = static_cast<int64_t>(rows.size());
        out.first_token_[e] = static_cast<int32_t>(first);
        out.num_rows_[e] = static_cast<int32_t>(n - first);
        for (int64_t i = first; i < n; ++i) rows.push_back(t + i);
      }
      t += n;
    }
  }
  if (!rows.empty()) {
    const int64_t r = static_cast<int64_t>(rows.size());
    for (int64_t i = 0; i < r; ++i) {
      std::memmove(&x_[i * dim], &x_[rows[i] * dim], dim * sizeof(float));
    }
    RmsNorm(x_.data(), model_.output_norm().data(), r, dim, c.rms_eps, xn_.data());
    out.data_.resize(r * c.vocab_size);
    MatMul(model_.output(), xn_.data(), r, out.data_.data(), pool);
  }

  // The KV now holds the new tokens: name full blocks for the prefix cache.
  for (const BatchEntry& b : batch) {
    std::vector<int32_t>& toks = tokens_[b.seq];
    toks.insert(toks.end(), b.tokens.begin(), b.tokens.end());
    RETURN_IF_ERROR(kv_.Commit(b.seq, toks));
  }
  return out;
}

}  // namespace tandem::engine
