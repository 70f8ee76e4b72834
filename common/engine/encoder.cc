#include "common/engine/encoder.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/engine/encoder_ops/encoder_ops.h"

namespace tandem::engine {
namespace {

constexpr int64_t kMeanPooling = 1;  // llama.cpp's LLAMA_POOLING_TYPE_MEAN

// Reads the hyperparameters and tensors of a BERT GGUF, each error naming the
// key or tensor.
class BertTensors {
 public:
  explicit BertTensors(const GgufFile& file) : file_(file) {}

  absl::StatusOr<int64_t> PositiveInt(const std::string& key) const {
    ASSIGN_OR_RETURN(int64_t v, file_.GetInt(key));
    if (v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(key, " is ", v, ", want > 0"));
    }
    return v;
  }

  absl::StatusOr<const GgufTensorInfo*> Get(const std::string& name,
                                            const std::vector<int64_t>& dims) const {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("missing tensor ", name));
    }
    if (t->dims != dims) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": shape [",
                                                     absl::StrJoin(t->dims, ", "), "], want [",
                                                     absl::StrJoin(dims, ", "), "]"));
    }
    return t;
  }

  // A [rows][cols] matrix (GGUF dims {cols, rows}).
  absl::StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Get(name, {cols, rows}));
    absl::StatusOr<WeightMatrix> m = WeightMatrix::Create(t->type, t->data, rows, cols);
    if (!m.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": ", m.status().message()));
    }
    return m;
  }

  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n) const {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Get(name, {n}));
    if (t->type != GgmlType::kF32 && t->type != GgmlType::kF16 && t->type != GgmlType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", name, ": 1-D tensors must be F32, F16 or BF16, got ", GgmlTypeName(t->type)));
    }
    std::vector<float> out(n);
    DequantizeRow(t->type, t->data, out.data(), n);
    return out;
  }

 private:
  const GgufFile& file_;
};

}  // namespace

Encoder::Encoder(std::unique_ptr<GgufFile> file, int num_threads, EncoderPrecision precision)
    : file_(std::move(file)),
      precision_(precision == EncoderPrecision::kBf16 && encoder_ops::Bf16Supported()
                     ? EncoderPrecision::kBf16
                     : EncoderPrecision::kF32),
      pool_(std::max(1, num_threads)) {}

absl::StatusOr<std::unique_ptr<Encoder>> Encoder::Load(const std::string& path, int num_threads,
                                                       EncoderPrecision precision) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("loading encoder ", path, ": ", file.status().message()));
  }
  std::unique_ptr<Encoder> encoder(new Encoder(*std::move(file), num_threads, precision));
  if (absl::Status s = encoder->Init(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("loading encoder ", path, ": ", s.message()));
  }
  return encoder;
}

