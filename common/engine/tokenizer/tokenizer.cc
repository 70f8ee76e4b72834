#include "common/engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/utf8.h"
#include "common/engine/tokenizer/internal/tokenizer_vocab.h"
#include "common/engine/tokenizer/internal/unicode.h"
#include "common/engine/tokenizer/internal/wpm_tokenizer.h"

// The algorithms follow llama.cpp's src/llama-vocab.cpp (llm_tokenizer_spm,
// llm_tokenizer_bpe, llm_tokenizer_wpm, tokenizer_st_partition, token_to_piece) so that ids match
// it exactly. Deliberate differences are marked "Unlike llama.cpp".

namespace tandem::engine {
namespace internal {
namespace {

constexpr char kEscapedSpace[] = "\xE2\x96\x81";     // U+2581, SentencePiece's space
constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD

constexpr char kKeyArchitecture[] = "general.architecture";
constexpr char kKeyName[] = "general.name";
constexpr char kKeyModel[] = "tokenizer.ggml.model";
constexpr char kKeyPre[] = "tokenizer.ggml.pre";
constexpr char kKeyTokens[] = "tokenizer.ggml.tokens";
constexpr char kKeyScores[] = "tokenizer.ggml.scores";
constexpr char kKeyTokenType[] = "tokenizer.ggml.token_type";
constexpr char kKeyMerges[] = "tokenizer.ggml.merges";
constexpr char kKeyBos[] = "tokenizer.ggml.bos_token_id";
constexpr char kKeyEos[] = "tokenizer.ggml.eos_token_id";
constexpr char kKeyUnk[] = "tokenizer.ggml.unknown_token_id";
constexpr char kKeyEot[] = "tokenizer.ggml.eot_token_id";
constexpr char kKeyEom[] = "tokenizer.ggml.eom_token_id";
constexpr char kKeyFimPre[] = "tokenizer.ggml.fim_pre_token_id";
constexpr char kKeyFimSuf[] = "tokenizer.ggml.fim_suf_token_id";
constexpr char kKeyFimMid[] = "tokenizer.ggml.fim_mid_token_id";
constexpr char kKeyFimPad[] = "tokenizer.ggml.fim_pad_token_id";
constexpr char kKeyFimRep[] = "tokenizer.ggml.fim_rep_token_id";
constexpr char kKeyFimSep[] = "tokenizer.ggml.fim_sep_token_id";
constexpr char kKeyAddBos[] = "tokenizer.ggml.add_bos_token";
constexpr char kKeyAddEos[] = "tokenizer.ggml.add_eos_token";
constexpr char kKeyCls[] = "tokenizer.ggml.cls_token_id";
constexpr char kKeySep[] = "tokenizer.ggml.seperator_token_id";  // sic, as llama.cpp
constexpr char kKeyAddSpacePrefix[] = "tokenizer.ggml.add_space_prefix";

// --- GGUF metadata -----------------------------------------------------------------

std::string DescribeType(const GgufValue& v) {
  if (v.type == GgufValueType::kArray) {
    return absl::StrCat("array of ", GgufValueTypeName(v.array_type));
  }
  return GgufValueTypeName(v.type);
}

absl::Status WrongType(absl::string_view key, absl::string_view expected, const GgufValue& v) {
  return absl::InvalidArgumentError(
      absl::StrCat(key, ": expected ", expected, ", found ", DescribeType(v)));
}

// Integer value of `v` (an integer type; uint64 lives in `u`), saturated to int64.
int64_t IntValue(const GgufValue& v) {
  if (v.type == GgufValueType::kUint64) {
    return v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(v.u);
  }
  return v.i;
}

const GgufValue* Find(const std::map<std::string, GgufValue>& md, absl::string_view key) {
  auto it = md.find(std::string(key));
  return it == md.end() ? nullptr : &it->second;
}

absl::StatusOr<std::optional<std::string>> OptionalString(
    const std::map<std::string, GgufValue>& md, absl::string_view key) {
  const GgufValue* v = Find(md, key);
  if (v == nullptr) {
    return std::optional<std::string>();
  }
  if (v->type != GgufValueType::kString) {
    return WrongType(key, "string", *v);
  }
  return std::optional<std::string>(v->str);
}

absl::StatusOr<std::optional<int64_t>> OptionalInt(const std::map<std::string, GgufValue>& md,
                                                   absl::string_view key) {
  const GgufValue* v = Find(md, key);
  if (v == nullptr) {
    return std::optional<int64_t>();
  }
  if (!IsGgufIntegerType(v->type)) {
    return WrongType(key, "an integer", *v);
  }
  return std::optional<int64_t>(IntValue(*v));
}

absl::StatusOr<std::optional<bool>> OptionalBool(const std::map<std::string, GgufValue>& md,
                                                 absl::string_view key) {
  const GgufValue* v = Find(md, key);
  if (v == nullptr) {
    return std::optional<bool>();
  }
  if (v->type != GgufValueType::kBool) {
    return WrongType(key, "bool", *v);
  }
  return std::optional<bool>(v->i != 0);
}

absl::StatusOr<const GgufValue*> OptionalArray(const std::map<std::string, GgufValue>& md,
                                               absl::string_view key,
                                               bool (*element_ok)(GgufValueType),
                                               absl::string_view expected) {
  const GgufValue* v = Find(md, key);
  if (v == nullptr) {
    return nullptr;
  }
  if (v->type != GgufValueType::kArray || !element_ok(v->array_type)) {
    return WrongType(key, expected, *v);
  }
  return v;
}

bool IsStringType(GgufValueType t) { return t == GgufValueType::kString; }
bool IsNumberType(GgufValueType t) { return IsGgufIntegerType(t) || IsGgufFloatType(t); }

absl::StatusOr<std::vector<std::string>> StringArray(const std::map<std::string, GgufValue>& md,
                                                     absl::string_view key, bool required) {
  ASSIGN_OR_RETURN(const GgufValue* v, OptionalArray(md, key, IsStringType, "array of string"));
  std::vector<std::string> out;
  if (v == nullptr) {
    if (required) {
      return absl::InvalidArgumentError(absl::StrCat("missing ", key, " (array of string)"));
    }
    return out;
  }
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    out.push_back(e.str);
  }
  return out;
}

// --- pre-tokenizers ------------------------------------------------------------------

struct PreTokenizerEntry {
  const char* name;
  std::vector<SplitRule> rules;
  bool ignore_merges;
  bool add_bos;
};

const std::vector<PreTokenizerEntry>& PreTokenizerTable() {
  using R = SplitRule;
  static const auto* table = new std::vector<PreTokenizerEntry>{
      // llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT regex list for BPE vocabs.
      {"default",
       {R::kPunctuationRuns, R::kGpt2, R::kNumberRuns, R::kAsciiDigitTriples},
       false,
       false},
      {"gpt-2", {R::kGpt2}, false, false},
      {"phi-2", {R::kGpt2}, false, false},
      {"mpt", {R::kGpt2}, false, false},
      {"olmo", {R::kGpt2}, false, false},
      {"jais", {R::kGpt2}, false, false},
      {"exaone4", {R::kGpt2}, false, false},
      {"llama3", {R::kLlama3}, true, true},
      {"llama-v3", {R::kLlama3}, true, true},
      {"llama-bpe", {R::kLlama3}, true, true},
      {"falcon3", {R::kLlama3}, true, true},
      {"falcon-h1", {R::kLlama3}, true, true},
      {"pixtral", {R::kLlama3}, true, true},
      {"dbrx", {R::kLlama3}, false, false},
      {"smaug-bpe", {R::kLlama3}, false, false},
      {"qwen2", {R::kQwen2}, false, false},
      {"deepseek-r1-qwen", {R::kQwen2}, false, false},
      {"megrez", {R::kQwen2}, false, false},
      {"stablelm2", {R::kQwen2}, false, false},
      {"starcoder", {R::kSingleNumbers, R::kGpt2}, false, false},
      {"refact", {R::kSingleNumbers, R::kGpt2}, false, false},
      {"command-r", {R::kSingleNumbers, R::kGpt2}, false, false},
      {"smollm", {R::kSingleNumbers, R::kGpt2}, false, false},
      {"codeshell", {R::kSingleNumbers, R::kGpt2}, false, false},
      {"exaone", {R::kSingleNumbers, R::kGpt2}, false, false},
      {"minerva-7b", {R::kSingleNumbers, R::kGpt2}, false, false},
  };
  return *table;
}

// --- the tokenizers ---------------------------------------------------------------

// Per-token strip attributes (llama.cpp's LLAMA_TOKEN_ATTR_LSTRIP / RSTRIP).
constexpr uint8_t kLstrip = 1;
constexpr uint8_t kRstrip = 2;

struct Fragment {
  TokenId token;  // -1: raw text [offset, offset + length)
  size_t offset;
  size_t length;
};

// "▁" -> " " (the SPM and WPM pieces of normal tokens).
std::string UnescapeSpaces(const std::string& token_text) {
  std::string out;
  out.reserve(token_text.size());
  for (size_t pos = 0; pos < token_text.size();) {
    if (token_text.compare(pos, 3, kEscapedSpace) == 0) {
      out.push_back(' ');
      pos += 3;
    } else {
      out.push_back(token_text[pos++]);
    }
  }
  return out;
}

// What SPM, BPE and WPM share: the vocabulary, special-token splitting, pieces.
class VocabTokenizer : public Tokenizer {
 public:
  friend absl::StatusOr<std::unique_ptr<Tokenizer>> internal::MakeTokenizer(VocabSpec spec);

