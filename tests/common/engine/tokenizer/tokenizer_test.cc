// Tokenizer tests: llama.cpp's own vocab test vectors (ids must match exactly),
// pre-tokenizer splits against the Python `regex` module
// (tests/reference/gen_pretokenizer_splits.py), synthetic vocabularies built
// with GgufWriter for BPE merging and special tokens, metadata errors, UTF-8
// validation and the incremental Detokenizer.

#include "common/engine/tokenizer/tokenizer.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/engine/format/gguf.h"
#include "common/engine/tokenizer/internal/tokenizer_vocab.h"
#include "common/engine/tokenizer/internal/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::RequireSharedFile;
using ::tandem::testing::RequireTestDataFile;
using ::tandem::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kVocabDir[] = "models/ggml-vocab/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// .inp: strings each followed by "\n__ggml_vocab_test__\n" (see PROVENANCE.md).
std::vector<std::string> ReadInp(const std::string& path) {
  const std::string text = ReadFile(path);
  std::vector<std::string> parts = absl::StrSplit(text, "\n__ggml_vocab_test__\n");
  if (!parts.empty() && parts.back().empty()) {
    parts.pop_back();
  }
  return parts;
}

// .out: line i holds the ids of string i, each preceded by a space.
std::vector<std::vector<TokenId>> ReadOut(const std::string& path) {
  std::vector<std::vector<TokenId>> out;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n')) {
    std::vector<TokenId> ids;
    for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      ids.push_back(std::stoi(std::string(field)));
    }
    out.push_back(std::move(ids));
  }
  if (!out.empty() && out.back().empty()) {
    out.pop_back();  // the final newline
  }
  return out;
}

std::string Ids(const std::vector<TokenId>& ids) { return absl::StrJoin(ids, " "); }

std::string Escaped(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

// Loads (once per process) the tokenizer of a GGUF under ../shared.
const Tokenizer* SharedTokenizer(const std::string& relative) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Tokenizer>>();
  auto it = cache->find(relative);
  if (it != cache->end()) {
    return it->second.get();
  }
  auto file = GgufFile::Open(RequireSharedFile(relative));
  if (!file.ok()) {
    ADD_FAILURE() << relative << ": " << file.status();
    return nullptr;
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << relative << ": " << tok.status();
    return nullptr;
  }
  return (*cache)[relative] = std::move(*tok), (*cache)[relative].get();
}

// Every .inp string must give exactly the .out ids (no BOS), as llama.cpp's
// test-tokenizer-0 (add_special = false, parse_special = true).
void ExpectVocabTestVectors(const std::string& vocab) {
  const Tokenizer* tok = SharedTokenizer(absl::StrCat(kVocabDir, vocab, ".gguf"));
  ASSERT_NE(tok, nullptr);
  const auto inputs = ReadInp(RequireSharedFile(absl::StrCat(kVocabDir, vocab, ".gguf.inp")));
  const auto expected = ReadOut(RequireSharedFile(absl::StrCat(kVocabDir, vocab, ".gguf.out")));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  int matched = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto ids = tok->Encode(inputs[i], /*add_bos=*/false, /*parse_special=*/true);
    ASSERT_OK(ids.status());
    if (*ids == expected[i]) {
      ++matched;
    } else {
      ADD_FAILURE() << vocab << " string " << i << " \"" << Escaped(inputs[i])
                    << "\"\n  got:      " << Ids(*ids) << "\n  expected: " << Ids(expected[i]);
    }
    // Byte fallback / byte-level BPE lose nothing, and Decode drops the SPM
    // prefix space again.
    EXPECT_EQ(tok->Decode(*ids), inputs[i]) << vocab << " string " << i;
  }
  EXPECT_EQ(matched, static_cast<int>(inputs.size()));
}

TEST(TokenizerVocabTest, LlamaSpmMatchesLlamaCpp) {
  ExpectVocabTestVectors("ggml-vocab-llama-spm");
}

TEST(TokenizerVocabTest, Gpt2MatchesLlamaCpp) { ExpectVocabTestVectors("ggml-vocab-gpt-2"); }

