#include "common/engine/model_store.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::engine {
namespace {

constexpr KnownModel kKnownModels[] = {
    {"smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf", "scripts/fetch_models.sh"},
    {"qwen2.5-coder-0.5b-instruct", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
     "scripts/fetch_models.sh --qwen-small"},
    {"qwen2.5-coder-1.5b-instruct", "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
     "scripts/fetch_models.sh --qwen"},
    {"all-minilm-l6-v2", "all-MiniLM-L6-v2/all-MiniLM-L6-v2.F32.gguf",
     "scripts/fetch_models.sh --minilm"},
};

std::string KnownNames() {
  std::vector<absl::string_view> names;
  for (const KnownModel& m : kKnownModels) {
    names.push_back(m.name);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Span<const KnownModel> KnownModels() { return kKnownModels; }

const KnownModel* FindKnownModel(absl::string_view name) {
  for (const KnownModel& m : kKnownModels) {
    if (absl::EqualsIgnoreCase(m.name, name)) {
      return &m;
    }
  }
  return nullptr;
}

absl::StatusOr<std::string> ModelCacheDir() {
  if (const char* dir = std::getenv("TANDEM_MODELS"); dir != nullptr && *dir != '\0') {
    return std::string(dir);
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/tandem/models");
  }
  return absl::FailedPreconditionError(
      "cannot locate the model cache: set TANDEM_MODELS (or HOME, for ~/.cache/tandem/models)");
}

absl::StatusOr<std::string> ResolveModelPath(absl::string_view model) {
  const KnownModel* known = FindKnownModel(model);
  if (known == nullptr) {
    std::error_code ec;
    if (std::filesystem::exists(std::string(model), ec) || absl::StrContains(model, '/') ||
        absl::EndsWithIgnoreCase(model, ".gguf")) {
      return std::string(model);
    }
    return absl::NotFoundError(absl::StrCat("model '", model,
                                            "' is neither a file nor a known model name (",
                                            KnownNames(), ")"));
  }
  absl::StatusOr<std::string> dir = ModelCacheDir();
  if (!dir.ok()) {
    return dir.status();
  }
  std::string path = (std::filesystem::path(*dir) / std::string(known->file_name)).string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("model ", known->name, " is not installed (no ", path,
                                            "); install it with `", known->fetch_command,
                                            "` (docs/models.md)"));
  }
  return path;
}

}  // namespace tandem::engine
