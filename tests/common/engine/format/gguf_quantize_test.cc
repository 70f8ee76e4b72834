// Tests for the GGUF quantizer (common/engine/format/gguf_quantize.cc):
// QuantizeGgufFile to Q8_0, Q4_0, Q4_K_M and the pure Q4_1 ... Q6_K recipes, on generated
// models, stories260K and the real Qwen 0.5B plan.

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/format/gguf.h"
#include "common/engine/model_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/engine/format/gguf_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine::testing {
namespace {

using ::tandem::testing::RequireSharedFile;
using ::testing::AllOf;

struct InputTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;
};

// Builds an F32-ish model file and returns the float values of every tensor
// (after rounding to its stored type).
std::map<std::string, std::vector<float>> WriteModel(const std::string& path,
                                                     const std::vector<InputTensor>& tensors,
                                                     uint32_t alignment) {
  std::mt19937 rng(17);
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("general.file_type", 0);  // ALL_F32
  w.SetAlignment(alignment);
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
  w.SetFloat32Array("tokenizer.ggml.scores", {0, -1, -2});
  w.SetValue("x.nested",
             Array(GgufValueType::kArray,
                   {Array(GgufValueType::kString, {Scalar(GgufValueType::kString, 0, 0, "n")})}));
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::map<std::string, std::vector<float>> values;
  for (const InputTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.dims) {
      n *= d;
    }
    std::vector<float> x = RandomRow(rng, n, 0.5f);
    EXPECT_OK(w.AddTensorFromF32(t.name, t.type, t.dims, x));
    // What the file holds, as floats.
    std::vector<uint8_t> stored(GgmlRowBytes(t.type, n));
    QuantizeRow(t.type, x.data(), stored.data(), n);
    DequantizeRow(t.type, stored.data(), x.data(), n);
    values[t.name] = x;
  }
  EXPECT_OK(w.WriteFile(path));
  return values;
}

const std::vector<InputTensor>& ModelTensors() {
  static const auto* tensors = new std::vector<InputTensor>{
      {"token_embd.weight", GgmlType::kF32, {64, 16}},
      {"output_norm.weight", GgmlType::kF32, {64}},
      {"output.weight", GgmlType::kF32, {64, 16}},
      {"rope_freqs.weight", GgmlType::kF32, {32}},
      {"blk.0.attn_norm.weight", GgmlType::kF32, {64}},
      {"blk.0.attn_q.weight", GgmlType::kF16, {64, 64}},
      {"blk.0.attn_k.weight", GgmlType::kBF16, {64, 32}},
      {"blk.0.attn_q.bias", GgmlType::kF32, {64}},
      {"blk.0.ffn_down.weight", GgmlType::kF32, {48, 64}},  // row of 48: not quantizable
      {"blk.0.ffn_gate_inp.weight", GgmlType::kF32, {64, 4}},
      {"blk.0.ffn_up_exps.weight", GgmlType::kF32, {64, 8, 2}},  // 3-D experts
  };
  return *tensors;
}

// The type each of ModelTensors() is quantized to: `target`, `output` for
// output.weight; 1-D tensors, ffn_down (rows of 48) and the gate stay F32.
std::map<std::string, GgmlType> ModelTensorTypes(GgmlType target, GgmlType output) {
  return {{"token_embd.weight", target},
          {"output_norm.weight", GgmlType::kF32},
          {"output.weight", output},
          {"rope_freqs.weight", GgmlType::kF32},
          {"blk.0.attn_norm.weight", GgmlType::kF32},
          {"blk.0.attn_q.weight", target},
          {"blk.0.attn_k.weight", target},
          {"blk.0.attn_q.bias", GgmlType::kF32},
          {"blk.0.ffn_down.weight", GgmlType::kF32},
          {"blk.0.ffn_gate_inp.weight", GgmlType::kF32},
          {"blk.0.ffn_up_exps.weight", target}};
}

