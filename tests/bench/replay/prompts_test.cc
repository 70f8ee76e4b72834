// Prompt synthesis on three real vocabularies: SmolLM2-135M and
// Qwen2.5-Coder-0.5B (byte-level BPE, smollm and qwen2 pre-tokenizers; from
// the model cache) and stories260K (SentencePiece BPE with byte fallback;
// ../shared/models): exact token counts for many
// lengths (1, many small ones, longer than any one ShareGPT prompt), hash-id
// blocks that give byte- and token-identical prefixes, distinct blocks for
// distinct ids, and the paraphrase rewording. Token counts are checked with
// engine::Tokenizer, itself checked against Hugging Face tokenizers
// (tests/common/engine/tokenizer/tokenizer_test.cc).

#include "bench/replay/prompts.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/bench/replay/test_tokenizers.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::replay {
namespace {

using engine::TokenId;
using engine::Tokenizer;
using ::tandem::testing::RequireSharedFile;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kShareGpt[] = "traces/sharegpt-prompts-ml-energy/ShareGPT_V3_filtered_1000.json";

std::vector<TokenId> Encode(const Tokenizer& tokenizer, const std::string& text) {
  return testing::EncodePlain(tokenizer, text);
}

// One fixture per vocabulary: the tokenizer and a synthesizer over ShareGPT,
// built once (tokenizing the corpus is the slow part).
class PromptsTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Tokenizer& tokenizer() { return testing::TestTokenizer(GetParam()); }
  PromptSynthesizer& synthesizer() {
    static auto* synthesizers = new std::map<std::string, std::unique_ptr<PromptSynthesizer>>();
    std::unique_ptr<PromptSynthesizer>& s = (*synthesizers)[GetParam()];
    if (s == nullptr) {
      auto texts = LoadShareGptPrompts(RequireSharedFile(kShareGpt));
      EXPECT_TRUE(texts.ok()) << texts.status();
      auto created = texts.ok()
                         ? PromptSynthesizer::Create(tokenizer(), *texts)
                         : absl::StatusOr<std::unique_ptr<PromptSynthesizer>>(texts.status());
      if (!created.ok()) {
        ADD_FAILURE() << "no synthesizer for " << GetParam() << ": " << created.status();
        std::abort();
      }
      s = *std::move(created);
    }
    return *s;
  }
};

TEST_P(PromptsTest, ExactTokenCounts) {
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 80; ++n) {
    lengths.push_back(n);
  }
  // The longest ShareGPT prompt has 3617 characters (< 1500 tokens here):
  // 3000 and 5000 span several prompts of the corpus.
  for (int64_t n : {97, 128, 255, 256, 511, 512, 1000, 1023, 3000, 5000}) {
    lengths.push_back(n);
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    for (int64_t serial : {static_cast<int64_t>(i), static_cast<int64_t>(i) + 7919}) {
      ASSERT_OK_AND_ASSIGN(const Prompt prompt, synthesizer().Compose({}, 512, lengths[i], serial));
      EXPECT_EQ(prompt.tokens, lengths[i]);
      EXPECT_EQ(Encode(tokenizer(), prompt.text).size(), static_cast<size_t>(lengths[i]))
          << "length " << lengths[i] << " serial " << serial << ": '" << prompt.text.substr(0, 80)
          << "'";
    }
  }
}

TEST_P(PromptsTest, DistinctSerialsStartDifferently) {
  std::set<std::string> starts;
  for (int64_t serial = 0; serial < 200; ++serial) {
    ASSERT_OK_AND_ASSIGN(const Prompt prompt, synthesizer().Compose({}, 512, 24, serial));
    starts.insert(prompt.text);
  }
  EXPECT_EQ(starts.size(), 200u);
}