TEST(TokenizerVocabTest, LlamaSpmMetadata) {
  const Tokenizer* tok = SharedTokenizer("models/ggml-vocab/ggml-vocab-llama-spm.gguf");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_THAT(tok->eog_ids(), ElementsAre(2));
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_FALSE(tok->IsEog(1));
  EXPECT_EQ(tok->token_type(0), TokenType::kUnknown);
  EXPECT_EQ(tok->token_type(1), TokenType::kControl);
  EXPECT_EQ(tok->token_type(13), TokenType::kByte);
  EXPECT_EQ(tok->TokenToPiece(13), "\n");  // <0x0A>
  EXPECT_EQ(tok->TokenToPiece(1), "");     // control
  EXPECT_EQ(tok->TokenToPiece(0), "");     // unknown
  EXPECT_EQ(tok->TokenToPiece(15043), " Hello");

  ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode("Hello world", /*add_bos=*/true, false));
  EXPECT_THAT(ids, ElementsAre(1, 15043, 3186));
  EXPECT_EQ(tok->Decode(ids), "Hello world");
  // Special tokens only with parse_special; after one the prefix space is added again.
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("a</s>b", false, /*parse_special=*/true));
  EXPECT_THAT(ids, ElementsAre(263, 2, 289));
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("</s>", false, /*parse_special=*/false));
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(tok->Decode(ids), "</s>");
}

TEST(TokenizerVocabTest, Gpt2Metadata) {
  const Tokenizer* tok = SharedTokenizer("models/ggml-vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->bos_id(), 50256);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_THAT(tok->eog_ids(), ElementsAre(50256));
  EXPECT_EQ(tok->TokenToPiece(50256), "");
  EXPECT_EQ(tok->TokenToPiece(18435), " Hello");
  ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode("Hi<|endoftext|>", false, /*parse_special=*/true));
  EXPECT_EQ(ids.back(), 50256);
  EXPECT_EQ(ids.size(), 2u);
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("Hi<|endoftext|>", false, /*parse_special=*/false));
  EXPECT_NE(ids.back(), 50256);
  EXPECT_EQ(tok->Decode(ids), "Hi<|endoftext|>");
}

TEST(TokenizerVocabTest, BertIsRejectedWithSupportedKinds) {
  auto file = GgufFile::Open(RequireSharedFile("models/ggml-vocab/ggml-vocab-bert-bge.gguf"));
  ASSERT_OK(file.status());
  auto tok = Tokenizer::FromGguf(**file);
  EXPECT_THAT(tok, StatusIs(absl::StatusCode::kInvalidArgument,
                            ::testing::AllOf(HasSubstr("tokenizer.ggml.model"), HasSubstr("'bert'"),
                                             HasSubstr("'llama'"), HasSubstr("'gpt2'"))));
}

// --- stories260K ---------------------------------------------------------------------

TEST(TokenizerStoriesTest, RoundTripsAndMatchesGreedyReference) {
  const Tokenizer* tok = SharedTokenizer("models/stories260K/stories260K.gguf");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_THAT(tok->eog_ids(), ElementsAre(2));

  // The 256-step greedy text from PROVENANCE.md / reference_greedy.json.
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball.";
  ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode(text, /*add_bos=*/true, false));
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tok->Decode(ids), text);

  // reference_greedy.json: generated_ids starts 403 407 261 378 (and
  // logits_input_ids is [1, 403, 407, 261]): " Once upon a time".
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("Once upon a time", /*add_bos=*/true, false));
  EXPECT_THAT(ids, ElementsAre(1, 403, 407, 261, 378));

  // The greedy continuation streamed through the Detokenizer is the
  // reference text (pieces keep their leading space).
  const std::string json = ReadFile(RequireSharedFile("models/stories260K/reference_greedy.json"));
  const size_t ids_at = json.find("\"generated_ids\": [");
  ASSERT_NE(ids_at, std::string::npos);
  const size_t ids_end = json.find(']', ids_at);
  std::vector<TokenId> generated;
  for (absl::string_view f :
       absl::StrSplit(json.substr(ids_at + 18, ids_end - ids_at - 18), ',', absl::SkipEmpty())) {
    generated.push_back(std::stoi(std::string(absl::StripAsciiWhitespace(f))));
  }
  ASSERT_EQ(generated.size(), 256u);
  Detokenizer detok(*tok);
  std::string streamed;
  for (TokenId id : generated) {
    streamed += detok.Push(id);
  }
  streamed += detok.Flush();
  EXPECT_EQ(streamed.rfind(" Once upon a time, there was a little girl named Lily.", 0), 0u)
      << streamed.substr(0, 80);
  EXPECT_EQ(tok->Decode(generated), streamed.substr(1));
  // Re-encoding the greedy text gives back the greedy ids where the model
  // produced the canonical tokenization (the first sentence here).
  ASSERT_OK_AND_ASSIGN(
      ids, tok->Encode("Once upon a time, there was a little girl named Lily.", false, false));
  ASSERT_LE(ids.size(), generated.size());
  EXPECT_EQ(ids, std::vector<TokenId>(generated.begin(), generated.begin() + ids.size()));
}

