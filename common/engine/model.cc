#include "common/engine/model.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"

namespace tandem::engine {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

uint64_t HashBytes(uint64_t h, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    h = Mix(h, v);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  return Mix(h, tail ^ n);
}

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

class Loader {
 public:
  Loader(const GgufFile& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  absl::StatusOr<int64_t> Int(const std::string& key) const {
    return file_.GetInt(prefix_ + "." + key);
  }
  absl::StatusOr<int64_t> IntOr(const std::string& key, int64_t def) const {
    if (file_.Find(prefix_ + "." + key) == nullptr) return def;
    return file_.GetInt(prefix_ + "." + key);
  }
  absl::StatusOr<double> FloatOr(const std::string& key, double def) const {
    if (file_.Find(prefix_ + "." + key) == nullptr) return def;
    return file_.GetFloat(prefix_ + "." + key);
  }

  absl::StatusOr<const GgufTensorInfo*> Tensor(const std::string& name,
                                               std::vector<int64_t> want) const {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("missing tensor ", name));
    }
    if (t->dims != want) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": shape ",
                                                     DimsString(t->dims), ", want ",
                                                     DimsString(want)));
    }
    return t;
  }

  // repack: false for a matrix only looked up by row (see WeightMatrix::Create).
  absl::StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t cols, int64_t rows,
                                      bool repack = true) const {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Tensor(name, {cols, rows}));
    auto m = WeightMatrix::Create(t->type, t->data, rows, cols, repack);
    if (!m.ok()) return base::Annotate(m.status(), absl::StrCat("tensor ", name));
    return m;
  }

  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n) const {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Tensor(name, {n}));
    if (t->type != GgmlType::kF32 && t->type != GgmlType::kF16 && t->type != GgmlType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": 1-D tensors must be ",
                                                     "F32, F16 or BF16, got ",
                                                     GgmlTypeName(t->type)));
    }
    std::vector<float> out(n);
    DequantizeRow(t->type, t->data, out.data(), n);
    return out;
  }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) {
    return base::Annotate(file.status(), absl::StrCat("loading model ", path));
  }
  std::unique_ptr<Model> model(new Model());
  model->file_ = std::move(file).value();
  model->config_.name = path.substr(path.find_last_of('/') + 1);
  absl::Status s = model->Init();
  if (!s.ok()) {
    return base::Annotate(s, absl::StrCat("loading model ", path));
  }
  return model;
}