TEST_P(PromptsTest, SharedHashIdsGiveIdenticalPrefixes) {
  constexpr int64_t kBlock = 16;
  // Like Mooncake rows: the first id shared by all, then a conversation.
  const std::vector<std::vector<uint64_t>> rows = {
      {0, 1, 2, 3}, {0, 1, 2, 4}, {0, 1, 5}, {0, 6, 7, 8, 9}, {0, 1, 2, 3, 10}};
  const std::vector<int64_t> lengths = {60, 64, 40, 77, 80};
  std::vector<Prompt> prompts;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(Prompt p, synthesizer().Compose(rows[i], kBlock, lengths[i], 100 + i));
    ASSERT_EQ(Encode(tokenizer(), p.text).size(), static_cast<size_t>(lengths[i])) << i;
    prompts.push_back(std::move(p));
  }
  for (size_t a = 0; a < rows.size(); ++a) {
    for (size_t b = a + 1; b < rows.size(); ++b) {
      // Shared leading ids among the whole blocks of both.
      const size_t whole_a = std::min<size_t>(rows[a].size(), lengths[a] / kBlock);
      const size_t whole_b = std::min<size_t>(rows[b].size(), lengths[b] / kBlock);
      size_t shared = 0;
      while (shared < std::min(whole_a, whole_b) && rows[a][shared] == rows[b][shared]) {
        ++shared;
      }
      // Byte-identical text prefix: the concatenated shared blocks.
      std::string prefix;
      for (size_t k = 0; k < shared; ++k) {
        ASSERT_OK_AND_ASSIGN(const std::string block,
                             synthesizer().Block(rows[a][k], kBlock, k == 0));
        prefix += block;
      }
      EXPECT_TRUE(absl::StartsWith(prompts[a].text, prefix)) << a;
      EXPECT_TRUE(absl::StartsWith(prompts[b].text, prefix)) << b;
      // Token-identical prefix of shared * kBlock tokens, and no more text
      // in common right after it (the next block or the unique rest differs).
      const std::vector<TokenId> ta = Encode(tokenizer(), prompts[a].text);
      const std::vector<TokenId> tb = Encode(tokenizer(), prompts[b].text);
      const size_t n = shared * kBlock;
      EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + n, tb.begin()))
          << "rows " << a << " and " << b << " share " << shared << " blocks";
      EXPECT_NE(prompts[a].text.substr(prefix.size(), 12),
                prompts[b].text.substr(prefix.size(), 12))
          << "rows " << a << " and " << b;
    }
  }
  EXPECT_EQ(synthesizer().blocks_dropped(), 0);
}

TEST_P(PromptsTest, EachBlockIsExactlyBlockTokensInPlace) {
  for (int64_t block : {4, 5, 16, 64}) {
    const std::vector<uint64_t> ids = {1000, 2000, 3000, 4000};
    ASSERT_OK_AND_ASSIGN(const Prompt p, synthesizer().Compose(ids, block, 4 * block + 5, 1));
    const std::vector<TokenId> tokens = Encode(tokenizer(), p.text);
    ASSERT_EQ(tokens.size(), static_cast<size_t>(4 * block + 5));
    std::string text;
    for (size_t k = 0; k < ids.size(); ++k) {
      ASSERT_OK_AND_ASSIGN(const std::string b, synthesizer().Block(ids[k], block, k == 0));
      text += b;
      // The first (k + 1) * block tokens of the prompt are the first k + 1 blocks.
      EXPECT_EQ(tokenizer().Decode(absl::MakeConstSpan(tokens).subspan(0, (k + 1) * block)), text)
          << "block size " << block << ", block " << k;
    }
  }
  EXPECT_EQ(synthesizer().blocks_dropped(), 0);
}

// Prompts made only of blocks end in a block's newline: it must count the
// same at the end of the text as before more text (a block whose cut ended in
// whitespace would end in "\n\n", one token at the end for gpt2-style
// pre-tokenizers and two before text).
TEST_P(PromptsTest, PromptsOfOnlyBlocks) {
  const int64_t dropped = synthesizer().blocks_dropped();
  for (uint64_t id = 0; id < 300; ++id) {
    const std::vector<uint64_t> ids = {70000 + id, 80000 + id};
    ASSERT_OK_AND_ASSIGN(const Prompt p, synthesizer().Compose(ids, 8, 16, id));
    ASSERT_EQ(Encode(tokenizer(), p.text).size(), 16u);
  }
  EXPECT_EQ(synthesizer().blocks_dropped(), dropped);
}

TEST_P(PromptsTest, DifferentIdsGiveDifferentBlocks) {
  std::set<std::string> blocks;
  for (uint64_t id = 0; id < 300; ++id) {
    ASSERT_OK_AND_ASSIGN(const std::string b, synthesizer().Block(50000 + id, 8, id % 2 == 0));
    EXPECT_TRUE(absl::EndsWith(b, "\n"));
    blocks.insert(b);
  }
  EXPECT_EQ(blocks.size(), 300u);
  // The same id again gives the very same text.
  ASSERT_OK_AND_ASSIGN(const std::string again, synthesizer().Block(50007, 8, false));
  EXPECT_EQ(blocks.count(again), 1u);
}

