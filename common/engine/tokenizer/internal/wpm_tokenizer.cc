#include "common/engine/tokenizer/internal/wpm_tokenizer.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/engine/tokenizer/internal/unicode.h"

namespace tandem::engine::internal {
namespace {

constexpr char kPhantomSpace[] = "\xE2\x96\x81";  // U+2581

// Hugging Face's BertNormalizer::is_chinese_char (its 0x2B920 lower bound of
// the fifth range included, as llama.cpp notes).
bool IsCjkIdeograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// BertPreTokenizer's is_bert_punc: ASCII punctuation (which includes the
// ASCII symbols) or \p{P}.
bool IsBertPunctuation(uint32_t cp) {
  const CodepointFlags flags = GetCodepointFlags(cp);
  return flags.is_punctuation() || (cp < 0x7F && (flags.bits & CodepointFlags::kSymbol));
}

}  // namespace

std::vector<std::string> WpmSplitWords(absl::string_view text) {
  std::vector<std::string> words;
  std::string word;
  auto finish_word = [&]() {
    if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  };
  std::vector<uint32_t> normalized;
  for (uint32_t cp : CodepointsFromUtf8(text)) {
    // As HF's clean_text, control characters go before whitespace splits, so
    // the ones that are both (\v, \f, U+0085) vanish; \t, \n, \r split.
    const CodepointFlags flags = GetCodepointFlags(cp);
    const bool tab_or_newline = cp == '\t' || cp == '\n' || cp == '\r';
    if (cp == 0 || cp == 0xFFFD || ((flags.bits & CodepointFlags::kControl) && !tab_or_newline)) {
      continue;
    }
    if (flags.is_whitespace()) {
      finish_word();
      continue;
    }
    normalized.clear();
    AppendBertNormalized(cp, &normalized);
    const bool isolate = IsCjkIdeograph(cp);
    if (isolate) {
      finish_word();
    }
    for (uint32_t n : normalized) {
      if (IsBertPunctuation(n)) {
        finish_word();
        AppendUtf8(n, &word);
        finish_word();
      } else {
        AppendUtf8(n, &word);
      }
    }
    if (isolate) {
      finish_word();
    }
  }
  finish_word();
  return words;
}

void WpmEncodeWord(absl::string_view word, absl::FunctionRef<TokenId(absl::string_view)> lookup,
                   size_t max_token_bytes, TokenId unk, std::vector<TokenId>* out) {
  const size_t chars = static_cast<size_t>(std::count_if(
      word.begin(), word.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; }));
  if (chars > kWpmMaxWordChars) {
    out->push_back(unk);
    return;
  }
  const std::string phantom = absl::StrCat(kPhantomSpace, word);
  const absl::string_view w(phantom);
  const size_t start_size = out->size();
  for (size_t begin = 0; begin < w.size();) {
    TokenId id = -1;
    size_t end = std::min(w.size(), begin + max_token_bytes);
    for (; end > begin; --end) {
      const absl::string_view piece = w.substr(begin, end - begin);
      // Unlike llama.cpp: "▁x" stands for HF's word-initial "x", never for
      // a continuation (HF's "##▁x"), even where the text holds a U+2581.
      if (begin > 0 && absl::StartsWith(piece, kPhantomSpace)) {
        continue;
      }
      id = lookup(piece);
      if (id >= 0) {
        break;
      }
    }
    if (id < 0) {
      out->resize(start_size);
      out->push_back(unk);
      return;
    }
    out->push_back(id);
    begin = end;
  }
}

}  // namespace tandem::engine::internal
