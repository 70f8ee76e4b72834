#include "common/base/utf8.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace tandem::base {
namespace {

// The offset IsValidUtf8 reports for `s`, or -1 when it is valid.
int BadOffset(const std::string& s) {
  size_t bad = 12345;
  if (IsValidUtf8(s, &bad)) {
    EXPECT_EQ(bad, 12345u) << "bad_offset written for valid input";
    return -1;
  }
  return static_cast<int>(bad);
}

TEST(Utf8Test, ValidSequencesOfEveryLength) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8(std::string("\0", 1)));
  EXPECT_TRUE(IsValidUtf8("plain ascii \x7f"));
  EXPECT_TRUE(IsValidUtf8("\xc2\x80"));          // U+0080, smallest 2-byte
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9"));          // U+00E9
  EXPECT_TRUE(IsValidUtf8("\xdf\xbf"));          // U+07FF
  EXPECT_TRUE(IsValidUtf8("\xe0\xa0\x80"));      // U+0800, smallest 3-byte
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));      // U+20AC
  EXPECT_TRUE(IsValidUtf8("\xed\x9f\xbf"));      // U+D7FF, below the surrogates
  EXPECT_TRUE(IsValidUtf8("\xee\x80\x80"));      // U+E000, above them
  EXPECT_TRUE(IsValidUtf8("\xef\xbf\xbf"));      // U+FFFF
  EXPECT_TRUE(IsValidUtf8("\xf0\x90\x80\x80"));  // U+10000, smallest 4-byte
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));  // U+1F600
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF, the largest
  EXPECT_TRUE(IsValidUtf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"));
}

TEST(Utf8Test, OverlongEncodingsAreInvalid) {
  EXPECT_EQ(BadOffset("\xc0\xaf"), 0);  // '/' in two bytes
  EXPECT_EQ(BadOffset("\xc1\xbf"), 0);
  EXPECT_EQ(BadOffset("\xe0\x80\xaf"), 0);      // '/' in three bytes
  EXPECT_EQ(BadOffset("\xe0\x9f\xbf"), 0);      // U+07FF in three bytes
  EXPECT_EQ(BadOffset("\xf0\x80\x80\xaf"), 0);  // '/' in four bytes
  EXPECT_EQ(BadOffset("\xf0\x8f\xbf\xbf"), 0);  // U+FFFF in four bytes
}

TEST(Utf8Test, SurrogatesAreInvalid) {
  EXPECT_EQ(BadOffset("\xed\xa0\x80"), 0);  // U+D800
  EXPECT_EQ(BadOffset("\xed\xbf\xbf"), 0);  // U+DFFF
  EXPECT_EQ(BadOffset("ab\xed\xb0\x80"), 2);
}

TEST(Utf8Test, CodePointsAboveU10FFFFAreInvalid) {
  EXPECT_EQ(BadOffset("\xf4\x90\x80\x80"), 0);  // U+110000
  EXPECT_EQ(BadOffset("\xf5\x80\x80\x80"), 0);
  EXPECT_EQ(BadOffset("\xf7\xbf\xbf\xbf"), 0);
  EXPECT_EQ(BadOffset("\xf8\x88\x80\x80\x80"), 0);  // old 5-byte form
  EXPECT_EQ(BadOffset("\xff"), 0);
}

TEST(Utf8Test, StrayAndMissingContinuationBytesAreInvalid) {
  EXPECT_EQ(BadOffset("\x80"), 0);
  EXPECT_EQ(BadOffset("a\xbf"), 1);
  EXPECT_EQ(BadOffset("ok \xc3\x28 bad"), 3);  // lead byte, then ASCII
  EXPECT_EQ(BadOffset("\xe2\x28\xa1"), 0);
  EXPECT_EQ(BadOffset("\xf0\x9f\x28\x80"), 0);
}

TEST(Utf8Test, TruncatedSequencesAreInvalidAtTheirFirstByte) {
  EXPECT_EQ(BadOffset("\xc3"), 0);
  EXPECT_EQ(BadOffset("abc\xe2\x82"), 3);
  EXPECT_EQ(BadOffset("\xf0\x9f\x98"), 0);
  EXPECT_EQ(BadOffset("\xe2\x82\xac\xf0"), 3);
}

TEST(Utf8Test, BadOffsetIsOptional) {
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));
}

TEST(Utf8Test, DecodeReturnsCodePointAndLength) {
  const std::string s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  struct Case {
    size_t pos;
    uint32_t codepoint;
    size_t length;
  };
  for (const Case& c :
       {Case{0, 0x61, 1}, Case{1, 0xE9, 2}, Case{3, 0x20AC, 3}, Case{6, 0x1F600, 4}}) {
    const Utf8Sequence seq = DecodeUtf8(s, c.pos);
    EXPECT_EQ(seq.status, Utf8Status::kOk) << "at " << c.pos;
    EXPECT_EQ(seq.codepoint, c.codepoint) << "at " << c.pos;
    EXPECT_EQ(seq.length, c.length) << "at " << c.pos;
  }
}

TEST(Utf8Test, DecodeTellsTruncatedFromIllFormed) {
  // Truncated: a valid prefix the end of the input cuts short.
  Utf8Sequence seq = DecodeUtf8("\xf0\x9f\x98", 0);
  EXPECT_EQ(seq.status, Utf8Status::kIncomplete);
  EXPECT_EQ(seq.length, 3u);
  // Ill-formed: the maximal ill-formed subpart is one replacement.
  seq = DecodeUtf8("\xe2\x82\x28", 0);
  EXPECT_EQ(seq.status, Utf8Status::kInvalid);
  EXPECT_EQ(seq.length, 2u);
  seq = DecodeUtf8("\xed\xa0\x80", 0);  // surrogate: the second byte is out of range
  EXPECT_EQ(seq.status, Utf8Status::kInvalid);
  EXPECT_EQ(seq.length, 1u);
  seq = DecodeUtf8("\xc0\xaf", 0);
  EXPECT_EQ(seq.status, Utf8Status::kInvalid);
  EXPECT_EQ(seq.length, 1u);
}

}  // namespace
}  // namespace tandem::base
