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
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) {
      lo = 0xA0;  // no overlongs
    } else if (b0 == 0xED) {
      hi = 0x9F;  // no surrogates
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) {
      lo = 0x90;  // no overlongs
    } else if (b0 == 0xF4) {
      hi = 0x8F;  // <= U+10FFFF
    }
  } else {
    return {Utf8Status::kInvalid, 0, 1};
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