  using Tokenizer::Encode;
  absl::StatusOr<std::vector<TokenId>> Encode(absl::string_view text, bool add_bos,
                                              bool parse_special,
                                              absl::Span<const TextRange> literal) const final {
    RETURN_IF_ERROR(ValidateUtf8(text));
    for (size_t i = 0; i < literal.size(); ++i) {
      if (literal[i].begin > literal[i].end || literal[i].end > text.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("literal range ", i, " [", literal[i].begin, ", ", literal[i].end,
                         ") is not inside the text (", text.size(), " bytes)"));
      }
    }
    std::vector<TokenId> out;
    if (add_bos && bos_id_ >= 0) {
      out.push_back(bos_id_);
    }
    if (!text.empty()) {
      EncodeFragments(text, Partition(text, parse_special, literal), &out);
    }
    if (add_bos && sep_id_ >= 0) {
      out.push_back(sep_id_);
    }
    return out;
  }

  std::string TokenToPiece(TokenId id) const final {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }

  std::string Decode(absl::Span<const TokenId> ids) const final {
    std::string out;
    // Unlike llama.cpp, where the first token consumes the strip even when it
    // is BOS (whose piece is empty), the strip waits for the first non-empty
    // piece, so Decode(Encode(s, /*add_bos=*/true, ...)) == s too.
    bool strip_space = add_space_prefix_;
    for (TokenId id : ids) {
      if (id < 0 || id >= vocab_size()) {
        continue;
      }
      absl::string_view piece = pieces_[id];
      if (strip_space && !piece.empty()) {
        if (piece[0] == ' ') {
          piece.remove_prefix(1);
        }
        strip_space = false;
      }
      out.append(piece.data(), piece.size());
    }
    return out;
  }

