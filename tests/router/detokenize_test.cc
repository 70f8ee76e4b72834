// Incremental detokenization as the router does it per choice: token ids
// arrive one by one; the text emitted never splits a UTF-8 code point, and
// stop strings are held back until decided.

#include "absl/strings/str_format.h"
#include "common/base/utf8.h"
#include "common/engine/sampling.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/request.h"
#include "tests/testing/router_test_util.h"

namespace tandem::router {
namespace {

class DetokenizeTest : public ::testing::Test {
 protected:
  DetokenizeTest() : catalog_(testing::StoriesCatalog()) {}
  const engine::Tokenizer& tok() { return catalog_.models()[0]->tokenizer(); }
  // stories260K is SentencePiece with byte fallback: <0xNN> tokens.
  int32_t Byte(unsigned char b) {
    const int32_t id = 3 + b;
    EXPECT_EQ(tok().token_text(id), absl::StrFormat("<0x%02X>", b));
    return id;
  }
  ModelCatalog catalog_;
};

TEST_F(DetokenizeTest, MultiByteCharacterAcrossTokens) {
  engine::Detokenizer d(tok());
  // "€" is E2 82 AC: nothing comes out until the code point is complete.
  EXPECT_EQ(d.Push(Byte(0xE2)), "");
  EXPECT_EQ(d.Push(Byte(0x82)), "");
  EXPECT_EQ(d.Push(Byte(0xAC)), "\xE2\x82\xAC");
  // A 4-byte emoji, then ASCII in the same stream.
  std::string out;
  for (unsigned char b : std::string("\xF0\x9F\x98\x80")) {
    std::string piece = d.Push(Byte(b));
    EXPECT_TRUE(base::IsValidUtf8(piece));
    out += piece;
  }
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.Push(Byte('!')), "!");
  EXPECT_EQ(d.Flush(), "");
}

TEST_F(DetokenizeTest, EveryPrefixOfATokenizedTextIsValidUtf8) {
  const std::string text = "Once upon a time, a caf\xC3\xA9 sold \xE2\x82\xAC" "5 cakes.";
  absl::StatusOr<std::vector<engine::TokenId>> ids = tok().Encode(text, false, false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  engine::Detokenizer d(tok());
  std::string out;
  for (engine::TokenId id : *ids) {
    std::string piece = d.Push(id);
    EXPECT_TRUE(base::IsValidUtf8(piece)) << "token " << id;
    out += piece;
  }
  out += d.Flush();
  EXPECT_EQ(out, " " + text);  // SPM's leading space marks a continuation
}

TEST_F(DetokenizeTest, TruncatedCodePointFlushesAsReplacement) {
  engine::Detokenizer d(tok());
  EXPECT_EQ(d.Push(Byte(0xE2)), "");
  EXPECT_EQ(d.Push(Byte(0x82)), "");
  EXPECT_TRUE(base::IsValidUtf8(d.Flush()));
}

TEST_F(DetokenizeTest, StopStringAcrossTokensAndCodePoints) {
  engine::Detokenizer d(tok());
  engine::StopStringMatcher m({"\xE2\x82\xAC" "5"});
  bool stopped = false;
  std::string out;
  out += m.Append(d.Push(Byte('a')), &stopped);
  out += m.Append(d.Push(Byte(0xE2)), &stopped);
  out += m.Append(d.Push(Byte(0x82)), &stopped);
  out += m.Append(d.Push(Byte(0xAC)), &stopped);
  EXPECT_FALSE(stopped);
  EXPECT_EQ(out, "a");  // "€" is held: it may start the stop string
  out += m.Append(d.Push(Byte('5')), &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "a");
}

}  // namespace
}  // namespace tandem::router