absl::Status Encoder::Init() {
  const GgufFile& f = *file_;
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch != "bert") {
    return absl::InvalidArgumentError(
        absl::StrCat("general.architecture is '", arch, "', want 'bert'"));
  }
  if (f.Find("bert.attention.causal") != nullptr) {
    ASSIGN_OR_RETURN(bool causal, f.GetBool("bert.attention.causal"));
    if (causal) {
      return absl::InvalidArgumentError("bert.attention.causal is true, want false");
    }
  }
  if (f.Find("bert.pooling_type") != nullptr) {
    ASSIGN_OR_RETURN(int64_t pooling, f.GetInt("bert.pooling_type"));
    if (pooling != kMeanPooling) {
      return absl::InvalidArgumentError(
          absl::StrCat("bert.pooling_type is ", pooling, ", want ", kMeanPooling, " (mean)"));
    }
  }
  BertTensors t(f);
  EncoderConfig& c = config_;
  ASSIGN_OR_RETURN(c.n_positions, t.PositiveInt("bert.context_length"));
  ASSIGN_OR_RETURN(c.n_embd, t.PositiveInt("bert.embedding_length"));
  ASSIGN_OR_RETURN(c.n_ff, t.PositiveInt("bert.feed_forward_length"));
  ASSIGN_OR_RETURN(c.n_layer, t.PositiveInt("bert.block_count"));
  ASSIGN_OR_RETURN(c.n_head, t.PositiveInt("bert.attention.head_count"));
  ASSIGN_OR_RETURN(c.norm_eps, f.GetFloat("bert.attention.layer_norm_epsilon"));
  if (c.n_embd % c.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bert.embedding_length ", c.n_embd, " is not a multiple of the ", c.n_head, " heads"));
  }
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return absl::InvalidArgumentError("missing tensor token_embd.weight (or it is not 2-D)");
  }
  c.n_vocab = embd->dims[1];
  const int64_t d = c.n_embd;
  ASSIGN_OR_RETURN(token_embd_, t.Matrix("token_embd.weight", c.n_vocab, d));
  ASSIGN_OR_RETURN(position_embd_, t.Matrix("position_embd.weight", c.n_positions, d));
  // Token type 0's row of token_types.weight ([d][type count]); every token is type 0.
  const GgufTensorInfo* types = f.FindTensor("token_types.weight");
  if (types == nullptr || types->dims.size() != 2 || types->dims[0] != d ||
      (types->type != GgmlType::kF32 && types->type != GgmlType::kF16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor token_types.weight: missing, or not F32/F16 of shape [", d, ", n]"));
  }
  token_type0_.resize(d);
  DequantizeRow(types->type, types->data, token_type0_.data(), d);
  ASSIGN_OR_RETURN(embd_norm_w_, t.Vector("token_embd_norm.weight", d));
  ASSIGN_OR_RETURN(embd_norm_b_, t.Vector("token_embd_norm.bias", d));

  layers_.resize(c.n_layer);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat("blk.", i, ".");
    ASSIGN_OR_RETURN(l.q, t.Matrix(p + "attn_q.weight", d, d));
    ASSIGN_OR_RETURN(l.k, t.Matrix(p + "attn_k.weight", d, d));
    ASSIGN_OR_RETURN(l.v, t.Matrix(p + "attn_v.weight", d, d));
    ASSIGN_OR_RETURN(l.o, t.Matrix(p + "attn_output.weight", d, d));
    ASSIGN_OR_RETURN(l.up, t.Matrix(p + "ffn_up.weight", c.n_ff, d));
    ASSIGN_OR_RETURN(l.down, t.Matrix(p + "ffn_down.weight", d, c.n_ff));
    ASSIGN_OR_RETURN(l.q_bias, t.Vector(p + "attn_q.bias", d));
    ASSIGN_OR_RETURN(l.k_bias, t.Vector(p + "attn_k.bias", d));
    ASSIGN_OR_RETURN(l.v_bias, t.Vector(p + "attn_v.bias", d));
    ASSIGN_OR_RETURN(l.o_bias, t.Vector(p + "attn_output.bias", d));
    ASSIGN_OR_RETURN(l.up_bias, t.Vector(p + "ffn_up.bias", c.n_ff));
    ASSIGN_OR_RETURN(l.down_bias, t.Vector(p + "ffn_down.bias", d));
    ASSIGN_OR_RETURN(l.attn_norm_w, t.Vector(p + "attn_output_norm.weight", d));
    ASSIGN_OR_RETURN(l.attn_norm_b, t.Vector(p + "attn_output_norm.bias", d));
    ASSIGN_OR_RETURN(l.out_norm_w, t.Vector(p + "layer_output_norm.weight", d));
    ASSIGN_OR_RETURN(l.out_norm_b, t.Vector(p + "layer_output_norm.bias", d));
    if (precision_ == EncoderPrecision::kBf16) {
      auto pack = [](const WeightMatrix& w, const std::vector<float>& bias) {
        std::vector<float> rows(w.rows() * w.cols());
        for (int64_t r = 0; r < w.rows(); ++r) {
          w.DequantizeRowTo(r, &rows[r * w.cols()]);
        }
        return encoder_ops::PackBf16(rows.data(), bias.data(), w.rows(), w.cols());
      };
      l.q16 = pack(l.q, l.q_bias);
      l.k16 = pack(l.k, l.k_bias);
      l.v16 = pack(l.v, l.v_bias);
      l.o16 = pack(l.o, l.o_bias);
      l.up16 = pack(l.up, l.up_bias);
      l.down16 = pack(l.down, l.down_bias);
    }
  }
  zero_bias_.assign(c.n_ff, 0.0f);
  return absl::OkStatus();
}

void Encoder::Attention(const std::vector<int64_t>& starts) {
  const int64_t d = config_.n_embd;
  const int64_t heads = config_.n_head;
  const int64_t hd = d / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t num_seqs = static_cast<int64_t>(starts.size()) - 1;
  const encoder_ops::Table& ops = encoder_ops::Ops();
  // One task per (sequence, head); each reads and writes only its own rows and head slice.
  pool_.Run(num_seqs * heads, [&](int64_t task, int /*thread*/) {
    static thread_local std::vector<float> scratch;  // grows, never shrinks: no allocation
    const int64_t s = task / heads;
    const int64_t h = task % heads;
    const int64_t begin = starts[s];
    const int64_t len = starts[s + 1] - begin;
    const int64_t need = encoder_ops::AttendScratchFloats(len, hd);
    if (static_cast<int64_t>(scratch.size()) < need) {
      scratch.resize(need);
    }
    const int64_t off = begin * d + h * hd;
    ops.attend_head(&q_[off], &k_[off], &v_[off], d, len, hd, scale, scratch.data(), &attn_[off]);
  });
}