  // Fills the derived tables once tokens_, types_ and the special ids are final.
  void Finish() {
    for (TokenId id = 0; id < vocab_size(); ++id) {
      const TokenType t = types_[id];
      if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) {
        special_tokens_.push_back(id);
      }
    }
    // Longest first, so "<|im_end|>" wins over a "<|im" prefix token.
    std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                     [&](TokenId a, TokenId b) { return tokens_[a].size() > tokens_[b].size(); });
    pieces_.resize(tokens_.size());
    for (TokenId id = 0; id < vocab_size(); ++id) {
      pieces_[id] = MakePiece(id);
    }
  }

 protected:
  absl::flat_hash_map<std::string, TokenId> token_to_id_;
  std::vector<float> scores_;
  TokenId unk_id_ = -1;
  // SPM: "▁" before text that starts the input or follows a special; SPM and
  // WPM: Decode drops the first piece's leading space.
  bool add_space_prefix_ = false;

  TokenId Lookup(absl::string_view text) const {
    auto it = token_to_id_.find(text);
    return it == token_to_id_.end() ? -1 : it->second;
  }

  // Tokenizes the fragments in order; raw ones through the model.
  virtual void EncodeFragments(absl::string_view text, const std::vector<Fragment>& fragments,
                               std::vector<TokenId>* out) const = 0;
  // The decoded bytes of a normal token.
  virtual std::string NormalPiece(const std::string& token_text) const = 0;

 private:
  std::string MakePiece(TokenId id) const {
    const std::string& text = tokens_[id];
    switch (types_[id]) {
      case TokenType::kNormal:
        return NormalPiece(text);
      case TokenType::kUserDefined:
        return text;
      case TokenType::kByte: {
        // "<0xXX>"
        if (text.size() == 6 && absl::StartsWith(text, "<0x") && text[5] == '>') {
          int value = 0;
          for (char c : text.substr(3, 2)) {  // a non-hex digit counts as 0
            const char u = absl::ascii_toupper(static_cast<unsigned char>(c));
            const int digit = !absl::ascii_isxdigit(u) ? 0
                              : absl::ascii_isdigit(u) ? u - '0'
                                                       : u - 'A' + 10;
            value = value * 16 + digit;
          }
          return std::string(1, static_cast<char>(value));
        }
        return std::string();
      }
      default:  // control, unknown, unused, undefined: nothing, as llama.cpp with special=false
        return std::string();
    }
  }

  // Splits `text` around special tokens (llama.cpp's tokenizer_st_partition):
  // for each special token, longest first, every occurrence in the raw
  // fragments becomes a token fragment. Control and unknown tokens only when
  // `parse_special`, and never where they overlap a `literal` range;
  // user-defined ones always. A token with lstrip / rstrip drops the
  // whitespace (C isspace) of the raw text just before / after it.
  std::vector<Fragment> Partition(absl::string_view text, bool parse_special,
                                  absl::Span<const TextRange> literal) const {
    std::vector<Fragment> fragments = {{-1, 0, text.size()}};
    std::vector<Fragment> next;
    for (TokenId id : special_tokens_) {
      const TokenType type = types_[id];
      const bool needs_parse_special = type == TokenType::kControl || type == TokenType::kUnknown;
      if (needs_parse_special && !parse_special) {
        continue;
      }
      const std::string& special = tokens_[id];
      if (text.find(special) == absl::string_view::npos) {
        continue;
      }
      auto in_literal = [&](size_t begin) {
        return needs_parse_special &&
               std::any_of(literal.begin(), literal.end(), [&](const TextRange& r) {
                 return begin < r.end && r.begin < begin + special.size();
               });
      };
      next.clear();
      for (const Fragment& f : fragments) {
        if (f.token >= 0) {
          next.push_back(f);
          continue;
        }
        const absl::string_view window = text.substr(0, f.offset + f.length);
        size_t pos = f.offset;   // the raw text not yet emitted starts here
        size_t from = f.offset;  // the next search starts here
        while (true) {
          const size_t match = window.find(special, from);
          if (match == absl::string_view::npos) {
            break;
          }
          if (in_literal(match)) {
            from = match + 1;
            continue;
          }
          size_t left_end = match;
          if (strip_[id] & kLstrip) {
            while (left_end > pos && IsCSpace(text[left_end - 1])) {
              --left_end;
            }
          }
          if (left_end > pos) {
            next.push_back({-1, pos, left_end - pos});
          }
          next.push_back({id, match, special.size()});
          pos = match + special.size();
          if (strip_[id] & kRstrip) {
            while (pos < f.offset + f.length && IsCSpace(text[pos])) {
              ++pos;
            }
          }
          from = pos;
        }
        if (pos < f.offset + f.length) {
          next.push_back({-1, pos, f.offset + f.length - pos});
        }
      }
      fragments.swap(next);
    }
    return fragments;
  }

  static bool IsCSpace(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
  }

  std::vector<TokenId> special_tokens_;  // control, user-defined and unknown; longest first
  std::vector<std::string> pieces_;
  std::vector<uint8_t> strip_;  // per token: kLstrip | kRstrip
};

