// libFuzzer harness for the tokenizers, built once from real vocabularies:
// stories260K (SentencePiece-style with byte fallback, 512 tokens),
// llama.cpp's llama-spm vocab (32000 tokens) and its gpt-2 vocab (byte-level
// BPE). Input layout: byte 0 picks the vocabulary (value % 3) and the mode
// (bit 2: encode the rest as text; else decode it as little-endian int32
// ids, any value), bits 3 and 4 are add_bos and parse_special.
//
// Properties: Encode accepts exactly the valid UTF-8 inputs and returns ids
// in the vocabulary; decoding those ids gives the text back when special
// tokens are not parsed, except for SentencePiece text holding U+2581 ("▁"),
// the vocabulary's own spelling of a space, which decodes as a space (as in
// llama.cpp); the incremental Detokenizer always yields valid UTF-8.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/base/utf8.h"
#include "common/engine/format/gguf.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace tandem::engine {
namespace {

constexpr const char* kVocabs[] = {
    "models/stories260K/stories260K.gguf",
    "models/ggml-vocab/ggml-vocab-llama-spm.gguf",
    "models/ggml-vocab/ggml-vocab-gpt-2.gguf",
};
constexpr int kNumVocabs = sizeof(kVocabs) / sizeof(kVocabs[0]);
constexpr int kNumSpmVocabs = 2;  // the first two
constexpr char kSpmSpace[] = "\xE2\x96\x81";

std::unique_ptr<Tokenizer> Load(const char* relative) {
  auto file = GgufFile::Open(fuzz::SharedFile(relative));
  fuzz::Require(file.ok(), "the shared vocabulary loads (is ../shared/models there?)");
  auto tok = Tokenizer::FromGguf(**file);
  fuzz::Require(tok.ok(), "the shared vocabulary builds a tokenizer");
  return std::move(*tok);
}

const Tokenizer& TokenizerFor(int index) {
  static const std::vector<std::unique_ptr<Tokenizer>>* all = [] {
    auto* v = new std::vector<std::unique_ptr<Tokenizer>>();
    for (const char* path : kVocabs) v->push_back(Load(path));
    return v;
  }();
  return *(*all)[index];
}

void CheckDetokenizer(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  Detokenizer detok(tok);
  std::string streamed;
  for (TokenId id : ids) streamed += detok.Push(id);
  streamed += detok.Flush();
  fuzz::Require(base::IsValidUtf8(streamed), "the Detokenizer yields valid UTF-8");
}

void Encode(const Tokenizer& tok, bool spm, absl::string_view text, bool add_bos,
            bool parse_special) {
  absl::StatusOr<std::vector<TokenId>> ids = tok.Encode(text, add_bos, parse_special);
  fuzz::Require(ids.ok() == base::IsValidUtf8(text), "Encode accepts exactly valid UTF-8");
  if (!ids.ok()) {
    return;
  }
  for (TokenId id : *ids) {
    fuzz::Require(id >= 0 && id < tok.vocab_size(), "Encode returns ids in the vocabulary");
  }
  if (!parse_special && !(spm && absl::StrContains(text, kSpmSpace))) {
    fuzz::Require(tok.Decode(*ids) == text, "Decode(Encode(text)) == text");
  }
  CheckDetokenizer(tok, *ids);
}

void DecodeIds(const Tokenizer& tok, const uint8_t* data, size_t size) {
  std::vector<TokenId> ids(size / sizeof(TokenId));
  if (!ids.empty()) {
    std::memcpy(ids.data(), data, ids.size() * sizeof(TokenId));
  }
  (void)tok.Decode(ids);
  for (TokenId id : ids) (void)tok.TokenToPiece(id);
  CheckDetokenizer(tok, ids);
}

}  // namespace
}  // namespace tandem::engine

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tandem::engine::TokenizerFor(0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const uint8_t mode = data[0];
  const int vocab = mode % tandem::engine::kNumVocabs;
  const tandem::engine::Tokenizer& tok = tandem::engine::TokenizerFor(vocab);
  const bool encode = (mode & 4) != 0;
  const bool add_bos = (mode & 8) != 0;
  const bool parse_special = (mode & 16) != 0;
  if (encode) {
    tandem::engine::Encode(tok, vocab < tandem::engine::kNumSpmVocabs,
                           absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1),
                           add_bos, parse_special);
  } else {
    tandem::engine::DecodeIds(tok, data + 1, size - 1);
  }
  return 0;
}