// --- pre-tokenizer splits vs Python regex ----------------------------------------

// A parsed JSON value. Object members are a named struct, not a std::pair:
// std::pair<std::string, JsonValue> inside JsonValue is a recursive
// instantiation that clang with libstdc++ rejects.
struct JsonValue {
  struct Member;
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  std::string str;
  std::vector<JsonValue> array;
  std::vector<Member> object;
  const JsonValue* Get(absl::string_view key) const;
};

struct JsonValue::Member {
  std::string key;
  JsonValue value;
};

const JsonValue* JsonValue::Get(absl::string_view key) const {
  for (const auto& [k, v] : object) {
    if (k == key) {
      return &v;
    }
  }
  return nullptr;
}

// Just enough JSON for the generated file (ASCII, \u escapes, no numbers needed).
class MiniJson {
 public:
  using Value = JsonValue;

  explicit MiniJson(absl::string_view text) : text_(text) {}

  bool Parse(Value* out) {
    if (!ParseValue(out)) {
      return false;
    }
    SkipSpace();
    return pos_ == text_.size();
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Hex4(uint32_t* v) {
    if (pos_ + 4 > text_.size()) {
      return false;
    }
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      *v <<= 4;
      if (c >= '0' && c <= '9') {
        *v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        *v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        *v |= c - 'A' + 10;
      } else {
        return false;
      }
    }
    return true;
  }
  bool ParseString(std::string* out) {
    if (!Consume('"')) {
      return false;
    }
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') {
        return true;
      }
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) {
        return false;
      }
      const char e = text_[pos_++];
      switch (e) {
        case 'n':
          out->push_back('\n');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) {
            return false;
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // surrogate pair
            uint32_t lo;
            if (text_.substr(pos_, 2) != "\\u") {
              return false;
            }
            pos_ += 2;
            if (!Hex4(&lo)) {
              return false;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          internal::AppendUtf8(cp, out);
          break;
        }
        default:
          out->push_back(e);
          break;
      }
    }
    return false;
  }
  bool ParseValue(Value* v) {
    SkipSpace();
    if (pos_ >= text_.size()) {
      return false;
    }
    const char c = text_[pos_];
    if (c == '"') {
      v->kind = Value::kString;
      return ParseString(&v->str);
    }
    if (c == '[') {
      ++pos_;
      v->kind = Value::kArray;
      if (Consume(']')) {
        return true;
      }
      do {
        v->array.emplace_back();
        if (!ParseValue(&v->array.back())) {
          return false;
        }
      } while (Consume(','));
      return Consume(']');
    }
    if (c == '{') {
      ++pos_;
      v->kind = Value::kObject;
      if (Consume('}')) {
        return true;
      }
      do {
        std::string key;
        if (!ParseString(&key) || !Consume(':')) {
          return false;
        }
        v->object.push_back({std::move(key), Value()});
        if (!ParseValue(&v->object.back().value)) {
          return false;
        }
      } while (Consume(','));
      return Consume('}');
    }
    // Literals and numbers: kept as text.
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != ']' && text_[pos_] != '}' &&
           text_[pos_] != ' ' && text_[pos_] != '\n') {
      ++pos_;
    }
    v->kind = Value::kNumber;
    v->str = std::string(text_.substr(start, pos_ - start));
    return pos_ > start;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

