#pragma once
// WordPiece (BERT uncased) pieces of the tokenizer for tokenizer.ggml.model
// "bert": the normalizer + pre-tokenizer that splits text into words, and the
// greedy longest-match of one word against the vocabulary. As Hugging Face
// tokenizers' BertNormalizer / BertPreTokenizer / WordPiece (which produced
// llama.cpp's ggml-vocab-bert-bge test vectors); llama.cpp's llm_tokenizer_wpm
// approximates the same.
//
// A GGUF stores the vocabulary in llama.cpp's "phantom space" form: a
// word-initial token "hello" is "▁hello" (U+2581), a continuation "##llo" is
// "llo", bracketed specials ("[CLS]") are unchanged.
//
// Pure functions; thread-safe.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::engine::internal {

// Words of valid UTF-8 `text`, as UTF-8: control characters (\p{C}, also the
// whitespace ones \v, \f and U+0085, but not \t, \n, \r), NUL and U+FFFD are
// dropped (unlike llama.cpp, which splits at \v, \f and U+0085); whitespace
// separates words; each
// punctuation character (\p{P}, or an ASCII symbol such as '$' or '+') and
// each CJK ideograph is a word of its own; every other character is replaced
// by its canonical decomposition without nonspacing marks, lowercased
// (AppendBertNormalized).
std::vector<std::string> WpmSplitWords(absl::string_view text);

// Hugging Face's WordPiece max_input_chars_per_word: a longer word is [UNK].
constexpr size_t kWpmMaxWordChars = 100;

// Appends the ids of one word (from WpmSplitWords): "▁" + word is cut greedily
// from the left into the longest pieces (of at most `max_token_bytes`) that
// `lookup` knows (it returns -1 for others); after the first piece, pieces starting with "▁" are
// not tried. A word that can't be cut completely, or is longer than kWpmMaxWordChars code points,
// is the single id `unk`.
void WpmEncodeWord(absl::string_view word, absl::FunctionRef<TokenId(absl::string_view)> lookup,
                   size_t max_token_bytes, TokenId unk, std::vector<TokenId>* out);

}  // namespace tandem::engine::internal