absl::Status Model::Init() {
  const GgufFile& f = *file_;
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  ModelConfig& c = config_;
  c.arch_name = arch;
  if (arch == "llama") {
    c.arch = Architecture::kLlama;
    c.rope_style = RopeStyle::kNormal;
  } else if (arch == "qwen2") {
    c.arch = Architecture::kQwen2;
    c.rope_style = RopeStyle::kNeox;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported architecture '", arch, "' (general.architecture); supported: llama, qwen2"));
  }
  if (auto name = f.GetString("general.name"); name.ok()) c.name = *name;
  Loader l(f, arch);
  ASSIGN_OR_RETURN(int64_t dim, l.Int("embedding_length"));
  ASSIGN_OR_RETURN(int64_t layers, l.Int("block_count"));
  ASSIGN_OR_RETURN(int64_t heads, l.Int("attention.head_count"));
  ASSIGN_OR_RETURN(int64_t kv_heads, l.IntOr("attention.head_count_kv", heads));
  ASSIGN_OR_RETURN(int64_t ffn, l.Int("feed_forward_length"));
  ASSIGN_OR_RETURN(int64_t ctx, l.IntOr("context_length", 2048));
  ASSIGN_OR_RETURN(double eps, l.FloatOr("attention.layer_norm_rms_epsilon", 1e-5));
  ASSIGN_OR_RETURN(double theta, l.FloatOr("rope.freq_base", 10000.0));
  auto in_range = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  if (!in_range(dim, 1, 1 << 16) || !in_range(layers, 1, 1024) || !in_range(heads, 1, 1024) ||
      !in_range(kv_heads, 1, heads) || heads % kv_heads != 0 || dim % heads != 0 ||
      !in_range(ffn, 1, 1 << 20) || !in_range(ctx, 1, 1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent hyper-parameters: embedding_length ", dim, ", block_count ", layers,
        ", head_count ", heads, ", head_count_kv ", kv_heads, ", feed_forward_length ", ffn,
        ", context_length ", ctx));
  }
  ASSIGN_OR_RETURN(int64_t head_dim, l.IntOr("attention.key_length", dim / heads));
  ASSIGN_OR_RETURN(int64_t value_dim, l.IntOr("attention.value_length", head_dim));
  if (value_dim != head_dim || head_dim % 2 != 0 || !in_range(head_dim, 2, 1024)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported head dims: key_length ", head_dim,
                                                   ", value_length ", value_dim));
  }
  ASSIGN_OR_RETURN(int64_t rope_dim, l.IntOr("rope.dimension_count", head_dim));
  if (rope_dim % 2 != 0 || !in_range(rope_dim, 2, head_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.dimension_count ", rope_dim, " must be even and <= head dim ", head_dim));
  }
  c.dim = dim;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.ffn_dim = ffn;
  c.context_length = ctx;
  c.rms_eps = eps;
  c.rope_theta = theta;
  c.rope_dim = rope_dim;
  // A window at least as long as the context is plain causal attention.
  if (f.Find(arch + ".attention.sliding_window") != nullptr) {
    ASSIGN_OR_RETURN(int64_t window, l.Int("attention.sliding_window"));
    if (window > 0 && window < ctx) {
      return absl::InvalidArgumentError(absl::StrCat(
          arch, ".attention.sliding_window = ", window, " < context_length ", ctx,
          ": sliding-window attention is not supported"));
    }
  }

  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2 || embd->dims[0] != dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token_embd.weight missing or not [", dim, ", vocab]",
        embd ? absl::StrCat(" (got ", DimsString(embd->dims), ")") : ""));
  }
  c.vocab_size = embd->dims[1];
  tied_output_ = f.FindTensor("output.weight") == nullptr;
  // Untied, the embedding is only looked up by row: no repacked copy.
  ASSIGN_OR_RETURN(token_embd_,
                   l.Matrix("token_embd.weight", dim, c.vocab_size, /*repack=*/tied_output_));
  ASSIGN_OR_RETURN(output_norm_, l.Vector("output_norm.weight", dim));
  if (!tied_output_) {
    ASSIGN_OR_RETURN(output_, l.Matrix("output.weight", dim, c.vocab_size));
  }
  c.tied_embeddings = tied_output_;

  const int64_t q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
  c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  layers_.resize(layers);
  for (int i = 0; i < layers; ++i) {
    const std::string p = absl::StrCat("blk.", i, ".");
    LayerWeights& w = layers_[i];
    ASSIGN_OR_RETURN(w.attn_norm, l.Vector(p + "attn_norm.weight", dim));
    ASSIGN_OR_RETURN(w.wq, l.Matrix(p + "attn_q.weight", dim, q_dim));
    ASSIGN_OR_RETURN(w.wk, l.Matrix(p + "attn_k.weight", dim, kv_dim));
    ASSIGN_OR_RETURN(w.wv, l.Matrix(p + "attn_v.weight", dim, kv_dim));
    ASSIGN_OR_RETURN(w.wo, l.Matrix(p + "attn_output.weight", q_dim, dim));
    if (c.qkv_bias) {
      ASSIGN_OR_RETURN(w.bq, l.Vector(p + "attn_q.bias", q_dim));
      ASSIGN_OR_RETURN(w.bk, l.Vector(p + "attn_k.bias", kv_dim));
      ASSIGN_OR_RETURN(w.bv, l.Vector(p + "attn_v.bias", kv_dim));
    }
    ASSIGN_OR_RETURN(w.ffn_norm, l.Vector(p + "ffn_norm.weight", dim));
    ASSIGN_OR_RETURN(w.w_gate, l.Matrix(p + "ffn_gate.weight", dim, ffn));
    ASSIGN_OR_RETURN(w.w_up, l.Matrix(p + "ffn_up.weight", dim, ffn));
    ASSIGN_OR_RETURN(w.w_down, l.Matrix(p + "ffn_down.weight", ffn, dim));
  }
  c.weight_type = layers_[0].wq.type();

  // Rotary frequencies: theta^(-2i/rope_dim), with scaling folded in.
  inv_freq_.resize(rope_dim / 2);
  for (int i = 0; i < rope_dim / 2; ++i) {
    inv_freq_[i] = static_cast<float>(std::pow(static_cast<double>(theta), -2.0 * i / rope_dim));
  }
  std::string scaling;
  if (auto t = f.GetString(arch + ".rope.scaling.type"); t.ok()) scaling = *t;
  if (scaling == "linear") {
    ASSIGN_OR_RETURN(double factor, l.FloatOr("rope.scaling.factor", 1.0));
    if (!(factor > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("rope.scaling.factor ", factor, " <= 0"));
    }
    for (float& v : inv_freq_) v /= factor;
    c.rope_scaling = "linear";
  } else if (!scaling.empty() && scaling != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported rope scaling type '", scaling, "'; supported: none, linear, llama3 ",
        "(rope_freqs.weight)"));
  }
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    ASSIGN_OR_RETURN(std::vector<float> factors, l.Vector("rope_freqs.weight", rope_dim / 2));
    for (int i = 0; i < rope_dim / 2; ++i) {
      if (!(factors[i] > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rope_freqs.weight[", i, "] = ", factors[i], " must be > 0"));
      }
      inv_freq_[i] /= factors[i];
    }
    c.rope_scaling = "llama3";
  }

  if (f.Find("tokenizer.ggml.model") != nullptr) {
    auto tok = Tokenizer::FromGguf(f);
    if (!tok.ok()) return base::Annotate(tok.status(), "tokenizer");
    tokenizer_ = std::move(tok).value();
    if (tokenizer_->vocab_size() != c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", tokenizer_->vocab_size(),
                                                     " tokens but token_embd.weight has ",
                                                     c.vocab_size, " rows"));
    }
  }

  // Model id: hyper-parameters, tensor infos and a sample of every tensor's bytes.
  uint64_t h = HashBytes(0x7a6e64656dULL, arch.data(), arch.size());
  for (const GgufTensorInfo& t : f.tensors()) {
    h = HashBytes(h, t.name.data(), t.name.size());
    h = Mix(h, static_cast<uint64_t>(t.type));
    for (int64_t d : t.dims) h = Mix(h, d);
    h = HashBytes(h, t.data, std::min<int64_t>(t.num_bytes, 4096));
  }
  model_id_ = h;
  return absl::OkStatus();
}

int64_t Model::weight_bytes_per_token() const {
  int64_t total = output().bytes();
  for (const LayerWeights& w : layers_) {
    total += w.wq.bytes() + w.wk.bytes() + w.wv.bytes() + w.wo.bytes() + w.w_gate.bytes() +
             w.w_up.bytes() + w.w_down.bytes();
  }
  return total;
}

}  // namespace tandem::engine