TEST(PreTokenizerTest, SplitsMatchPythonRegex) {
  const std::string json = ReadFile(RequireTestDataFile("tokenizer/pretokenizer_splits.json"));
  MiniJson::Value doc;
  ASSERT_TRUE(MiniJson(json).Parse(&doc)) << "malformed pretokenizer_splits.json";
  const MiniJson::Value* cases = doc.Get("cases");
  ASSERT_NE(cases, nullptr);
  ASSERT_GE(cases->array.size(), 46u + 30u);
  std::map<std::string, int> checked;
  for (const MiniJson::Value& c : cases->array) {
    const std::string& text = c.Get("text")->str;
    for (const auto& [pre, splits] : c.Get("splits")->object) {
      auto pre_tokenizer = internal::LookupPreTokenizer(pre);
      ASSERT_OK(pre_tokenizer.status());
      std::vector<std::string> expected;
      for (const MiniJson::Value& s : splits.array) {
        expected.push_back(s.str);
      }
      const std::vector<std::string> got = internal::SplitWords(text, pre_tokenizer->rules);
      if (got != expected) {
        auto show = [](const std::vector<std::string>& v) {
          std::string out;
          for (const std::string& s : v) {
            absl::StrAppend(&out, "[", Escaped(s), "] ");
          }
          return out;
        };
        ADD_FAILURE() << pre << " " << c.Get("name")->str << " \"" << Escaped(text)
                      << "\"\n  got:      " << show(got) << "\n  expected: " << show(expected);
      } else {
        ++checked[pre];
      }
    }
  }
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "default", "starcoder"}) {
    EXPECT_EQ(checked[pre], static_cast<int>(cases->array.size())) << pre;
  }
}

TEST(PreTokenizerTest, UnknownNameListsKnownOnes) {
  EXPECT_THAT(
      internal::LookupPreTokenizer("bert-bge"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::AllOf(HasSubstr("tokenizer.ggml.pre"), HasSubstr("'bert-bge'"),
                                HasSubstr("llama-bpe"), HasSubstr("qwen2"), HasSubstr("gpt-2"))));
}

TEST(UnicodeTest, CodepointClasses) {
  using internal::GetCodepointFlags;
  EXPECT_TRUE(GetCodepointFlags('a').is_letter());
  EXPECT_TRUE(GetCodepointFlags(0x00C4).is_letter());  // Ä
  EXPECT_TRUE(GetCodepointFlags(0x4E2D).is_letter());  // 中
  EXPECT_TRUE(GetCodepointFlags('7').is_number());
  EXPECT_TRUE(GetCodepointFlags(0x00BD).is_number());  // ½ (No)
  EXPECT_TRUE(GetCodepointFlags(0x0663).is_number());  // Arabic-Indic 3
  EXPECT_TRUE(GetCodepointFlags(0x3000).is_whitespace());
  EXPECT_TRUE(GetCodepointFlags(0x0085).is_whitespace());
  EXPECT_FALSE(GetCodepointFlags(0x001C).is_whitespace());  // isspace() but not White_Space
  EXPECT_FALSE(GetCodepointFlags(0x200B).is_whitespace());  // zero width space (Cf)
  EXPECT_TRUE(GetCodepointFlags(',').is_punctuation());
  EXPECT_EQ(GetCodepointFlags(0x0301).bits, internal::CodepointFlags::kMark);
  EXPECT_EQ(GetCodepointFlags(0x1F999).bits, internal::CodepointFlags::kSymbol);  // 🦙
  EXPECT_EQ(GetCodepointFlags(0x0378).bits, internal::CodepointFlags::kControl);  // unassigned
  EXPECT_EQ(GetCodepointFlags(0x10FFFF).bits, internal::CodepointFlags::kControl);
  EXPECT_GT(std::string(internal::kUnicodeVersion).size(), 0u);
}

TEST(UnicodeTest, ByteMappingIsGpt2s) {
  EXPECT_EQ(internal::ByteToUnicode(' '), "\xC4\xA0");   // Ġ (U+0120)
  EXPECT_EQ(internal::ByteToUnicode('\n'), "\xC4\x8A");  // Ċ (U+010A)
  EXPECT_EQ(internal::ByteToUnicode('A'), "A");
  EXPECT_EQ(internal::ByteToUnicode(0xAD), "\xC5\x83");  // U+0143
  for (int b = 0; b < 256; ++b) {
    const auto cps = internal::CodepointsFromUtf8(internal::ByteToUnicode(b));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(internal::UnicodeToByte(cps[0]), b);
  }
}

// --- UTF-8 validation ---------------------------------------------------------------

