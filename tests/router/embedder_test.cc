// router/embedder.h: text -> our WordPiece tokenizer -> the encoder, batched
// across callers. The vectors themselves are checked against the reference in
// tests/common/engine/encoder_test.cc; here: the embedder gives exactly the
// encoder's bits for the tokenizer's ids, whatever the batching, and cuts long
// texts as sentence-transformers does.

#include "router/embedder.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/engine/format/gguf.h"
#include "common/engine/model_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;
using ::tandem::testing::StatusIs;

constexpr char kModel[] = "all-minilm-l6-v2";

std::vector<std::string> Texts() {
  return {"How do I reverse a list in Python?",
          "What is the capital of France?",
          "Write a haiku about autumn leaves.",
          "Explain the difference between TCP and UDP.",
          "Summarize the plot of Hamlet in two sentences."};
}

// The encoder run directly on our tokenizer's ids, one text per call, at
// `precision` (the embedder's).
std::vector<std::vector<float>> Direct(const std::vector<std::string>& texts,
                                       engine::EncoderPrecision precision) {
  const std::string path = *engine::ResolveModelPath(kModel);
  auto file = engine::GgufFile::Open(path);
  auto tokenizer = engine::Tokenizer::FromGguf(**file);
  auto encoder = engine::Encoder::Load(path, /*num_threads=*/1, precision);
  std::vector<std::vector<float>> out;
  for (const std::string& t : texts) {
    auto ids = (*tokenizer)->Encode(t, /*add_bos=*/true, /*parse_special=*/false);
    auto v = (*encoder)->Embed({*ids});
    out.push_back((*v)[0]);
  }
  return out;
}

TEST(EmbedderTest, BatchesWholeCallersAndKeepsTheEncodersBits) {
  EmbeddingConfig config;
  config.model = kModel;
  config.max_batch = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Embedder> embedder, Embedder::Load(config));
  EXPECT_EQ(embedder->dim(), 384);
  const std::vector<std::string> texts = Texts();
  const std::vector<std::vector<float>> want = Direct(texts, embedder->precision());

  ASSERT_OK_AND_ASSIGN(std::vector<Embedding> all, embedder->EmbedAll(texts));
  ASSERT_EQ(all.size(), texts.size());
  // One caller's 5 texts with max_batch 2: one encoder call (a caller is
  // never split), every vector bit-identical to the text embedded alone.
  EXPECT_EQ(embedder->encoder_calls(), 1);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(all[i].vector, want[i]) << texts[i];
    EXPECT_FALSE(all[i].truncated);
  }

  // Concurrent callers: whatever batches form, the same bits.
  std::vector<std::vector<float>> got(texts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 4; ++rep) {
        absl::StatusOr<Embedding> e = embedder->Embed(texts[i]);
        if (e.ok()) got[i] = e->vector;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(got[i], want[i]) << texts[i];
  // Each thread's first call runs the encoder; its next three are recent texts.
  EXPECT_EQ(embedder->texts_embedded(), 5 + 5);
  EXPECT_EQ(embedder->recent_hits(), 5 * 3);
  EXPECT_LE(embedder->encoder_calls(), 1 + 5);
}

// Complexity routing (Prepare) and the semantic cache (Start) embed the same
// last user message: the second costs no encoder pass, until the text falls
// out of the recent ones.
TEST(EmbedderTest, RecentTextsAreNotEmbeddedTwice) {
  EmbeddingConfig config;
  config.model = kModel;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Embedder> embedder, Embedder::Load(config));
  const std::string text = "How do I reverse a list in Python?";
  ASSERT_OK_AND_ASSIGN(Embedding first, embedder->Embed(text));
  ASSERT_OK_AND_ASSIGN(Embedding again, embedder->Embed(text));
  EXPECT_EQ(embedder->encoder_calls(), 1);
  EXPECT_EQ(embedder->recent_hits(), 1);
  EXPECT_EQ(again.vector, first.vector);
  EXPECT_EQ(again.tokens, first.tokens);
  for (size_t i = 0; i < Embedder::kRecentTexts; ++i) {
    ASSERT_OK(embedder->Embed(absl::StrCat("filler ", i)).status());
  }
  const int64_t calls = embedder->encoder_calls();
  ASSERT_OK_AND_ASSIGN(Embedding evicted, embedder->Embed(text));
  EXPECT_EQ(embedder->encoder_calls(), calls + 1);  // pushed out by 64 newer texts
  EXPECT_EQ(evicted.vector, first.vector);
}

TEST(EmbedderTest, CutsLongTextsAndSaysSo) {
  EmbeddingConfig config;
  config.model = kModel;
  config.max_seq_tokens = 16;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Embedder> embedder, Embedder::Load(config));
  const std::string head =
      "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen";
  ASSERT_OK_AND_ASSIGN(Embedding a, embedder->Embed(head + " sixteen seventeen"));
  ASSERT_OK_AND_ASSIGN(Embedding b, embedder->Embed(head + " and something else entirely"));
  EXPECT_TRUE(a.truncated);
  EXPECT_TRUE(b.truncated);
  EXPECT_EQ(a.tokens, 16);
  EXPECT_EQ(a.vector, b.vector);  // the cut hides the difference: callers must know
  ASSERT_OK_AND_ASSIGN(Embedding c, embedder->Embed("one two"));
  EXPECT_FALSE(c.truncated);
  EXPECT_EQ(c.tokens, 4);  // [CLS] one two [SEP]
}

// embedding.precision: bf16 reaches the encoder (where the CPU has
// AVX512-BF16) and stays within the encoder's BF16 bound of F32.
TEST(EmbedderTest, Bf16PrecisionReachesTheEncoder) {
  EmbeddingConfig config;
  config.model = kModel;
  config.precision = "bf16";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Embedder> bf16, Embedder::Load(config));
  if (bf16->precision() != engine::EncoderPrecision::kBf16) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the encoder runs f32";
  }
  config.precision = "f32";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Embedder> f32, Embedder::Load(config));
  EXPECT_EQ(f32->precision(), engine::EncoderPrecision::kF32);
  for (const std::string& text : Texts()) {
    ASSERT_OK_AND_ASSIGN(Embedding a, bf16->Embed(text));
    ASSERT_OK_AND_ASSIGN(Embedding b, f32->Embed(text));
    double dot = 0;
    for (size_t i = 0; i < a.vector.size(); ++i) dot += double{a.vector[i]} * b.vector[i];
    EXPECT_GT(dot, 0.9999) << text;
    EXPECT_NE(a.vector, b.vector) << text;  // really a different path
  }
}

TEST(EmbedderTest, BadConfigNamesTheField) {
  EmbeddingConfig config;
  config.model = kModel;
  config.threads = 0;
  EXPECT_THAT(Embedder::Load(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding.threads")));
  config.threads = 1;
  config.max_seq_tokens = 513;
  EXPECT_THAT(Embedder::Load(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding.max_seq_tokens")));
  config.max_seq_tokens = 256;
  config.model = "/nonexistent/minilm.gguf";
  EXPECT_FALSE(Embedder::Load(config).ok());
}

}  // namespace
}  // namespace tandem::router
