#include "common/base/utf8.h"

namespace tandem::base {

bool IsValidUtf8(absl::string_view s, size_t* bad_offset) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Sequence seq = DecodeUtf8(s, pos);
    if (seq.status != Utf8Status::kOk) {
      if (bad_offset != nullptr) {
        *bad_offset = pos;
      }
      return false;
    }
    pos += seq.length;
  }
  return true;
}

Utf8Sequence DecodeUtf8(absl::string_view text, size_t pos) {
  const uint8_t b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) {
    return {Utf8Status::kOk, b0, 1};
  }
  size_t need;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
  } else {
    return {Utf8Status::kInvalid, 0, 1};
  }
  uint32_t cp = b0 & (0x7F >> need);  // the lead byte's payload: 5, 4 or 3 bits
  // The second byte's range (Unicode Table 3-7); later bytes are always 80..BF.
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (b0 == 0xE0) {
    lo = 0xA0;  // no overlongs
  } else if (b0 == 0xED) {
    hi = 0x9F;  // no surrogates
  } else if (b0 == 0xF0) {
    lo = 0x90;  // no overlongs
  } else if (b0 == 0xF4) {
    hi = 0x8F;  // <= U+10FFFF
  }
  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= text.size()) {
      return {Utf8Status::kIncomplete, 0, k};
    }
    const uint8_t b = static_cast<uint8_t>(text[pos + k]);
    if (b < lo || b > hi) {
      return {Utf8Status::kInvalid, 0, k};
    }
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Status::kOk, cp, need};
}

}  // namespace tandem::base