TEST(TokenizerUtf8Test, InvalidUtf8IsRejectedWithOffset) {
  const Tokenizer* tok = SharedTokenizer("models/ggml-vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_NE(tok, nullptr);
  struct Case {
    std::string text;
    std::string offset;
  };
  const std::vector<Case> cases = {
      {"ab\xFF"
       "cd",
       "byte offset 2"},
      {"caf\xC3", "byte offset 3"},           // truncated at the end
      {"x\xE2\x82y", "byte offset 1"},        // truncated in the middle
      {"\xC0\x80", "byte offset 0"},          // overlong NUL
      {"ok \xED\xA0\x80", "byte offset 3"},   // surrogate
      {"\xF4\x90\x80\x80", "byte offset 0"},  // above U+10FFFF
      {"\x80", "byte offset 0"},              // lone continuation
  };
  for (const Case& c : cases) {
    EXPECT_THAT(tok->Encode(c.text, false, false),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("UTF-8"), HasSubstr(c.offset))))
        << Escaped(c.text);
  }
  EXPECT_OK(tok->Encode("\xF0\x9F\xA6\x99 \xE2\x82\xAC \xC3\xA4", false, false).status());
}

// --- Detokenizer ------------------------------------------------------------------

TEST(DetokenizerTest, HoldsSplitCodepointUntilComplete) {
  const std::string llama = "\xF0\x9F\xA6\x99";  // U+1F999, no token of its own in either vocab
  struct Case {
    const char* vocab;
    std::vector<TokenId> ids;         // Encode(llama)
    std::vector<std::string> pushed;  // Push() of each id
  };
  const std::vector<Case> cases = {
      // "▁" then four byte-fallback tokens <0xF0> <0x9F> <0xA6> <0x99>.
      {"models/ggml-vocab/ggml-vocab-llama-spm.gguf",
       {29871, 3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99},
       {" ", "", "", "", llama}},
      // Byte-level BPE: "\xF0\x9F" as one token, then one token per byte.
      {"models/ggml-vocab/ggml-vocab-gpt-2.gguf", {8582, 99, 247}, {"", "", llama}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.vocab);
    const Tokenizer* tok = SharedTokenizer(c.vocab);
    ASSERT_NE(tok, nullptr);
    ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode(llama, false, false));
    ASSERT_EQ(ids, c.ids) << Ids(ids);
    Detokenizer detok(*tok);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(detok.Push(ids[i]), c.pushed[i]) << "token " << i;
    }
    EXPECT_EQ(detok.Flush(), "");

    // Flush turns an incomplete tail into one U+FFFD; a sequence broken by a
    // later token is replaced as soon as that token arrives.
    Detokenizer cut(*tok);
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      cut.Push(ids[i]);
    }
    EXPECT_EQ(cut.Flush(), "\xEF\xBF\xBD");
    Detokenizer broken(*tok);
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      broken.Push(ids[i]);
    }
    ASSERT_OK_AND_ASSIGN(auto x, tok->Encode("x", false, false));
    EXPECT_EQ(broken.Push(x.back()), "\xEF\xBF\xBD" + tok->TokenToPiece(x.back()));
    EXPECT_EQ(broken.Flush(), "");
  }
}

TEST(DetokenizerTest, StreamEqualsConcatenatedPieces) {
  const Tokenizer* tok = SharedTokenizer("models/ggml-vocab/ggml-vocab-llama-spm.gguf");
  ASSERT_NE(tok, nullptr);
  const auto inputs = ReadInp(RequireSharedFile("models/ggml-vocab/ggml-vocab-llama-spm.gguf.inp"));
  for (const std::string& text : inputs) {
    ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode(text, /*add_bos=*/true, false));
    Detokenizer detok(*tok);
    std::string streamed;
    std::string pieces;
    for (TokenId id : ids) {
      streamed += detok.Push(id);
      pieces += tok->TokenToPiece(id);
    }
    streamed += detok.Flush();
    EXPECT_EQ(streamed, pieces);
    // Decode drops only the prefix space the encoder added.
    EXPECT_EQ(tok->Decode(ids), text);
  }
}

// --- synthetic vocabularies via GgufWriter ------------------------------------------------

std::unique_ptr<GgufFile> WriteAndOpen(const GgufWriter& w) {
  auto bytes = w.Serialize();
  if (!bytes.ok()) {
    ADD_FAILURE() << bytes.status();
    return nullptr;
  }
  auto file = GgufFile::FromBuffer(*bytes);
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    return nullptr;
  }
  return std::move(*file);
}

// A byte-level BPE vocab: the 256 byte symbols, then merged tokens, then specials.
struct TinyBpe {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;