TEST_P(PromptsTest, ParaphraseRewordsAndCaps) {
  const std::string text = "Please write a simple example about a big problem.";
  ASSERT_OK_AND_ASSIGN(const Prompt p, synthesizer().Paraphrase(text, 0, 0));
  EXPECT_EQ(p.text, "I have a question. Kindly compose a basic sample regarding a large issue.");
  EXPECT_EQ(p.tokens, static_cast<int64_t>(Encode(tokenizer(), p.text).size()));
  ASSERT_OK_AND_ASSIGN(const Prompt other, synthesizer().Paraphrase(text, 1, 0));
  EXPECT_TRUE(absl::StartsWith(other.text, "Here is what I need. Kindly compose")) << other.text;
  ASSERT_OK_AND_ASSIGN(const Prompt capped, synthesizer().Paraphrase(text, 0, 6));
  EXPECT_LE(capped.tokens, 6);
  EXPECT_EQ(capped.tokens, static_cast<int64_t>(Encode(tokenizer(), capped.text).size()));
  EXPECT_TRUE(absl::StartsWith(p.text, capped.text)) << capped.text;
}

// TokensInRange on hand-checked tokenizations.
TEST_P(PromptsTest, TokensInRange) {
  const std::string text = "Hello world\nand more";
  const std::vector<TokenId> ids = Encode(tokenizer(), text);
  ASSERT_OK_AND_ASSIGN(const int64_t all, synthesizer().TokensInRange(text, 0, text.size()));
  EXPECT_EQ(all, static_cast<int64_t>(ids.size()));
  // The newline is its own token in all three vocabularies: [0, 12) is
  // "Hello world\n", [12, end) "and more".
  ASSERT_OK_AND_ASSIGN(const int64_t head, synthesizer().TokensInRange(text, 0, 12));
  ASSERT_OK_AND_ASSIGN(const int64_t tail, synthesizer().TokensInRange(text, 12, text.size()));
  EXPECT_EQ(head + tail, all);
  EXPECT_EQ(tokenizer().Decode(absl::MakeConstSpan(ids).subspan(0, head)), "Hello world\n");
  // A range ending inside a token of two or more bytes: -1.
  size_t i = 1;
  while (i < ids.size() && tokenizer().TokenToPiece(ids[i]).size() < 2) {
    ++i;
  }
  ASSERT_LT(i, ids.size());
  const size_t inside = tokenizer().Decode(absl::MakeConstSpan(ids).subspan(0, i)).size() + 1;
  ASSERT_OK_AND_ASSIGN(const int64_t crossing, synthesizer().TokensInRange(text, 0, inside));
  EXPECT_EQ(crossing, -1) << "token " << i << " '" << tokenizer().TokenToPiece(ids[i]) << "'";
}

TEST(PromptsSpmTest, PrefixSpaceTokenCountsAtTheStart) {
  const Tokenizer* tokenizer = &testing::TestTokenizer("stories260K");
  ASSERT_OK_AND_ASSIGN(const auto synthesizer,
                       PromptSynthesizer::Create(*tokenizer, BuiltInPromptTexts()));
  // stories260K has no "▁ed": "ed" encodes as the prefix space then "ed".
  const std::vector<TokenId> ids = Encode(*tokenizer, "ed, and");
  ASSERT_GE(ids.size(), 2u);
  ASSERT_EQ(tokenizer->TokenToPiece(ids[0]), " ");
  ASSERT_OK_AND_ASSIGN(const int64_t n, synthesizer->TokensInRange("ed, and", 0, 2));
  EXPECT_EQ(n, 2);
  ASSERT_OK_AND_ASSIGN(const int64_t rest, synthesizer->TokensInRange("ed, and", 2, 7));
  EXPECT_EQ(n + rest, static_cast<int64_t>(ids.size()));
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, PromptsTest,
                         ::testing::Values("smollm2", "qwen2", "stories260K"),
                         [](const auto& info) { return info.param; });

TEST(PromptCorpusTest, ShareGptLoadsAndBadFilesNameTheProblem) {
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> prompts,
                       LoadShareGptPrompts(RequireSharedFile(kShareGpt)));
  EXPECT_EQ(prompts.size(), 1000u);  // PROVENANCE.md: one human turn each
  const std::string bad = absl::StrCat(::tandem::testing::TempDir(), "/bad_sharegpt.json");
  std::ofstream(bad) << "[{\"id\": \"x\", \"conversations\": [{\"from\": \"human\"}]}]";
  EXPECT_THAT(LoadShareGptPrompts(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("element 0 has a turn without string \"from\" and \"value\"")));
  std::ofstream(bad) << "{not json";
  EXPECT_THAT(LoadShareGptPrompts(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
}

}  // namespace
}  // namespace tandem::replay
