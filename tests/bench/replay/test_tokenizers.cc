#include "tests/bench/replay/test_tokenizers.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/engine/format/gguf.h"
#include "common/engine/model_store.h"
#include "gtest/gtest.h"
#include "tests/testing/test_paths.h"

namespace tandem::replay::testing {

const engine::Tokenizer& TestTokenizer(const std::string& name) {
  static auto* cache = new std::map<std::string, std::unique_ptr<engine::Tokenizer>>();
  std::unique_ptr<engine::Tokenizer>& tokenizer = (*cache)[name];
  if (tokenizer != nullptr) {
    return *tokenizer;
  }
  absl::StatusOr<std::string> path =
      name == "stories260K"
          ? ::tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf")
          : engine::ResolveModelPath(name == "smollm2" ? "smollm2-135m-instruct"
                                                       : "qwen2.5-coder-0.5b-instruct");
  absl::Status status = path.status();
  if (path.ok()) {
    auto file = engine::GgufFile::Open(*path);
    status = file.status();
    if (file.ok()) {
      auto loaded = engine::Tokenizer::FromGguf(**file);
      status = loaded.status();
      if (loaded.ok()) {
        tokenizer = *std::move(loaded);
        return *tokenizer;
      }
    }
  }
  ADD_FAILURE() << "tokenizer " << name << ": " << status;
  std::abort();
}

std::vector<engine::TokenId> EncodePlain(const engine::Tokenizer& tokenizer,
                                         const std::string& text) {
  auto ids = tokenizer.Encode(text, /*add_bos=*/false, /*parse_special=*/false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<engine::TokenId>{};
}

}  // namespace tandem::replay::testing