  TinyBpe() {
    for (int b = 0; b < 256; ++b) {
      Add(internal::ByteToUnicode(b));
    }
  }
  int32_t Add(const std::string& text, TokenType type = TokenType::kNormal) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(type));
    return static_cast<int32_t>(tokens.size() - 1);
  }
  // Adds merge `left right` and its result as a token.
  int32_t Merge(const std::string& left, const std::string& right) {
    merges.push_back(left + " " + right);
    return Add(left + right);
  }
  GgufWriter Writer(const std::string& pre = "gpt-2") const {
    GgufWriter w;
    w.SetString("general.architecture", "gpt2");
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", pre);
    w.SetStringArray("tokenizer.ggml.tokens", tokens);
    w.SetInt32Array("tokenizer.ggml.token_type", types);
    w.SetStringArray("tokenizer.ggml.merges", merges);
    return w;
  }
};

int32_t ByteId(char c) { return static_cast<uint8_t>(c); }

TEST(TokenizerBpeTest, MergesByRankLeftmostFirst) {
  TinyBpe v;
  const std::string sp = internal::ByteToUnicode(' ');  // Ġ
  const int32_t bc = v.Merge("b", "c");                 // rank 0
  const int32_t ab = v.Merge("a", "b");                 // rank 1
  const int32_t aa = v.Merge("a", "a");                 // rank 2
  const int32_t sp_a = v.Merge(sp, "a");                // rank 3
  const int32_t sp_abc = v.Merge(sp + "a", "bc");       // rank 4
  const int32_t eot = v.Add("<|endoftext|>", TokenType::kControl);
  const int32_t im_end = v.Add("<|im_end|>");  // normal type: forced control + EOG
  const int32_t tool = v.Add("<tool>", TokenType::kUserDefined);
  GgufWriter w = v.Writer();
  w.SetUint32("tokenizer.ggml.bos_token_id", eot);
  w.SetUint32("tokenizer.ggml.eos_token_id", eot);
  auto file = WriteAndOpen(w);
  ASSERT_NE(file, nullptr);
  ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::FromGguf(*file));

  auto encode = [&](const std::string& text, bool parse_special = false) {
    auto ids = tok->Encode(text, false, parse_special);
    EXPECT_OK(ids.status());
    return ids.ok() ? *ids : std::vector<TokenId>();
  };
  // "abc": b+c (rank 0) beats a+b (rank 1).
  EXPECT_THAT(encode("abc"), ElementsAre(ByteId('a'), bc));
  EXPECT_THAT(encode("ab"), ElementsAre(ab));
  // "aaa": equal ranks go to the leftmost pair.
  EXPECT_THAT(encode("aaa"), ElementsAre(aa, ByteId('a')));
  // " abc" is one pre-token; merges chain to "Ġabc".
  EXPECT_THAT(encode(" abc"), ElementsAre(sp_abc));
  EXPECT_THAT(encode("x abc  a"), ElementsAre(ByteId('x'), sp_abc, ByteId(' '), sp_a));
  // Pre-tokenization keeps merges inside words: "a" + " a" never merge across.
  EXPECT_THAT(encode("a a"), ElementsAre(ByteId('a'), sp_a));

  // Control tokens only with parse_special; user-defined ones always.
  EXPECT_THAT(encode("ab<|endoftext|>ab", true), ElementsAre(ab, eot, ab));
  EXPECT_GT(encode("ab<|endoftext|>ab", false).size(), 3u);
  EXPECT_THAT(encode("ab<tool>ab", false), ElementsAre(ab, tool, ab));
  EXPECT_THAT(encode("<|im_end|><|im_end|>", true), ElementsAre(im_end, im_end));

  EXPECT_EQ(tok->token_type(im_end), TokenType::kControl);
  EXPECT_THAT(tok->eog_ids(), ElementsAre(eot, im_end));
  EXPECT_TRUE(tok->IsEog(im_end));
  EXPECT_FALSE(tok->IsEog(tool));
  EXPECT_FALSE(tok->add_bos());

  // Decode: byte-level inverse, control tokens vanish, user-defined ones print.
  EXPECT_EQ(tok->Decode({sp_abc, eot, tool, ByteId('\n')}), " abc<tool>\n");
  EXPECT_EQ(tok->TokenToPiece(sp_a), " a");
  ASSERT_OK_AND_ASSIGN(auto with_bos, tok->Encode("ab", /*add_bos=*/true, false));
  EXPECT_THAT(with_bos, ElementsAre(eot, ab));
}