void ExpectQuantized(const std::string& in, const std::string& out, GgmlType target,
                     const std::map<std::string, std::vector<float>>& values,
                     const std::map<std::string, GgmlType>& want_types,
                     const GgufQuantizeReport& report) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> src, GgufFile::Open(in));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> dst, GgufFile::Open(out));
  EXPECT_EQ(dst->version(), 3u);
  EXPECT_EQ(dst->alignment(), src->alignment());
  // Metadata: same keys in the same order, then quantization_version; values
  // identical except file_type.
  std::vector<std::string> want_keys = src->metadata_keys();
  want_keys.push_back("general.quantization_version");
  EXPECT_EQ(dst->metadata_keys(), want_keys);
  for (const std::string& k : src->metadata_keys()) {
    if (k != "general.file_type") {
      ExpectSameValue(*dst->Find(k), *src->Find(k), k);
    }
  }
  EXPECT_EQ(dst->Find("general.file_type")->type, GgufValueType::kUint32);
  EXPECT_EQ(*dst->GetInt("general.file_type"), target == GgmlType::kQ8_0 ? 7 : 2);
  EXPECT_EQ(*dst->GetInt("general.quantization_version"), 2);

  ASSERT_EQ(dst->tensors().size(), src->tensors().size());
  ASSERT_EQ(report.tensors.size(), src->tensors().size());
  int64_t before = 0;
  int64_t after = 0;
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const GgufTensorInfo& s = src->tensors()[i];
    const GgufTensorInfo& d = dst->tensors()[i];
    SCOPED_TRACE(s.name);
    ASSERT_EQ(d.name, s.name);
    EXPECT_EQ(d.dims, s.dims);
    ASSERT_TRUE(want_types.count(s.name));
    EXPECT_EQ(d.type, want_types.at(s.name)) << GgmlTypeName(d.type);
    EXPECT_EQ(report.tensors[i].name, s.name);
    EXPECT_EQ(report.tensors[i].from, s.type);
    EXPECT_EQ(report.tensors[i].to, d.type);
    EXPECT_EQ(report.tensors[i].bytes_before, s.num_bytes);
    EXPECT_EQ(report.tensors[i].bytes_after, d.num_bytes);
    before += s.num_bytes;
    after += d.num_bytes;
    if (d.type == s.type) {
      EXPECT_EQ(std::vector<uint8_t>(d.data, d.data + d.num_bytes),
                std::vector<uint8_t>(s.data, s.data + s.num_bytes));
      continue;
    }
    // Dequantized output == DequantizeRow(QuantizeRow(x)) of the input floats.
    const std::vector<float>& x = values.at(s.name);
    std::vector<uint8_t> q(d.num_bytes);
    std::vector<float> want(x.size());
    std::vector<float> got(x.size());
    QuantizeRow(d.type, x.data(), q.data(), x.size());
    DequantizeRow(d.type, q.data(), want.data(), x.size());
    DequantizeRow(d.type, d.data, got.data(), x.size());
    EXPECT_EQ(got, want);
    EXPECT_EQ(std::vector<uint8_t>(d.data, d.data + d.num_bytes), q);
  }
  EXPECT_EQ(report.bytes_before, before);
  EXPECT_EQ(report.bytes_after, after);
  EXPECT_LT(report.bytes_after, report.bytes_before);
  EXPECT_GT(report.file_bytes_before, report.bytes_before);
  EXPECT_GT(report.file_bytes_after, report.bytes_after);
}

TEST(QuantizeGgufFileTest, Q8_0) {
  const std::string in = TempDir() + "/model_f32_q8.gguf";
  const std::string out = TempDir() + "/model_q8_0.gguf";
  const auto values = WriteModel(in, ModelTensors(), 32);
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(in, out, GgmlType::kQ8_0, &report));
  const GgmlType q = GgmlType::kQ8_0;
  ExpectQuantized(in, out, q, values, ModelTensorTypes(q, q), report);
}

TEST(QuantizeGgufFileTest, Q4_0KeepsOutputAtQ8_0) {
  const std::string in = TempDir() + "/model_f32_q4.gguf";
  const std::string out = TempDir() + "/model_q4_0.gguf";
  const auto values = WriteModel(in, ModelTensors(), 64);  // non-default alignment kept
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(in, out, GgmlType::kQ4_0, &report));
  const GgmlType q = GgmlType::kQ4_0;
  ExpectQuantized(in, out, q, values, ModelTensorTypes(q, GgmlType::kQ8_0), report);

  // Quantizing the result again: Q4_0 tensors are already the target (copied),
  // output.weight already Q8_0: the file converts to itself.
  const std::string again = TempDir() + "/model_q4_0_again.gguf";
  ASSERT_OK(QuantizeGgufFile(out, again, GgmlType::kQ4_0));
  EXPECT_EQ(ReadBytes(again), ReadBytes(out));
  // To Q8_0 it would requantize: refused, naming the tensor.
  EXPECT_THAT(QuantizeGgufFile(out, TempDir() + "/never.gguf", GgmlType::kQ8_0),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("'token_embd.weight'"), HasSubstr("already Q4_0"))));
}

TEST(QuantizeGgufFileTest, TiedEmbeddingsGetTheOutputType) {
  const std::string in = TempDir() + "/tied_f32.gguf";
  const std::string out = TempDir() + "/tied_q4_0.gguf";
  const auto values = WriteModel(in,
                                 {{"token_embd.weight", GgmlType::kF32, {64, 16}},
                                  {"blk.0.attn_q.weight", GgmlType::kF32, {64, 64}}},
                                 32);
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(in, out, GgmlType::kQ4_0, &report));
  ExpectQuantized(
      in, out, GgmlType::kQ4_0, values,
      {{"token_embd.weight", GgmlType::kQ8_0}, {"blk.0.attn_q.weight", GgmlType::kQ4_0}}, report);
}

