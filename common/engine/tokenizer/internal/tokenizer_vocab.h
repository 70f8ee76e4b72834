#pragma once
// The tokenizer's inputs as plain data, so a Tokenizer can be built without a
// GGUF file (tests) and the GGUF parsing is checked apart from tokenization.
// Tokenizer::FromGguf is VocabSpecFromMetadata + MakeTokenizer.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/engine/format/gguf.h"
#include "common/engine/tokenizer/internal/unicode.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::engine::internal {

// tokenizer.ggml.* metadata; optional keys absent from the file stay unset
// and get llama.cpp's per-model defaults in MakeTokenizer.
struct VocabSpec {
  std::string model;                 // tokenizer.ggml.model: "llama", "gpt2" or "bert"
  std::optional<std::string> pre;    // tokenizer.ggml.pre
  std::string architecture;          // general.architecture ("" when absent)
  std::string name;                  // general.name: picks lstrip/rstrip rules as llama.cpp
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores; empty: all 0
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (TokenType); empty: all normal
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("left right"), gpt2 only
  std::optional<int64_t> bos_id, eos_id, unk_id, eot_id, eom_id;
  // tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id
  std::optional<int64_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<int64_t> cls_id;         // tokenizer.ggml.cls_token_id (bert: BOS when unset)
  std::optional<int64_t> sep_id;         // tokenizer.ggml.seperator_token_id (bert)
  std::optional<bool> add_bos;           // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos;           // tokenizer.ggml.add_eos_token (bert: [SEP])
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix
};

// Reads the tokenizer.ggml.* keys. InvalidArgument naming the key when a
// required one is missing or any has the wrong type.
absl::StatusOr<VocabSpec> VocabSpecFromMetadata(const std::map<std::string, GgufValue>& metadata);

// InvalidArgument for an unknown model or pre-tokenizer (listing the known
// ones), duplicate tokens, arrays shorter than the token list, or add_bos
// without a BOS token.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(VocabSpec spec);

// What a tokenizer.ggml.pre name means for a byte-level BPE vocab.
struct PreTokenizer {
  std::vector<SplitRule> rules;
  bool ignore_merges = false;  // a whole word that is a token skips the merges (Llama 3)
  bool add_bos = false;        // default for tokenizer.ggml.add_bos_token
};

// InvalidArgument listing the known names for an unknown one. An empty name
// is llama.cpp's "default".
absl::StatusOr<PreTokenizer> LookupPreTokenizer(absl::string_view name);

}  // namespace tandem::engine::internal
