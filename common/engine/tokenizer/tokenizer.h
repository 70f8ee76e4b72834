#pragma once
// Tokenizers built from GGUF metadata (tokenizer.ggml.*):
//  - "llama": SentencePiece-style BPE over scores, with byte fallback
//    (<0xXX> tokens), a leading-space prefix and "▁" for spaces, as llama.cpp's
//    llm_tokenizer_spm.
//  - "gpt2": byte-level BPE over merges with a pre-tokenizer chosen by
//    tokenizer.ggml.pre ("default"/"gpt-2", "llama-bpe"/"llama3", "qwen2",
//    "smollm", ...).
//  - "bert": WordPiece as BERT uncased (Hugging Face's BertNormalizer,
//    BertPreTokenizer and WordPiece; llama.cpp's llm_tokenizer_wpm): accents
//    stripped, lowercased, split at whitespace, punctuation and CJK
//    ideographs, greedy longest match per word, [UNK] for a word that fails.
// Special / control tokens in the text are matched before BPE when
// `parse_special` is set (as llama.cpp's tokenize with parse_special=true),
// except inside literal ranges (user content of a rendered chat template).
// lstrip / rstrip token attributes are set by model name as llama.cpp does
// (a GGUF carries none). Checked against Hugging Face tokenizers for the real
// SmolLM2 and Qwen2.5 vocabularies (tests/reference/gen_tokenizer_vectors.py).
//
// Immutable after construction; safe to use from any thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/engine/format/gguf.h"

namespace tandem::engine {

using TokenId = int32_t;

enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
  kByte = 6,
};

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

// Fill-in-the-middle tokens (-1 when the vocab has none): from the
// tokenizer.ggml.fim_*_token_id keys, else found by text as llama.cpp does
// ("<|fim_prefix|>", "<fim-prefix>", "<PRE>", ...; "<|repo_name|>" and
// "<reponame>" are the repo token).
struct FimIds {
  TokenId prefix = -1;
  TokenId suffix = -1;
  TokenId middle = -1;
  TokenId pad = -1;
  TokenId repo = -1;
  TokenId file_sep = -1;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // InvalidArgument naming the key when metadata is missing or malformed, or
  // the model / pre-tokenizer kind is unknown (the message lists known ones).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  // Encodes UTF-8 text. Adds BOS when `add_bos` (and the vocab has one), and
  // then sep_id() after the text (BERT: [CLS] text [SEP]).
  // With `parse_special`, control tokens written in the text ("<|im_end|>")
  // become their ids -- for text a chat template wrote, never for user text
  // unless asked; user-defined tokens (Qwen's "<tool_call>") always do.
  // Invalid UTF-8 is InvalidArgument with the byte offset.
  absl::StatusOr<std::vector<TokenId>> Encode(absl::string_view text, bool add_bos,
                                              bool parse_special) const {
    return Encode(text, add_bos, parse_special, {});
  }
  // As above, but inside the `literal` byte ranges of `text` (the user content
  // of a rendered chat template) control tokens are never matched, as with
  // parse_special = false there, so content cannot forge template markers.
  // The text is still tokenized as a whole (a range does not split words).
  // A range outside the text is InvalidArgument.
  virtual absl::StatusOr<std::vector<TokenId>> Encode(
      absl::string_view text, bool add_bos, bool parse_special,
      absl::Span<const TextRange> literal) const = 0;

  // The bytes a token stands for when detokenizing (SPM: "▁" -> " ", <0x0A> ->
  // "\n"; BPE: byte-level unicode mapped back to bytes; WordPiece: "▁hello"
  // -> " hello", a continuation "llo" as is). Control tokens give "".
  // May be an incomplete UTF-8 sequence; callers buffer (see Detokenizer).
  virtual std::string TokenToPiece(TokenId id) const = 0;
  // Concatenated pieces; the SPM (and WordPiece) leading space of the first
  // non-control token is dropped, so Decode(Encode(s, add_bos)) == s for
  // ordinary text -- except for WordPiece, which loses case, accents and
  // spacing ("Hello, World!" -> "hello , world !"; no HF-style cleanup).
  virtual std::string Decode(absl::Span<const TokenId> ids) const = 0;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token_text(TokenId id) const { return tokens_[id]; }
  TokenType token_type(TokenId id) const { return types_[id]; }
  TokenId bos_id() const { return bos_id_; }  // -1 when none
  TokenId eos_id() const { return eos_id_; }  // -1 when none
  TokenId eot_id() const { return eot_id_; }  // -1 when none
  // The separator Encode appends with BOS: BERT's [SEP] (-1 when none, or when
  // tokenizer.ggml.add_eos_token is false).
  TokenId sep_id() const { return sep_id_; }
  const FimIds& fim_ids() const { return fim_ids_; }
  // End-of-generation ids: eos plus eot / eom / im_end style tokens the vocab
  // defines, and (as llama.cpp) the FIM pad, repo and file-separator tokens.
  const std::vector<TokenId>& eog_ids() const { return eog_ids_; }
  bool add_bos() const { return add_bos_; }
  bool IsEog(TokenId id) const;

 protected:
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  TokenId bos_id_ = -1;
  TokenId eos_id_ = -1;
  TokenId eot_id_ = -1;
  TokenId sep_id_ = -1;
  FimIds fim_ids_;
  std::vector<TokenId> eog_ids_;
  bool add_bos_ = false;
};

// Incremental detokenizer: feed ids one at a time, get the text that is
// complete so far. Never splits a UTF-8 code point; bytes of an incomplete
// sequence are held until it completes (or Flush()).
class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string Push(TokenId id);
  std::string Flush();  // pending bytes, invalid ones as U+FFFD

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace tandem::engine