// SentencePiece-style BPE over token scores (llm_tokenizer_spm).
class SpmTokenizer final : public VocabTokenizer {
 public:
  void InitBytes() {
    for (int b = 0; b < 256; ++b) {
      TokenId id = Lookup(absl::StrFormat("<0x%02X>", b));
      if (id < 0) {
        id = Lookup(std::string(1, static_cast<char>(b)));
      }
      // Unlike llama.cpp, which throws when neither exists, fall back to <unk>.
      byte_tokens_[b] = id >= 0 ? id : unk_id_;
    }
  }

 protected:
  void EncodeFragments(absl::string_view text, const std::vector<Fragment>& fragments,
                       std::vector<TokenId>* out) const override {
    bool prev_special = true;  // the text start counts as after a special token
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        out->push_back(f.token);
        prev_special = true;
        continue;
      }
      std::string escaped;
      escaped.reserve(f.length + 8);
      if (add_space_prefix_ && prev_special) {
        escaped += kEscapedSpace;
      }
      for (char c : text.substr(f.offset, f.length)) {
        if (c == ' ') {
          escaped += kEscapedSpace;
        } else {
          escaped.push_back(c);
        }
      }
      EncodeEscaped(escaped, out);
      prev_special = false;
    }
  }

  std::string NormalPiece(const std::string& token_text) const override {
    return UnescapeSpaces(token_text);
  }

 private:
  struct Symbol {
    int prev;
    int next;
    size_t offset;
    size_t length;  // 0 once merged into its left neighbour
  };
  struct Bigram {
    int left;
    int right;
    float score;
    size_t size;
  };
  // Highest score first; ties go to the leftmost pair.
  struct BigramOrder {
    bool operator()(const Bigram& l, const Bigram& r) const {
      return l.score < r.score || (l.score == r.score && l.left > r.left);
    }
  };

  void EncodeEscaped(const std::string& text, std::vector<TokenId>* out) const {
    std::vector<Symbol> symbols;
    for (size_t offset = 0; offset < text.size();) {
      const size_t len = std::min(Utf8SequenceLength(text[offset]), text.size() - offset);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({index - 1, offset + len == text.size() ? -1 : index + 1, offset, len});
      offset += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) {
        return;
      }
      const size_t size = symbols[left].length + symbols[right].length;
      const TokenId id = Lookup(absl::string_view(text).substr(symbols[left].offset, size));
      if (id < 0) {
        return;
      }
      queue.push({left, right, scores_[id], size});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) {
      try_add(i - 1, i);
    }
    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      // Stale: one side was merged away since the pair was queued.
      if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.size) {
        continue;
      }
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) {
        symbols[right.next].prev = bigram.left;
      }
      try_add(left.prev, bigram.left);
      try_add(bigram.left, left.next);
    }
    // Every merged symbol is a token (pairs are only queued when they are);
    // a lone character that isn't falls back to its bytes. (llama.cpp's
    // rev_merge re-split can't trigger for valid UTF-8, so it is left out.)
    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
      const Symbol& s = symbols[i];
      const absl::string_view piece = absl::string_view(text).substr(s.offset, s.length);
      const TokenId id = Lookup(piece);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
      for (char c : piece) {
        const TokenId byte_id = byte_tokens_[static_cast<uint8_t>(c)];
        if (byte_id >= 0) {
          out->push_back(byte_id);
        }
      }
    }
  }

  TokenId byte_tokens_[256];
};