void Encoder::Linear(const WeightMatrix& w, const std::vector<float>& bias,
                     const encoder_ops::PackedBf16& packed, const float* x, int64_t n, float* y) {
  if (precision_ == EncoderPrecision::kF32) {
    MatMul(w, x, n, y, pool_);
    encoder_ops::Ops().add_bias(y, n, w.rows(), bias.data());
    return;
  }
  xb_.resize(n * w.cols());
  encoder_ops::ToBf16(x, n * w.cols(), xb_.data());
  constexpr int64_t kGroup = 4;  // 16-row panels per task
  const int64_t n_panels = (w.rows() + 15) / 16;
  pool_.Run((n_panels + kGroup - 1) / kGroup, [&](int64_t task, int /*thread*/) {
    const int64_t p0 = task * kGroup;
    encoder_ops::GemmBf16Panels(xb_.data(), n, packed, p0, std::min(n_panels, p0 + kGroup), y);
  });
}

absl::StatusOr<std::vector<std::vector<float>>> Encoder::Embed(
    absl::Span<const std::vector<TokenId>> batch) {
  const EncoderConfig& c = config_;
  const int64_t d = c.n_embd;
  std::vector<int64_t> starts = {0};
  for (size_t s = 0; s < batch.size(); ++s) {
    const std::vector<TokenId>& ids = batch[s];
    if (ids.empty() || static_cast<int64_t>(ids.size()) > c.n_positions) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, " has ", ids.size(), " tokens, want 1..", c.n_positions));
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= c.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": token ", i, " is id ",
                                                       ids[i], ", outside the vocabulary [0, ",
                                                       c.n_vocab, ")"));
      }
    }
    starts.push_back(starts.back() + static_cast<int64_t>(ids.size()));
  }
  const int64_t n = starts.back();
  if (n == 0) {
    return std::vector<std::vector<float>>();
  }
  for (std::vector<float>* buf : {&x_, &q_, &k_, &v_, &attn_, &proj_}) {
    buf->resize(n * d);
  }
  ff_.resize(n * c.n_ff);

  // Embeddings: word + position + token type 0, then LayerNorm.
  std::vector<float> pos(d);
  for (size_t s = 0; s < batch.size(); ++s) {
    for (size_t i = 0; i < batch[s].size(); ++i) {
      float* row = &x_[(starts[s] + i) * d];
      token_embd_.DequantizeRowTo(batch[s][i], row);
      position_embd_.DequantizeRowTo(static_cast<int64_t>(i), pos.data());
      for (int64_t e = 0; e < d; ++e) {
        row[e] += pos[e] + token_type0_[e];
      }
    }
  }
  const encoder_ops::Table& ops = encoder_ops::Ops();
  const float eps = static_cast<float>(c.norm_eps);
  ops.add_layer_norm(x_.data(), nullptr, n, d, embd_norm_w_.data(), embd_norm_b_.data(), eps);

  for (const Layer& l : layers_) {
    Linear(l.q, l.q_bias, l.q16, x_.data(), n, q_.data());
    Linear(l.k, l.k_bias, l.k16, x_.data(), n, k_.data());
    Linear(l.v, l.v_bias, l.v16, x_.data(), n, v_.data());
    Attention(starts);
    Linear(l.o, l.o_bias, l.o16, attn_.data(), n, proj_.data());
    ops.add_layer_norm(x_.data(), proj_.data(), n, d, l.attn_norm_w.data(), l.attn_norm_b.data(),
                       eps);
    Linear(l.up, l.up_bias, l.up16, x_.data(), n, ff_.data());
    ops.bias_gelu(ff_.data(), n, c.n_ff, zero_bias_.data());
    Linear(l.down, l.down_bias, l.down16, ff_.data(), n, proj_.data());
    ops.add_layer_norm(x_.data(), proj_.data(), n, d, l.out_norm_w.data(), l.out_norm_b.data(),
                       eps);
  }

  // Mean over each sequence's tokens, then L2 normalization (eps as torch's F.normalize).
  std::vector<std::vector<float>> out(batch.size(), std::vector<float>(d));
  for (size_t s = 0; s < batch.size(); ++s) {
    std::vector<double> sum(d, 0.0);
    for (int64_t t = starts[s]; t < starts[s + 1]; ++t) {
      for (int64_t e = 0; e < d; ++e) {
        sum[e] += x_[t * d + e];
      }
    }
    const double len = static_cast<double>(starts[s + 1] - starts[s]);
    double norm2 = 0;
    for (int64_t e = 0; e < d; ++e) {
      sum[e] /= len;
      norm2 += sum[e] * sum[e];
    }
    const double inv = 1.0 / std::max(std::sqrt(norm2), 1e-12);
    for (int64_t e = 0; e < d; ++e) {
      out[s][e] = static_cast<float>(sum[e] * inv);
    }
  }
  return out;
}

}  // namespace tandem::engine
