// The command-line tools, run as real processes: tandem-generate's
// --logits-out against the transformers reference, tandem-mkmodel's output
// loading as a model, tandem-quantize producing what QuantizeGgufFile does,
// and clear errors for bad input.

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/engine/format/gguf.h"
#include "common/engine/format/npy.h"
#include "common/engine/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/child_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::RunResult;
using ::testing::HasSubstr;

std::string Tool(const std::string& name) {
  return absl::StrCat(::tandem::testing::BinaryDir(), "/bin/", name);
}

// Runs the tool `name` with `args` to its end (output: stdout and stderr);
// failing to run it at all fails the test.
RunResult RunTool(const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), Tool(name));
  absl::StatusOr<RunResult> r = ::tandem::testing::RunToCompletion(std::move(args));
  EXPECT_OK(r.status());
  return r.ok() ? *std::move(r) : RunResult{};
}

TEST(ToolsTest, GenerateLogitsOutMatchesReference) {
  std::ifstream in(::tandem::testing::RequireTestDataFile("golden/manifest.json"));
  nlohmann::json manifest = nlohmann::json::parse(in);
  const auto& c = manifest["cases"][0];
  const std::string model = ::tandem::testing::RequireTestDataFile(c["model"]);
  const std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
  const std::string out = ::tandem::testing::TempDir() + "/logits.npy";
  RunResult r = RunTool("tandem-generate", {"--model", model, "--prompt_ids", absl::StrJoin(tokens, ","),
                                            "-n", "4", "--chunk", "7", "--threads", "1",
                                            "--logits_out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("prefill: " + std::to_string(tokens.size()) + " tokens"));
  EXPECT_THAT(r.output, HasSubstr("decode: 4 tokens"));
  auto got = ReadNpy(out);
  ASSERT_OK(got.status());
  auto want = ReadNpy(::tandem::testing::RequireTestDataFile(c["logits"]));
  ASSERT_OK(want.status());
  ASSERT_EQ(got->shape, want->shape);
  double max_diff = 0;
  for (size_t i = 0; i < got->data.size(); ++i) {
    max_diff = std::max<double>(max_diff, std::fabs(got->data[i] - want->data[i]));
  }
  EXPECT_LE(max_diff, 1e-3);
}

TEST(ToolsTest, GenerateTextFromRealModel) {
  const std::string model =
      ::tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf");
  RunResult r = RunTool("tandem-generate", {"--model", model, "--prompt", "Once upon a time",
                                            "-n", "20", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The reference greedy continuation (reference_greedy.json) starts so.
  EXPECT_THAT(r.output, HasSubstr("Once upon a time, there was a little girl named Lily."));
  EXPECT_THAT(r.output, HasSubstr("tok/s"));
}

TEST(ToolsTest, GenerateReportsBadInputClearly) {
  RunResult missing = RunTool("tandem-generate", {"--model", "/nonexistent.gguf", "--prompt", "hi"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent.gguf"));
  const std::string model =
      ::tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf");
  RunResult bad_id = RunTool("tandem-generate", {"--model", model, "--prompt_ids", "1,99999"});
  EXPECT_EQ(bad_id.exit_code, 1);
  EXPECT_THAT(bad_id.output, HasSubstr("99999"));
  const std::string vocab =
      ::tandem::testing::RequireSharedFile("models/ggml-vocab/ggml-vocab-gpt-2.gguf");
  RunResult no_weights = RunTool("tandem-generate", {"--model", vocab, "--prompt", "hi"});
  EXPECT_EQ(no_weights.exit_code, 1);
  EXPECT_THAT(no_weights.output, HasSubstr("unsupported architecture 'gpt2'"));
}

TEST(ToolsTest, MkmodelThenQuantizeLoads) {
  const std::string dir = ::tandem::testing::TempDir();
  const std::string vocab =
      ::tandem::testing::RequireSharedFile("models/ggml-vocab/ggml-vocab-llama-spm.gguf");
  const std::string f32 = dir + "/mk-f32.gguf", q4 = dir + "/mk-q4.gguf";
  RunResult mk = RunTool("tandem-mkmodel", {"--out", f32, "--dim", "64", "--layers", "2", "--heads", "4",
                                            "--kv_heads", "2", "--ffn", "128", "--vocab_from",
                                            vocab, "--dtype", "F32"});
  ASSERT_EQ(mk.exit_code, 0) << mk.output;
  auto model = Model::Load(f32);
  ASSERT_OK(model.status());
  EXPECT_EQ((*model)->config().vocab_size, 32000);
  EXPECT_EQ((*model)->config().num_kv_heads, 2);
  ASSERT_NE((*model)->tokenizer(), nullptr);
  RunResult q = RunTool("tandem-quantize", {f32, q4, "Q4_0"});
  ASSERT_EQ(q.exit_code, 0) << q.output;
  auto qm = Model::Load(q4);
  ASSERT_OK(qm.status());
  EXPECT_EQ((*qm)->config().weight_type, GgmlType::kQ4_0);
  RunResult gen = RunTool("tandem-generate",
                          {"--model", q4, "--prompt", "hello", "-n", "3", "--threads", "1"});
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  RunResult bad = RunTool("tandem-mkmodel", {"--out", dir + "/x.gguf", "--dim", "60", "--heads", "7"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("dim 60"));
}

}  // namespace
}  // namespace tandem::engine