// Byte-level BPE over merge ranks with a regex pre-tokenizer (llm_tokenizer_bpe).
class BpeTokenizer final : public VocabTokenizer {
 public:
  friend absl::StatusOr<std::unique_ptr<Tokenizer>> internal::MakeTokenizer(VocabSpec spec);

 protected:
  void EncodeFragments(absl::string_view text, const std::vector<Fragment>& fragments,
                       std::vector<TokenId>* out) const override {
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        out->push_back(f.token);
        continue;
      }
      for (const std::string& word : SplitWords(text.substr(f.offset, f.length), pre_.rules)) {
        EncodeWord(ByteEncode(word), out);
      }
    }
  }

  std::string NormalPiece(const std::string& token_text) const override {
    std::string out;
    out.reserve(token_text.size());
    for (uint32_t cp : CodepointsFromUtf8(token_text)) {
      const int byte = UnicodeToByte(cp);
      if (byte >= 0) {
        out.push_back(static_cast<char>(byte));
      } else {
        // Unlike llama.cpp ("[UNK_BYTE_0x...]"), keep a code point outside
        // the byte mapping as itself.
        AppendUtf8(cp, &out);
      }
    }
    return out;
  }

 private:
  struct Symbol {
    int prev;
    int next;
    size_t offset;
    size_t length;
  };
  struct Bigram {
    int left;
    int right;
    int rank;
    std::string text;
  };
  // Lowest rank first; ties go to the leftmost pair.
  struct BigramOrder {
    bool operator()(const Bigram& l, const Bigram& r) const {
      return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
    }
  };

  absl::flat_hash_map<std::string, int> ranks_;  // "left right" -> merge rank
  PreTokenizer pre_;

  void EncodeWord(const std::string& word, std::vector<TokenId>* out) const {
    if (pre_.ignore_merges) {
      if (const TokenId id = Lookup(word); id >= 0) {
        out->push_back(id);
        return;
      }
    }
    std::vector<Symbol> symbols;
    for (size_t offset = 0; offset < word.size();) {
      const size_t len = std::min(Utf8SequenceLength(word[offset]), word.size() - offset);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({index - 1, offset + len == word.size() ? -1 : index + 1, offset, len});
      offset += len;
    }
    const absl::string_view w(word);
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    std::string key;
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) {
        return;
      }
      const absl::string_view l = w.substr(symbols[left].offset, symbols[left].length);
      const absl::string_view r = w.substr(symbols[right].offset, symbols[right].length);
      key.assign(l.data(), l.size());
      key.push_back(' ');
      key.append(r.data(), r.size());
      auto it = ranks_.find(key);
      if (it == ranks_.end()) {
        return;
      }
      queue.push({left, right, it->second, absl::StrCat(l, r)});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) {
      try_add(i - 1, i);
    }
    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      if (left.length == 0 || right.length == 0 ||
          left.length + right.length != bigram.text.size() ||
          w.substr(left.offset, left.length + right.length) != bigram.text) {
        continue;  // stale
      }
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) {
        symbols[right.next].prev = bigram.left;
      }
      try_add(left.prev, bigram.left);
      try_add(bigram.left, left.next);
    }
    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
      const Symbol& s = symbols[i];
      const absl::string_view piece = w.substr(s.offset, s.length);
      if (const TokenId id = Lookup(piece); id >= 0) {
        out->push_back(id);
        continue;
      }
      // As llama.cpp: each byte of the (byte-encoded) text as a one-byte token
      // where one exists; others are dropped.
      for (char c : piece) {
        if (const TokenId id = Lookup(absl::string_view(&c, 1)); id >= 0) {
          out->push_back(id);
        }
      }
    }
  }
};

// WordPiece for BERT vocabularies (llm_tokenizer_wpm; the word splitting and
// matching follow Hugging Face, see internal/wpm_tokenizer.h).
class WpmTokenizer final : public VocabTokenizer {
 public:
  friend absl::StatusOr<std::unique_ptr<Tokenizer>> internal::MakeTokenizer(VocabSpec spec);

 protected:
  void EncodeFragments(absl::string_view text, const std::vector<Fragment>& fragments,
                       std::vector<TokenId>* out) const override {
    auto lookup = [this](absl::string_view piece) { return Lookup(piece); };
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        out->push_back(f.token);
        continue;
      }
      for (const std::string& word : WpmSplitWords(text.substr(f.offset, f.length))) {
        WpmEncodeWord(word, lookup, max_token_bytes_, unk_id_, out);
      }
    }
  }

  std::string NormalPiece(const std::string& token_text) const override {
    return UnescapeSpaces(token_text);
  }

 private:
  size_t max_token_bytes_ = 0;
};

TokenType ToTokenType(int32_t t) {
  return t >= 0 && t <= static_cast<int32_t>(TokenType::kByte) ? static_cast<TokenType>(t)
                                                               : TokenType::kUndefined;
}

bool IsOneOf(absl::string_view text, std::initializer_list<absl::string_view> set) {
  return std::find(set.begin(), set.end(), text) != set.end();
}

}  // namespace

