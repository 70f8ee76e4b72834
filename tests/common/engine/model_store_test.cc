// Model names resolve to files in the model cache ($TANDEM_MODELS, else
// ~/.cache/tandem/models); a missing model names the command that installs it;
// paths pass through unchanged.

#include "common/engine/model_store.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// The value, or the error as "<status>" (so EXPECT_EQ shows it).
std::string ValueOrError(const absl::StatusOr<std::string>& s) {
  return s.ok() ? *s : absl::StrCat("<", s.status().ToString(), ">");
}

// Each test gets its own empty cache in TANDEM_MODELS, and HOME is restored.
class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = ::tandem::testing::TempDir() + "/" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(cache_);
    setenv("TANDEM_MODELS", cache_.c_str(), 1);
    const char* home = std::getenv("HOME");
    home_ = home != nullptr ? home : "";
  }
  void TearDown() override {
    unsetenv("TANDEM_MODELS");
    setenv("HOME", home_.c_str(), 1);
  }
  std::string Install(const std::string& file_name) {
    const std::string path = cache_ + "/" + file_name;
    std::ofstream(path) << "GGUF";
    return path;
  }

  std::string cache_;
  std::string home_;
};

TEST_F(ModelStoreTest, NameResolvesToTheCacheFile) {
  const std::string smol = Install("SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string qwen = Install("Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf");
  EXPECT_EQ(ValueOrError(ResolveModelPath("smollm2-135m-instruct")), smol);
  EXPECT_EQ(ValueOrError(ResolveModelPath("qwen2.5-coder-0.5b-instruct")), qwen);
  // Names are case-insensitive.
  EXPECT_EQ(ValueOrError(ResolveModelPath("Qwen2.5-Coder-0.5B-Instruct")), qwen);
}

TEST_F(ModelStoreTest, MissingModelNamesTheFetchCommand) {
  EXPECT_THAT(ResolveModelPath("qwen2.5-coder-0.5b-instruct"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(cache_ + "/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"),
                             HasSubstr("scripts/fetch_models.sh --qwen-small"))));
  EXPECT_THAT(ResolveModelPath("qwen2.5-coder-1.5b-instruct"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("scripts/fetch_models.sh --qwen`")));
  EXPECT_THAT(ResolveModelPath("smollm2-135m-instruct"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("`scripts/fetch_models.sh`")));
}

TEST_F(ModelStoreTest, PathsPassThroughUnchanged) {
  const std::string smol = Install("SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(ValueOrError(ResolveModelPath(smol)), smol);
  // Not checked here: the loader reports a missing file by its path.
  EXPECT_EQ(ValueOrError(ResolveModelPath("/no/such/model.gguf")), "/no/such/model.gguf");
  EXPECT_EQ(ValueOrError(ResolveModelPath("stories260K.gguf")), "stories260K.gguf");
  // A known name wins over a file of that name in the working directory
  // (./smollm2-135m-instruct means the file).
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(cache_);
  std::ofstream("smollm2-135m-instruct") << "local";
  EXPECT_EQ(ValueOrError(ResolveModelPath("smollm2-135m-instruct")), smol);
  EXPECT_EQ(ValueOrError(ResolveModelPath("./smollm2-135m-instruct")), "./smollm2-135m-instruct");
  std::filesystem::current_path(cwd);
}

TEST_F(ModelStoreTest, UnknownWordListsTheKnownNames) {
  EXPECT_THAT(ResolveModelPath("smollm2"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("'smollm2'"), HasSubstr("smollm2-135m-instruct"),
                             HasSubstr("qwen2.5-coder-1.5b-instruct"))));
}

TEST_F(ModelStoreTest, CacheDirFallsBackToHome) {
  EXPECT_EQ(ValueOrError(ModelCacheDir()), cache_);
  unsetenv("TANDEM_MODELS");
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(ValueOrError(ModelCacheDir()), "/home/someone/.cache/tandem/models");
  setenv("TANDEM_MODELS", "", 1);  // empty is unset
  EXPECT_EQ(ValueOrError(ModelCacheDir()), "/home/someone/.cache/tandem/models");
  unsetenv("HOME");
  EXPECT_THAT(ModelCacheDir(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("TANDEM_MODELS")));
}

TEST_F(ModelStoreTest, KnownModelsAreTheFetchScriptsTable) {
  std::ifstream script(::tandem::testing::TestDataDir() + "/../../scripts/fetch_models.sh");
  const std::string text((std::istreambuf_iterator<char>(script)),
                         std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(KnownModels().size(), 4u);
  for (const KnownModel& m : KnownModels()) {
    EXPECT_EQ(FindKnownModel(m.name), &m);
    // The file it resolves to is one scripts/fetch_models.sh installs.
    // (A model the script converts into a folder of its own names the path.)
    EXPECT_THAT(text, AnyOf(HasSubstr(absl::StrCat(" ", m.file_name, " \\\n")),
                            HasSubstr(absl::StrCat("$CACHE/", m.file_name, "\n"))))
        << m.name;
  }
  EXPECT_EQ(FindKnownModel("stories260K"), nullptr);
}

}  // namespace
}  // namespace tandem::engine
