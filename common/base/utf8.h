#pragma once
// UTF-8 validation and decoding under the strict rules of Unicode Table 3-7:
// overlong encodings, surrogates (U+D800..U+DFFF) and code points above
// U+10FFFF are ill-formed, as are stray continuation bytes and truncated
// sequences. Pure functions, any thread.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace tandem::base {

// True when `s` is well-formed UTF-8. Otherwise, when `bad_offset` is set, it
// receives the byte offset of the first ill-formed (or truncated) sequence's
// first byte.
bool IsValidUtf8(absl::string_view s, size_t* bad_offset = nullptr);

enum class Utf8Status { kOk, kInvalid, kIncomplete };

struct Utf8Sequence {
  Utf8Status status;
  uint32_t codepoint;  // valid when kOk
  // kOk: bytes of the sequence (1..4). kInvalid: bytes of the maximal ill-formed
  // subpart to replace with one U+FFFD (>= 1). kIncomplete: bytes present, a
  // valid prefix that the end of the input cut short.
  size_t length;
};

// Decodes the sequence starting at `text[pos]` (pos < text.size()).
Utf8Sequence DecodeUtf8(absl::string_view text, size_t pos);

}  // namespace tandem::base