absl::StatusOr<PreTokenizer> LookupPreTokenizer(absl::string_view name) {
  if (name.empty()) {
    name = "default";
  }
  for (const PreTokenizerEntry& e : PreTokenizerTable()) {
    if (name == e.name) {
      return PreTokenizer{e.rules, e.ignore_merges, e.add_bos};
    }
  }
  std::vector<std::string> known;
  for (const PreTokenizerEntry& e : PreTokenizerTable()) {
    known.push_back(e.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(kKeyPre, ": unknown pre-tokenizer '", name,
                                                 "'; known: ", absl::StrJoin(known, ", ")));
}

absl::StatusOr<VocabSpec> VocabSpecFromMetadata(const std::map<std::string, GgufValue>& md) {
  VocabSpec spec;
  ASSIGN_OR_RETURN(std::optional<std::string> model, OptionalString(md, kKeyModel));
  if (!model.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("missing ", kKeyModel, " (string)"));
  }
  spec.model = *model;
  ASSIGN_OR_RETURN(spec.pre, OptionalString(md, kKeyPre));
  ASSIGN_OR_RETURN(std::optional<std::string> architecture, OptionalString(md, kKeyArchitecture));
  ASSIGN_OR_RETURN(std::optional<std::string> name, OptionalString(md, kKeyName));
  spec.architecture = architecture.value_or("");
  spec.name = name.value_or("");
  ASSIGN_OR_RETURN(spec.tokens, StringArray(md, kKeyTokens, /*required=*/true));
  // Only the BPE model needs merges; for others they are ignored.
  ASSIGN_OR_RETURN(spec.merges, StringArray(md, kKeyMerges, /*required=*/spec.model == "gpt2"));

  ASSIGN_OR_RETURN(const GgufValue* scores,
                   OptionalArray(md, kKeyScores, IsNumberType, "array of float32"));
  if (scores != nullptr) {
    spec.scores.reserve(scores->array.size());
    for (const GgufValue& e : scores->array) {
      spec.scores.push_back(IsGgufFloatType(e.type) ? static_cast<float>(e.f)
                                                    : static_cast<float>(IntValue(e)));
    }
  }
  ASSIGN_OR_RETURN(const GgufValue* types,
                   OptionalArray(md, kKeyTokenType, IsGgufIntegerType, "array of int32"));
  if (types != nullptr) {
    spec.token_types.reserve(types->array.size());
    for (const GgufValue& e : types->array) {
      const int64_t t = IntValue(e);
      spec.token_types.push_back(
          t < 0 || t > std::numeric_limits<int32_t>::max() ? -1 : static_cast<int32_t>(t));
    }
  }
  ASSIGN_OR_RETURN(spec.bos_id, OptionalInt(md, kKeyBos));
  ASSIGN_OR_RETURN(spec.eos_id, OptionalInt(md, kKeyEos));
  ASSIGN_OR_RETURN(spec.unk_id, OptionalInt(md, kKeyUnk));
  ASSIGN_OR_RETURN(spec.eot_id, OptionalInt(md, kKeyEot));
  ASSIGN_OR_RETURN(spec.eom_id, OptionalInt(md, kKeyEom));
  ASSIGN_OR_RETURN(spec.fim_pre_id, OptionalInt(md, kKeyFimPre));
  ASSIGN_OR_RETURN(spec.fim_suf_id, OptionalInt(md, kKeyFimSuf));
  ASSIGN_OR_RETURN(spec.fim_mid_id, OptionalInt(md, kKeyFimMid));
  ASSIGN_OR_RETURN(spec.fim_pad_id, OptionalInt(md, kKeyFimPad));
  ASSIGN_OR_RETURN(spec.fim_rep_id, OptionalInt(md, kKeyFimRep));
  ASSIGN_OR_RETURN(spec.fim_sep_id, OptionalInt(md, kKeyFimSep));
  ASSIGN_OR_RETURN(spec.cls_id, OptionalInt(md, kKeyCls));
  ASSIGN_OR_RETURN(spec.sep_id, OptionalInt(md, kKeySep));
  ASSIGN_OR_RETURN(spec.add_bos, OptionalBool(md, kKeyAddBos));
  ASSIGN_OR_RETURN(spec.add_eos, OptionalBool(md, kKeyAddEos));
  ASSIGN_OR_RETURN(spec.add_space_prefix, OptionalBool(md, kKeyAddSpacePrefix));
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(VocabSpec spec) {
  const bool spm = spec.model == "llama";
  const bool bpe = spec.model == "gpt2";
  const bool wpm = spec.model == "bert";
  if (!spm && !bpe && !wpm) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKeyModel, ": unsupported tokenizer model '", spec.model,
                     "'; supported: 'llama' (SentencePiece BPE with byte fallback), 'gpt2' "
                     "(byte-level BPE), 'bert' (WordPiece)"));
  }
  const size_t n = spec.tokens.size();
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kKeyTokens, ": no tokens"));
  }
  if (n > static_cast<size_t>(std::numeric_limits<TokenId>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(kKeyTokens, ": too many tokens (", n, ")"));
  }
  if (!spec.scores.empty() && spec.scores.size() < n) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKeyScores, ": ", spec.scores.size(), " entries for ", n, " tokens"));
  }
  if (!spec.token_types.empty() && spec.token_types.size() < n) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKeyTokenType, ": ", spec.token_types.size(), " entries for ", n, " tokens"));
  }

  std::unique_ptr<VocabTokenizer> tok;
  BpeTokenizer* bpe_tok = nullptr;
  SpmTokenizer* spm_tok = nullptr;
  WpmTokenizer* wpm_tok = nullptr;
  if (spm) {
    auto t = std::make_unique<SpmTokenizer>();
    spm_tok = t.get();
    tok = std::move(t);
  } else if (wpm) {
    auto t = std::make_unique<WpmTokenizer>();
    wpm_tok = t.get();
    tok = std::move(t);
  } else {
    auto t = std::make_unique<BpeTokenizer>();
    bpe_tok = t.get();
    ASSIGN_OR_RETURN(t->pre_, LookupPreTokenizer(spec.pre.value_or("")));
    for (size_t i = 0; i < spec.merges.size(); ++i) {
      const std::string& merge = spec.merges[i];
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) {
        continue;  // llama.cpp keeps it as a pair that never matches
      }
      t->ranks_.emplace(merge, static_cast<int>(i));  // the first rank wins
    }
    tok = std::move(t);
  }

  tok->tokens_ = std::move(spec.tokens);
  tok->types_.resize(n, TokenType::kNormal);
  tok->scores_.resize(n, 0.0f);
  tok->token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string& text = tok->tokens_[i];
    if (text.empty()) {
      text = absl::StrCat("[EMPTY_", i, "]");  // as llama.cpp
    }
    if (wpm_tok != nullptr) {
      wpm_tok->max_token_bytes_ = std::max(wpm_tok->max_token_bytes_, text.size());
    }
    auto [it, inserted] = tok->token_to_id_.emplace(text, static_cast<TokenId>(i));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(kKeyTokens, ": duplicate token '", text,
                                                     "' at ids ", it->second, " and ", i));
    }
    if (!spec.token_types.empty()) {
      tok->types_[i] = ToTokenType(spec.token_types[i]);
    }
    if (!spec.scores.empty()) {
      tok->scores_[i] = spec.scores[i];
    }
  }

  // Special ids: llama.cpp's per-model defaults (a default outside the vocab
  // means none), overridden by the metadata when inside it.
  const TokenId vocab = static_cast<TokenId>(n);
  auto resolve = [&](TokenId fallback, const std::optional<int64_t>& value) {
    TokenId id = fallback < vocab ? fallback : -1;
    if (value.has_value() && *value >= 0 && *value < vocab) {
      id = static_cast<TokenId>(*value);
    }
    return id;
  };
  // llama.cpp's BPE defaults are 11 (from Falcon); real GGUFs set both keys.
  // BERT's BOS is [CLS] (tokenizer.ggml.cls_token_id in older GGUFs), its
  // [SEP] follows the text.
  if (wpm) {
    tok->bos_id_ = resolve(resolve(101, spec.cls_id), spec.bos_id);
    tok->eos_id_ = resolve(-1, spec.eos_id);
    tok->unk_id_ = resolve(100, spec.unk_id);
    tok->sep_id_ = spec.add_eos.value_or(true) ? resolve(102, spec.sep_id) : -1;
    if (tok->unk_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kKeyUnk, ": a 'bert' (WordPiece) vocab needs an unknown token"));
    }
  } else {
    tok->bos_id_ = resolve(spm ? 1 : 11, spec.bos_id);
    tok->eos_id_ = resolve(spm ? 2 : 11, spec.eos_id);
    tok->unk_id_ = resolve(spm ? 0 : -1, spec.unk_id);
  }
  TokenId eot_id = resolve(-1, spec.eot_id);
  TokenId eom_id = resolve(-1, spec.eom_id);
  FimIds& fim = tok->fim_ids_;
  fim.prefix = resolve(-1, spec.fim_pre_id);
  fim.suffix = resolve(-1, spec.fim_suf_id);
  fim.middle = resolve(-1, spec.fim_mid_id);
  fim.pad = resolve(-1, spec.fim_pad_id);
  fim.repo = resolve(-1, spec.fim_rep_id);
  fim.file_sep = resolve(-1, spec.fim_sep_id);

  tok->add_bos_ = spec.add_bos.value_or(bpe ? bpe_tok->pre_.add_bos : true);
  if (tok->add_bos_ && tok->bos_id_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKeyAddBos, " is true, but ", kKeyBos, " is not set"));
  }
  // Only SPM adds the prefix space; Decode strips it, and WPM's phantom space.
  tok->add_space_prefix_ = wpm || (spm && spec.add_space_prefix.value_or(true));

  // EOT, EOM and FIM tokens the metadata does not name, found by token text as
  // llama.cpp does. Unlike llama.cpp, which takes whichever match its hash map
  // yields first, the first text of the list wins ("<|im_end|>" over
  // "<|endoftext|>"). Such tokens are forced to control type so they
  // never print and only parse as special.
  auto force_control = [&](TokenId id) { tok->types_[id] = TokenType::kControl; };
  const std::pair<TokenId*, std::vector<absl::string_view>> by_text[] = {
      {&eot_id,
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>",
        "<\xEF\xBD\x9C"
        "end\xE2\x96\x81of\xE2\x96\x81sentence"
        "\xEF\xBD\x9C>",
        "<end_of_utterance>"}},
      {&eom_id, {"<|eom_id|>"}},
      {&fim.prefix,
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "begin\xEF\xBD\x9C>",
        "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>"}},
      {&fim.suffix,
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
        "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>"}},
      {&fim.middle,
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "end\xEF\xBD\x9C>",
        "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>"}},
      {&fim.pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}},
      {&fim.repo, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&fim.file_sep, {"<|file_sep|>"}},
  };
  for (const auto& [id, texts] : by_text) {
    if (*id >= 0) {
      continue;
    }
    for (absl::string_view text : texts) {
      if (const TokenId t = tok->Lookup(text); t >= 0) {
        *id = t;
        force_control(t);
        break;
      }
    }
  }
  std::vector<TokenId> eog;
  for (TokenId id = 0; id < vocab; ++id) {
    if (IsOneOf(tok->tokens_[id], {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                   "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
                                   "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"})) {
      eog.push_back(id);
      force_control(id);
    }
  }
  // As llama.cpp, FIM pad / repo / file-separator end generation too.
  for (TokenId id : {tok->eos_id_, eot_id, eom_id, fim.pad, fim.repo, fim.file_sep}) {
    if (id >= 0) {
      eog.push_back(id);
    }
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  tok->eog_ids_ = std::move(eog);
  tok->eot_id_ = eot_id;

  // Strip attributes: a GGUF has none, so (as llama.cpp) they are set by
  // model, pre-tokenizer and architecture name. No model served here today
  // (SmolLM2, Qwen2.5) gets any.
  tok->strip_.assign(n, 0);
  auto contains_any = [](absl::string_view s, std::initializer_list<absl::string_view> parts) {
    return std::any_of(parts.begin(), parts.end(),
                       [&](absl::string_view p) { return absl::StrContains(s, p); });
  };
  auto set_strip = [&](absl::string_view text, uint8_t bit, bool on) {
    if (const TokenId id = tok->Lookup(text); id >= 0) {
      tok->strip_[id] = on ? (tok->strip_[id] | bit) : (tok->strip_[id] & ~bit);
    }
  };
  if (contains_any(spec.pre.value_or(""), {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(spec.architecture, {"nomic-bert-moe", "jina-bert-v3"})) {
    set_strip("<mask>", kLstrip, true);
  } else if (contains_any(absl::AsciiStrToLower(spec.name), {"phi-3", "phi3"})) {
    for (TokenId id = 0; id < vocab; ++id) {
      const TokenType t = tok->types_[id];
      if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) {
        tok->strip_[id] |= kRstrip;
      }
    }
    set_strip("</s>", kRstrip, true);
    for (absl::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
      set_strip(text, kRstrip, false);
    }
  }

  tok->Finish();
  if (spm_tok != nullptr) {
    spm_tok->InitBytes();
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  ASSIGN_OR_RETURN(internal::VocabSpec spec, internal::VocabSpecFromMetadata(file.metadata()));
  return internal::MakeTokenizer(std::move(spec));
}

bool Tokenizer::IsEog(TokenId id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

namespace {

// Appends the complete sequences of `pending` to `out`, ill-formed ones as
// U+FFFD; returns how many bytes were consumed. A truncated sequence at the end
// stays unless `flush`.
size_t DrainUtf8(const std::string& pending, bool flush, std::string* out) {
  size_t pos = 0;
  while (pos < pending.size()) {
    const base::Utf8Sequence seq = base::DecodeUtf8(pending, pos);
    if (seq.status == base::Utf8Status::kOk) {
      out->append(pending, pos, seq.length);
    } else if (seq.status == base::Utf8Status::kIncomplete && !flush) {
      break;
    } else {
      out->append(internal::kReplacementChar);
    }
    pos += seq.length;
  }
  return pos;
}

}  // namespace

// Pieces are concatenated as llama.cpp streams them (common_token_to_piece):
// the Detokenizer continues a prompt, so it never strips the SPM prefix space
// that Decode drops at the start of a sequence.
std::string Detokenizer::Push(TokenId id) {
  pending_ += tokenizer_.TokenToPiece(id);
  std::string out;
  pending_.erase(0, DrainUtf8(pending_, /*flush=*/false, &out));
  return out;
}

std::string Detokenizer::Flush() {
  std::string out;
  DrainUtf8(pending_, /*flush=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace tandem::engine