TEST(QuantizeGgufFileTest, QuantizesStories260K) {
  const std::string out = TempDir() + "/stories_q8_0.gguf";
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(RequireSharedFile(kStories), out, GgmlType::kQ8_0, &report));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, GgufFile::Open(out));
  EXPECT_EQ(f->metadata().size(), 21u);  // 19 + file_type + quantization_version
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(f->FindTensor("blk.0.ffn_down.weight")->type, GgmlType::kF32);  // 172 % 32 != 0
  EXPECT_EQ(f->FindTensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(report.tensors.size(), 48u);
}

TEST(QuantizeGgufFileTest, Errors) {
  EXPECT_THAT(QuantizeGgufFile("in", "out", GgmlType::kF16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("valid targets: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K")));
  EXPECT_THAT(QuantizeGgufFile(TempDir() + "/missing.gguf", TempDir() + "/o.gguf", GgmlType::kQ8_0),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.gguf")));
}

// llama.cpp's Q4_K_M recipe on a 16-layer model: use_more_bits(i, 16) picks
// layers {0, 1, 4, 7, 10, 13, 14, 15} (i < 2, i >= 14, (i - 2) % 3 == 2) for
// Q6_K attn_v and ffn_down; rows of 96 fall back to Q5_0 (Q4_K) / Q8_0 (Q6_K).
TEST(QuantizeGgufFileTest, Q4_K_MRecipe) {
  std::vector<InputTensor> tensors = {{"token_embd.weight", GgmlType::kF32, {256, 8}},
                                      {"output.weight", GgmlType::kF32, {256, 8}},
                                      {"output_norm.weight", GgmlType::kF32, {256}}};
  std::map<std::string, GgmlType> want = {{"token_embd.weight", GgmlType::kQ4_K},
                                          {"output.weight", GgmlType::kQ6_K},
                                          {"output_norm.weight", GgmlType::kF32}};
  const std::set<int> more_bits = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int i = 0; i < 16; ++i) {
    const std::string b = absl::StrCat("blk.", i, ".");
    const bool more = more_bits.count(i) > 0;
    tensors.push_back({b + "attn_q.weight", GgmlType::kF32, {96, 4}});
    tensors.push_back({b + "attn_v.weight", GgmlType::kF32, {i == 4 ? 96 : 256, 4}});
    tensors.push_back({b + "ffn_down.weight", GgmlType::kF16, {256, 4}});
    tensors.push_back({b + "ffn_up.weight", GgmlType::kF32, {48, 4}});
    want[b + "attn_q.weight"] = GgmlType::kQ5_0;
    want[b + "attn_v.weight"] = i == 4 ? GgmlType::kQ8_0 : more ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    want[b + "ffn_down.weight"] = more ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    want[b + "ffn_up.weight"] = GgmlType::kF32;  // rows of 48: no block fits, kept
  }
  const std::string dir = ::tandem::testing::TempDir();
  const std::string in = dir + "/kq_in.gguf";
  const std::string out = dir + "/kq_out.gguf";
  const auto values = WriteModel(in, tensors, 32);
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(in, out, QuantRecipe::kQ4_K_M, &report));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> dst, GgufFile::Open(out));
  EXPECT_EQ(*dst->GetInt("general.file_type"), 15);
  ASSERT_EQ(dst->tensors().size(), tensors.size());
  for (const GgufTensorInfo& d : dst->tensors()) {
    SCOPED_TRACE(d.name);
    EXPECT_EQ(d.type, want.at(d.name)) << GgmlTypeName(d.type);
    if (d.type == GgmlType::kF32) {
      continue;
    }
    const std::vector<float>& x = values.at(d.name);
    std::vector<uint8_t> q(d.num_bytes);
    QuantizeRow(d.type, x.data(), q.data(), x.size());
    EXPECT_EQ(std::vector<uint8_t>(d.data, d.data + d.num_bytes), q);
  }
  ASSERT_OK_AND_ASSIGN(QuantRecipe parsed, QuantRecipeFromName("q4_k_m"));
  EXPECT_EQ(parsed, QuantRecipe::kQ4_K_M);
  EXPECT_THAT(QuantRecipeFromName("Q4_K_S"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("valid: Q8_0, Q4_0, Q4_K_M, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K")));
}

