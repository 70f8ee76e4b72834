#pragma once

// The model cache: where scripts/fetch_models.sh installs the real models
// (docs/models.md), and the names a user may give instead of a GGUF path.
//
//   ResolveModelPath("smollm2-135m-instruct")  -> "$TANDEM_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
//   ResolveModelPath("all-minilm-l6-v2")       -> "$TANDEM_MODELS/all-MiniLM-L6-v2/all-MiniLM-L6-v2.F32.gguf"
//   ResolveModelPath("models/stories260K.gguf") -> "models/stories260K.gguf" (a path, unchanged)
//
// Nothing here downloads: a known model missing from the cache is NotFound
// naming the command that installs it. Any thread (reads the environment).

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem::engine {

struct KnownModel {
  absl::string_view name;       // what users type, e.g. "qwen2.5-coder-0.5b-instruct"
  absl::string_view file_name;  // the file in the cache
  absl::string_view fetch_command;  // installs it, run from the repository root
};

// The models scripts/fetch_models.sh installs, in the order of its table.
absl::Span<const KnownModel> KnownModels();

// The known model with this name (ASCII case-insensitive), or nullptr.
const KnownModel* FindKnownModel(absl::string_view name);

// $TANDEM_MODELS if set and not empty, else $HOME/.cache/tandem/models;
// FailedPrecondition when neither variable is set.
absl::StatusOr<std::string> ModelCacheDir();

// A model given on a command line or in a config: a known name resolves to its
// file in ModelCacheDir() (NotFound naming the file and the fetch command when
// it is not there); an existing file, or anything that looks like a path
// (has a '/' or ends in .gguf), is returned unchanged for the loader to open
// and report on; any other word is NotFound listing the known names.
absl::StatusOr<std::string> ResolveModelPath(absl::string_view model);

}  // namespace tandem::engine