TEST(TokenizerBpeTest, Llama3PreTokenizerIgnoresMergesForWholeWords) {
  TinyBpe v;
  const int32_t he = v.Merge("h", "e");
  v.Merge("l", "l");
  const int32_t hello = v.Add("hello");  // reachable only as a whole word
  const int32_t bos = v.Add("<|begin_of_text|>", TokenType::kControl);
  const int32_t eot = v.Add("<|eot_id|>", TokenType::kControl);
  GgufWriter w = v.Writer("llama-bpe");
  w.SetUint32("tokenizer.ggml.bos_token_id", bos);
  w.SetUint32("tokenizer.ggml.eos_token_id", eot);
  auto file = WriteAndOpen(w);
  ASSERT_NE(file, nullptr);
  ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::FromGguf(*file));
  EXPECT_TRUE(tok->add_bos());  // llama-bpe's default
  ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode("hello hel", true, false));
  EXPECT_THAT(ids, ElementsAre(bos, hello, ByteId(' '), he, ByteId('l')));
  // Llama 3 splits digits in threes.
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("12345", false, false));
  EXPECT_THAT(ids, ElementsAre(ByteId('1'), ByteId('2'), ByteId('3'), ByteId('4'), ByteId('5')));
  EXPECT_THAT(tok->eog_ids(), ElementsAre(eot));
}

// A SentencePiece vocab: specials, byte tokens, then scored pieces.
TEST(TokenizerSpmTest, MergesByScoreWithByteFallback) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
    scores.push_back(0);
  }
  auto add = [&](const std::string& t, float score) {
    tokens.push_back(t);
    types.push_back(1);
    scores.push_back(score);
    return static_cast<int32_t>(tokens.size() - 1);
  };
  const std::string sp = "\xE2\x96\x81";
  const int32_t a = add("a", -10);
  add("b", -10);
  const int32_t c = add("c", -10);
  const int32_t space = add(sp, -10);
  const int32_t ab = add("ab", -2);
  const int32_t bc = add("bc", -1);  // higher score than "ab"
  const int32_t sp_a = add(sp + "a", -3);
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  auto file = WriteAndOpen(w);
  ASSERT_NE(file, nullptr);
  ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::FromGguf(*file));
  // Defaults: bos 1, eos 2, add_bos, prefix space.
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());

  ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode("abc", false, false));
  // "▁abc": ▁a (-3) and bc (-1): bc first, then ▁+a.
  EXPECT_THAT(ids, ElementsAre(sp_a, bc));
  // "▁ab▁a": ab (-2) beats ▁a (-3), which then only merges at the end.
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("ab a", false, false));
  EXPECT_THAT(ids, ElementsAre(space, ab, sp_a));
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("x", false, false));
  EXPECT_THAT(ids, ElementsAre(space, 3 + 'x'));  // byte fallback <0x78>
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("\xC3\xA4", true, false));
  EXPECT_THAT(ids, ElementsAre(1, space, 3 + 0xC3, 3 + 0xA4));
  EXPECT_EQ(tok->Decode(ids), "\xC3\xA4");
  // Unknown token text parses as <unk> only with parse_special.
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("<unk>c", false, true));
  EXPECT_THAT(ids, ElementsAre(0, space, c));
  EXPECT_EQ(tok->Decode({ab, a, c}), "abac");

  // tokenizer.ggml.add_space_prefix = false: no "▁" in front.
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  file = WriteAndOpen(w);
  ASSERT_NE(file, nullptr);
  ASSERT_OK_AND_ASSIGN(tok, Tokenizer::FromGguf(*file));
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("ab", false, false));
  EXPECT_THAT(ids, ElementsAre(ab));
  EXPECT_EQ(tok->Decode({space, ab}), " ab");
}

// --- metadata errors --------------------------------------------------------------

