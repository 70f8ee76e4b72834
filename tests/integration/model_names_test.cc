// Model names (docs/models.md) where each binary takes a model: tandem-generate
// and tandem-decode's --model, the router's models (ServedModel::Load, its
// YAML) and `tandem up`'s spec. The cache ($TANDEM_MODELS) is a temp folder
// where "SmolLM2-135M-Instruct.Q4_1.gguf" is a link to stories260K, so no real
// model is needed; the Qwen models are missing from it.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/cli/launcher.h"
#include "router/config.h"
#include "router/model_catalog.h"
#include "tests/testing/child_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"
#include "tests/testing/worker_process.h"

namespace tandem::integration {
namespace {

using ::tandem::testing::RunResult;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kFetchQwenSmall[] = "scripts/fetch_models.sh --qwen-small";

std::string Bin(const std::string& name) {
  return absl::StrCat(::tandem::testing::BinaryDir(), "/bin/", name);
}

class ModelNamesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string cache = ::tandem::testing::TempDir() + "/models";
    std::filesystem::create_directories(cache);
    std::filesystem::create_symlink(
        ::tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf"),
        cache + "/SmolLM2-135M-Instruct.Q4_1.gguf");
    // Children inherit it.
    setenv("TANDEM_MODELS", cache.c_str(), 1);
  }
  static void TearDownTestSuite() { unsetenv("TANDEM_MODELS"); }

  static RunResult Run(std::vector<std::string> argv) {
    absl::StatusOr<RunResult> r =
        ::tandem::testing::RunToCompletion(std::move(argv), absl::Seconds(60));
    EXPECT_OK(r.status());
    return r.ok() ? *std::move(r) : RunResult{};
  }
};

TEST_F(ModelNamesTest, GenerateLoadsAModelByName) {
  RunResult r = Run({Bin("tandem-generate"), "--model", "smollm2-135m-instruct", "--prompt_ids",
                     "1,2,3", "-n", "2", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("decode: 2 tokens"));

  r = Run({Bin("tandem-generate"), "--model", "qwen2.5-coder-0.5b-instruct", "--prompt_ids", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(kFetchQwenSmall));
}

TEST_F(ModelNamesTest, WorkerLoadsAModelByName) {
  absl::StatusOr<std::unique_ptr<::tandem::testing::WorkerProcess>> w =
      ::tandem::testing::WorkerProcess::Start(
          Bin("tandem-decode"),
          {"--model=smollm2-135m-instruct", "--role=colocated", "--listen=127.0.0.1:0",
           "--metrics_port=-1", "--threads=1", "--kv_blocks=64", "--transport=loopback"});
  ASSERT_OK(w.status());

  RunResult r = Run({Bin("tandem-decode"), "--model=qwen2.5-coder-0.5b-instruct",
                     "--listen=127.0.0.1:0", "--metrics_port=-1"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(kFetchQwenSmall));
}

TEST_F(ModelNamesTest, RouterServesAModelByItsName) {
  router::ServedModelConfig c;
  c.path = "smollm2-135m-instruct";
  absl::StatusOr<std::unique_ptr<router::ServedModel>> m = router::ServedModel::Load(c);
  ASSERT_OK(m.status());
  EXPECT_EQ((*m)->name(), "smollm2-135m-instruct");
  EXPECT_EQ((*m)->architecture(), "llama");

  c.path = "qwen2.5-coder-0.5b-instruct";
  EXPECT_THAT(router::ServedModel::Load(c).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(kFetchQwenSmall)));
}

TEST_F(ModelNamesTest, ConfigFilesKeepModelNames) {
  // Relative paths are relative to the file; model names stay names.
  absl::StatusOr<router::RouterConfig> rc = router::ParseRouterConfigYaml(
      "models:\n  - {path: smollm2-135m-instruct}\n  - {path: m.gguf}\n", "/etc/tandem");
  ASSERT_OK(rc.status());
  ASSERT_EQ(rc->models.size(), 2u);
  EXPECT_EQ(rc->models[0].path, "smollm2-135m-instruct");
  EXPECT_EQ(rc->models[1].path, "/etc/tandem/m.gguf");

  absl::StatusOr<router::cli::ClusterSpec> spec = router::cli::ParseClusterYaml(
      "model: smollm2-135m-instruct\ncolocated: {replicas: 1}\n", "/etc/tandem");
  ASSERT_OK(spec.status());
  EXPECT_EQ(spec->model, "smollm2-135m-instruct");
  spec = router::cli::ParseClusterYaml("model: m.gguf\ncolocated: {replicas: 1}\n", "/etc/tandem");
  ASSERT_OK(spec.status());
  EXPECT_EQ(spec->model, "/etc/tandem/m.gguf");
}

}  // namespace
}  // namespace tandem::integration
