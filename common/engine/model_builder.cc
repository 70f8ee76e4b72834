#include "common/engine/model_builder.h"

#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/format/gguf.h"

namespace tandem::engine {
namespace {

// splitmix64: a fast, seedable stream; each tensor gets its own seed so
// tensors can be filled in parallel and still be reproducible.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Uniform() { return static_cast<float>(static_cast<int64_t>(Next() >> 11) * 0x1.0p-52 - 1.0); }
};

std::vector<uint8_t> RandomTensor(GgmlType type, int64_t cols, int64_t rows, float scale,
                                  uint64_t seed) {
  const int64_t row_bytes = GgmlRowBytes(type, cols);
  std::vector<uint8_t> out(row_bytes * rows);
  const int threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<float> row(cols);
      for (int64_t r = t; r < rows; r += threads) {
        Rng rng{seed * 0x100000001b3ULL + r};
        for (int64_t c = 0; c < cols; ++c) row[c] = rng.Uniform() * scale;
        QuantizeRow(type, row.data(), out.data() + r * row_bytes, cols);
      }
    });
  }
  for (auto& th : pool) th.join();
  return out;
}

}  // namespace

absl::Status RandomModelSpec::Validate() const {
  if (arch != "llama" && arch != "qwen2") {
    return absl::InvalidArgumentError(absl::StrCat("arch '", arch, "': use llama or qwen2"));
  }
  if (dim <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 || ffn <= 0 || context <= 0) {
    return absl::InvalidArgumentError("dims, layers, heads, kv heads, ffn and context must be > 0");
  }
  if (dim % heads != 0 || heads % kv_heads != 0 || (dim / heads) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("dim ", dim, " / heads ", heads, " / kv heads ",
                                                   kv_heads, ": need dim % heads == 0, heads % ",
                                                   "kv_heads == 0 and an even head dim"));
  }
  const int64_t block = GgmlBlockSize(dtype);
  if (dim % block != 0 || ffn % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("dim ", dim, " and ffn ", ffn,
                                                   " must be multiples of ", block, " for ",
                                                   GgmlTypeName(dtype)));
  }
  if (vocab_path.empty() && vocab_size <= 0) {
    return absl::InvalidArgumentError("vocab_size must be > 0 without a vocab file");
  }
  return absl::OkStatus();
}

absl::Status WriteRandomModel(const RandomModelSpec& spec, const std::string& path) {
  RETURN_IF_ERROR(spec.Validate());
  GgufWriter w;
  const std::string& a = spec.arch;
  w.SetString("general.architecture", a);
  w.SetString("general.name", absl::StrCat("tandem-random-", a, "-", spec.dim, "x", spec.layers,
                                           "-", GgmlTypeName(spec.dtype)));
  w.SetUint32(a + ".context_length", spec.context);
  w.SetUint32(a + ".embedding_length", spec.dim);
  w.SetUint32(a + ".block_count", spec.layers);
  w.SetUint32(a + ".feed_forward_length", spec.ffn);
  w.SetUint32(a + ".attention.head_count", spec.heads);
  w.SetUint32(a + ".attention.head_count_kv", spec.kv_heads);
  w.SetUint32(a + ".rope.dimension_count", spec.dim / spec.heads);
  w.SetFloat32(a + ".rope.freq_base", spec.rope_theta);
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);

  int64_t vocab = spec.vocab_size;
  if (!spec.vocab_path.empty()) {
    ASSIGN_OR_RETURN(auto vf, GgufFile::Open(spec.vocab_path));
    ASSIGN_OR_RETURN(std::vector<std::string> tokens, vf->GetStringArray("tokenizer.ggml.tokens"));
    vocab = static_cast<int64_t>(tokens.size());
    for (const auto& [key, value] : vf->metadata()) {
      if (absl::StartsWith(key, "tokenizer.")) w.SetValue(key, value);
    }
  }

  const int64_t hd = spec.dim / spec.heads;
  const int64_t q_dim = spec.heads * hd, kv_dim = spec.kv_heads * hd;
  uint64_t seed = spec.seed * 1000003;
  auto add = [&](const std::string& name, GgmlType type, int64_t cols, int64_t rows,
                 float scale) -> absl::Status {
    std::vector<int64_t> dims = rows > 0 ? std::vector<int64_t>{cols, rows}
                                         : std::vector<int64_t>{cols};
    return w.AddTensor(name, type, std::move(dims),
                       RandomTensor(type, cols, std::max<int64_t>(rows, 1), scale, ++seed));
  };
  auto add_norm = [&](const std::string& name, int64_t n) -> absl::Status {
    std::vector<float> v(n);
    Rng rng{++seed};
    for (float& x : v) x = 1.0f + 0.1f * rng.Uniform();
    return w.AddTensorFromF32(name, GgmlType::kF32, {n}, v);
  };
  // Uniform(-s, s) has variance s^2/3: s = sqrt(3/cols) keeps unit-variance outputs.
  auto scale = [](int64_t cols) { return std::sqrt(3.0f / cols); };
  RETURN_IF_ERROR(add("token_embd.weight", spec.dtype, spec.dim, vocab, 1.0f));
  RETURN_IF_ERROR(add_norm("output_norm.weight", spec.dim));
  if (!spec.tied_embeddings) {
    RETURN_IF_ERROR(add("output.weight", spec.dtype, spec.dim, vocab, scale(spec.dim)));
  }
  for (int i = 0; i < spec.layers; ++i) {
    const std::string p = absl::StrCat("blk.", i, ".");
    RETURN_IF_ERROR(add_norm(p + "attn_norm.weight", spec.dim));
    RETURN_IF_ERROR(add(p + "attn_q.weight", spec.dtype, spec.dim, q_dim, scale(spec.dim)));
    RETURN_IF_ERROR(add(p + "attn_k.weight", spec.dtype, spec.dim, kv_dim, scale(spec.dim)));
    RETURN_IF_ERROR(add(p + "attn_v.weight", spec.dtype, spec.dim, kv_dim, scale(spec.dim)));
    if (a == "qwen2") {
      RETURN_IF_ERROR(add(p + "attn_q.bias", GgmlType::kF32, q_dim, 0, 0.1f));
      RETURN_IF_ERROR(add(p + "attn_k.bias", GgmlType::kF32, kv_dim, 0, 0.1f));
      RETURN_IF_ERROR(add(p + "attn_v.bias", GgmlType::kF32, kv_dim, 0, 0.1f));
    }
    RETURN_IF_ERROR(add(p + "attn_output.weight", spec.dtype, q_dim, spec.dim,
                        0.5f * scale(q_dim)));
    RETURN_IF_ERROR(add_norm(p + "ffn_norm.weight", spec.dim));
    RETURN_IF_ERROR(add(p + "ffn_gate.weight", spec.dtype, spec.dim, spec.ffn, scale(spec.dim)));
    RETURN_IF_ERROR(add(p + "ffn_up.weight", spec.dtype, spec.dim, spec.ffn, scale(spec.dim)));
    RETURN_IF_ERROR(add(p + "ffn_down.weight", spec.dtype, spec.ffn, spec.dim,
                        0.5f * scale(spec.ffn)));
  }
  return w.WriteFile(path);
}

}  // namespace tandem::engine