// The pure recipes (llama.cpp's quantize --pure): every quantizable tensor,
// output and token_embd included, in one type; K-quant rows not a multiple of
// 256 fall back as llama.cpp's do; norms are kept; the data is QuantizeRow's;
// general.file_type is llama.cpp's LLAMA_FTYPE value.
TEST(QuantizeGgufFileTest, PureRecipes) {
  struct Case {
    const char* name;
    GgmlType type;
    GgmlType fallback;  // for rows of 96
    int64_t file_type;
  };
  const Case cases[] = {
      {"Q4_1", GgmlType::kQ4_1, GgmlType::kQ4_1, 3},
      {"q5_0", GgmlType::kQ5_0, GgmlType::kQ5_0, 8},
      {"Q5_1", GgmlType::kQ5_1, GgmlType::kQ5_1, 9},
      {"Q4_K", GgmlType::kQ4_K, GgmlType::kQ5_0, 14},
      {"q5_k", GgmlType::kQ5_K, GgmlType::kQ5_1, 16},
      {"Q6_K", GgmlType::kQ6_K, GgmlType::kQ8_0, 18},
  };
  const std::vector<InputTensor> tensors = {
      {"token_embd.weight", GgmlType::kF32, {256, 4}},
      {"output.weight", GgmlType::kF16, {256, 4}},
      {"output_norm.weight", GgmlType::kF32, {256}},
      {"blk.0.attn_v.weight", GgmlType::kF32, {512, 2}},
      {"blk.0.ffn_down.weight", GgmlType::kF32, {96, 3}},
      {"blk.0.ffn_up.weight", GgmlType::kF32, {48, 2}}};
  const std::string dir = ::tandem::testing::TempDir();
  const std::string in = dir + "/pure_in.gguf";
  const auto values = WriteModel(in, tensors, 32);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(const QuantRecipe recipe, QuantRecipeFromName(c.name));
    const std::string out = absl::StrCat(dir, "/pure_", c.name, ".gguf");
    ASSERT_OK(QuantizeGgufFile(in, out, recipe));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> dst, GgufFile::Open(out));
    EXPECT_EQ(*dst->GetInt("general.file_type"), c.file_type);
    const std::map<std::string, GgmlType> want = {
        {"token_embd.weight", c.type},       {"output.weight", c.type},
        {"output_norm.weight", GgmlType::kF32}, {"blk.0.attn_v.weight", c.type},
        {"blk.0.ffn_down.weight", c.fallback},
        // Rows of 48 fit no block of 32 or 256: kept.
        {"blk.0.ffn_up.weight", GgmlType::kF32}};
    for (const GgufTensorInfo& d : dst->tensors()) {
      SCOPED_TRACE(d.name);
      EXPECT_EQ(GgmlTypeName(d.type), GgmlTypeName(want.at(d.name)));
      if (d.type == GgmlType::kF32) {
        continue;
      }
      const std::vector<float>& x = values.at(d.name);
      std::vector<uint8_t> q(d.num_bytes);
      QuantizeRow(d.type, x.data(), q.data(), static_cast<int64_t>(x.size()));
      EXPECT_EQ(std::vector<uint8_t>(d.data, d.data + d.num_bytes), q);
    }
    // The same file from the GgmlType overload.
    const std::string by_type = absl::StrCat(dir, "/pure_t_", c.name, ".gguf");
    ASSERT_OK(QuantizeGgufFile(in, by_type, c.type));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> again, GgufFile::Open(by_type));
    EXPECT_EQ(*again->GetInt("general.file_type"), c.file_type);
  }
}

// The plan reproduces the tensor types of a real llama.cpp Q4_K_M file:
// Qwen2.5-Coder-0.5B-Instruct from the model cache (scripts/test.sh fetches
// it; without it the test fails naming scripts/fetch_models.sh).
// Its tensors are in lexicographic name order (blk.0, blk.1, blk.10, ...),
// and llama.cpp counts attn_v / ffn_down in file order, so its Q6_K layers
// are {0, 1, 3, 6, 7, 8, 9, 10, 13, 16, 19, 21}; 896-wide rows fall back to
// Q5_0 / Q8_0.
TEST(QuantizePlanTest, MatchesQwen25Coder05BQ4KM) {
  ASSERT_OK_AND_ASSIGN(const std::string path, ResolveModelPath("qwen2.5-coder-0.5b-instruct"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  const std::vector<GgmlType> plan = PlanQuantization(*f, QuantRecipe::kQ4_K_M);
  ASSERT_EQ(plan.size(), f->tensors().size());
  std::map<GgmlType, int> counts;
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(GgmlTypeName(plan[i]), GgmlTypeName(f->tensors()[i].type)) << f->tensors()[i].name;
    ++counts[plan[i]];
  }
  EXPECT_EQ(counts[GgmlType::kQ6_K], 12);
  EXPECT_EQ(counts[GgmlType::kQ8_0], 13);
  EXPECT_EQ(*f->GetInt("general.file_type"), 15);
}

}  // namespace
}  // namespace tandem::engine::testing
