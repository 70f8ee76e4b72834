#pragma once
// Unicode helpers for the tokenizer: UTF-8 validation errors, code point
// classes (generated tables in unicode_data.cc), GPT-2's byte <-> unicode
// mapping, and the BPE pre-tokenizer splits written as hand-made matchers over
// code points (no std::regex), following llama.cpp's unicode.cpp.
//
// All functions are pure and thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem::engine::internal {

// One general-category class per code point (unassigned ones are kControl, as
// Cn is in \p{C}) plus the White_Space property as kWhitespace.
struct CodepointFlags {
  enum : uint8_t {
    kNumber = 0x01,       // \p{N}
    kLetter = 0x02,       // \p{L}
    kSeparator = 0x04,    // \p{Z}
    kMark = 0x08,         // \p{M}
    kPunctuation = 0x10,  // \p{P}
    kSymbol = 0x20,       // \p{S}
    kControl = 0x40,      // \p{C}
    kWhitespace = 0x80,   // \s (White_Space)
  };
  uint8_t bits = 0;  // 0 only for "no code point" (past the end of a chunk)

  bool is_number() const { return bits & kNumber; }
  bool is_letter() const { return bits & kLetter; }
  bool is_punctuation() const { return bits & kPunctuation; }
  bool is_whitespace() const { return bits & kWhitespace; }
  bool is_defined() const { return bits != 0; }
};

// Generated table (unicode_data.cc): ranges sorted by start, the first at 0;
// a range ends where the next starts, the last at U+10FFFF.
struct CodepointRange {
  uint32_t start;
  uint8_t flags;
};
extern const char kUnicodeVersion[];
extern const CodepointRange kCodepointRanges[];
extern const size_t kNumCodepointRanges;

// Flags of `cp`; code points above U+10FFFF get kControl.
CodepointFlags GetCodepointFlags(uint32_t cp);

// --- BERT uncased normalization (generated tables in unicode_data.cc) ------------

// An inclusive code point range.
struct CodepointSpan {
  uint32_t first;
  uint32_t last;
};
// A code point and what BERT uncased normalization turns it into.
constexpr int kMaxBertMapping = 3;
struct BertMapping {
  uint32_t cp;
  uint8_t length;  // code points used in `to`
  uint32_t to[kMaxBertMapping];
};
extern const CodepointSpan kNonspacingMarks[];  // Mn, sorted
extern const size_t kNumNonspacingMarks;
extern const BertMapping kBertMappings[];  // sorted by cp
extern const size_t kNumBertMappings;

// Appends what Hugging Face's BertNormalizer (strip_accents + lowercase, as
// for uncased models) makes of `cp`: its canonical decomposition (NFD) without
// nonspacing marks (Mn), lowercased. Nothing for a mark itself; Hangul
// syllables decompose into their jamo.
void AppendBertNormalized(uint32_t cp, std::vector<uint32_t>* out);

// --- UTF-8 ---------------------------------------------------------------------

// InvalidArgument "invalid UTF-8 at byte offset N (0xXX)" for the first
// ill-formed or truncated sequence.
absl::Status ValidateUtf8(absl::string_view text);

// Code points of valid UTF-8 (validate first; ill-formed bytes become U+FFFD).
// Decoding is base::DecodeUtf8 (common/base/utf8.h).
std::vector<uint32_t> CodepointsFromUtf8(absl::string_view text);
void AppendUtf8(uint32_t cp, std::string* out);

// Number of bytes of the UTF-8 sequence whose lead byte is `c` (1 for
// continuation or invalid lead bytes), as llama.cpp's unicode_len_utf8.
inline size_t Utf8SequenceLength(char c) {
  static constexpr size_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[static_cast<uint8_t>(c) >> 4];
}

// --- GPT-2 byte-level mapping ----------------------------------------------------

// The UTF-8 of the printable code point GPT-2 maps `byte` to.
const std::string& ByteToUnicode(uint8_t byte);
// The byte that GPT-2 maps to `cp`, or -1 when `cp` is not in the mapping.
int UnicodeToByte(uint32_t cp);
// Applies ByteToUnicode to every byte of `text`.
std::string ByteEncode(absl::string_view text);

// --- pre-tokenizer splits -------------------------------------------------------

// One regex of a pre-tokenizer. Each rule splits every piece the previous rule
// produced; text a regex doesn't match stays as its own piece, as in
// llama.cpp's unicode_regex_split.
enum class SplitRule {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: as kLlama3 with \p{N} instead of \p{N}{1,3}.
  kQwen2,
  // [\p{P}\$\+<=>\^~\|]+  (first regex of llama.cpp's "default" BPE pre-tokenizer)
  kPunctuationRuns,
  kNumberRuns,         // \p{N}+
  kAsciiDigitTriples,  // [0-9][0-9][0-9]
  kSingleNumbers,      // \p{N}
};

// Splits valid UTF-8 `text` into words (UTF-8, not byte-encoded) by applying
// `rules` in order. Concatenating the words gives back `text`.
std::vector<std::string> SplitWords(absl::string_view text, absl::Span<const SplitRule> rules);

}  // namespace tandem::engine::internal