TEST(TokenizerMetadataTest, ErrorsNameTheKey) {
  TinyBpe v;
  v.Merge("a", "b");
  struct Case {
    const char* what;
    std::function<void(GgufWriter*)> edit;
    std::vector<std::string> substrings;
  };
  const std::vector<Case> cases = {
      {"model not a string",
       [](GgufWriter* w) { w->SetUint32("tokenizer.ggml.model", 1); },
       {"tokenizer.ggml.model", "string", "uint32"}},
      {"unknown model",
       [](GgufWriter* w) { w->SetString("tokenizer.ggml.model", "t5"); },
       {"tokenizer.ggml.model", "'t5'", "'llama'", "'gpt2'"}},
      {"unknown pre",
       [](GgufWriter* w) { w->SetString("tokenizer.ggml.pre", "nope"); },
       {"tokenizer.ggml.pre", "'nope'", "llama-bpe", "qwen2", "gpt-2"}},
      {"tokens wrong type",
       [](GgufWriter* w) {
         w->SetInt32Array("tokenizer.ggml.tokens", {1, 2});
       },
       {"tokenizer.ggml.tokens", "array of string", "array of int32"}},
      {"merges wrong type",
       [](GgufWriter* w) { w->SetString("tokenizer.ggml.merges", "a b"); },
       {"tokenizer.ggml.merges", "array of string"}},
      {"short token types",
       [](GgufWriter* w) {
         w->SetInt32Array("tokenizer.ggml.token_type", {1, 1});
       },
       {"tokenizer.ggml.token_type", "2 entries"}},
      {"scores wrong type",
       [](GgufWriter* w) { w->SetStringArray("tokenizer.ggml.scores", {"x"}); },
       {"tokenizer.ggml.scores", "array of float32"}},
      {"bos wrong type",
       [](GgufWriter* w) { w->SetString("tokenizer.ggml.bos_token_id", "1"); },
       {"tokenizer.ggml.bos_token_id", "integer"}},
      {"add_bos wrong type",
       [](GgufWriter* w) { w->SetUint32("tokenizer.ggml.add_bos_token", 1); },
       {"tokenizer.ggml.add_bos_token", "bool"}},
      {"duplicate tokens",
       [](GgufWriter* w) {
         w->SetStringArray("tokenizer.ggml.tokens", {"a", "b", "a"});
       },
       {"tokenizer.ggml.tokens", "duplicate", "'a'", "0 and 2"}},
  };
  for (const Case& c : cases) {
    GgufWriter w = v.Writer();
    c.edit(&w);
    auto file = WriteAndOpen(w);
    ASSERT_NE(file, nullptr) << c.what;
    auto tok = Tokenizer::FromGguf(*file);
    std::vector<::testing::Matcher<std::string>> matchers;
    for (const std::string& s : c.substrings) {
      matchers.push_back(HasSubstr(s));
    }
    EXPECT_THAT(tok, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::AllOfArray(matchers)))
        << c.what;
  }

  // Missing keys.
  GgufWriter no_model;
  no_model.SetStringArray("tokenizer.ggml.tokens", {"a"});
  auto file = WriteAndOpen(no_model);
  ASSERT_NE(file, nullptr);
  EXPECT_THAT(Tokenizer::FromGguf(*file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("missing"), HasSubstr("tokenizer.ggml.model"))));
  GgufWriter no_merges;
  no_merges.SetString("tokenizer.ggml.model", "gpt2");
  no_merges.SetStringArray("tokenizer.ggml.tokens", {"a"});
  file = WriteAndOpen(no_merges);
  ASSERT_NE(file, nullptr);
  EXPECT_THAT(Tokenizer::FromGguf(*file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("missing"), HasSubstr("tokenizer.ggml.merges"))));
  GgufWriter no_tokens;
  no_tokens.SetString("tokenizer.ggml.model", "llama");
  file = WriteAndOpen(no_tokens);
  ASSERT_NE(file, nullptr);
  EXPECT_THAT(Tokenizer::FromGguf(*file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("missing"), HasSubstr("tokenizer.ggml.tokens"))));
  // add_bos without a BOS token.
  GgufWriter no_bos = v.Writer();
  no_bos.SetBool("tokenizer.ggml.add_bos_token", true);
  file = WriteAndOpen(no_bos);
  ASSERT_NE(file, nullptr);
  // The BPE default BOS (11) is inside this vocab; point it outside to unset it.
  auto spec = internal::VocabSpecFromMetadata(file->metadata());
  ASSERT_OK(spec.status());
  spec->tokens.resize(5);
  spec->token_types.resize(5);
  EXPECT_THAT(internal::MakeTokenizer(*spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("tokenizer.ggml.add_bos_token"),
                                        HasSubstr("tokenizer.ggml.bos_token_id"))));
}

}  // namespace
}  // namespace tandem::engine
