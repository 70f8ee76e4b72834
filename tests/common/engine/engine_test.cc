// Self-consistency tests of the batch step: chunked prefill, batched decode,
// prefix cache, copy-on-write forks, KV accounting and bad input. Each test
// ends with the KV pool back to zero used blocks.

#include "common/engine/engine.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/engine/generation.h"
#include "common/engine/kernels/kernels.h"
#include "common/engine/model.h"
#include "common/engine/model_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

// A small random model shared by the tests of this file (GQA 4:2, 3 blocks).
const Model& SmallModel(GgmlType dtype = GgmlType::kF32, const std::string& arch = "llama") {
  static std::map<std::pair<int, std::string>, std::unique_ptr<Model>>* models =
      new std::map<std::pair<int, std::string>, std::unique_ptr<Model>>();
  auto key = std::make_pair(static_cast<int>(dtype), arch);
  auto it = models->find(key);
  if (it != models->end()) return *it->second;
  RandomModelSpec spec;
  spec.arch = arch;
  spec.dim = 128;
  spec.layers = 3;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ffn = 256;
  spec.context = 512;
  spec.vocab_size = 300;
  spec.dtype = dtype;
  spec.seed = 7;
  const std::string path = absl::StrCat(::tandem::testing::TempDir(), "/small-", arch, "-",
                                        GgmlTypeName(dtype), ".gguf");
  absl::Status s = WriteRandomModel(spec, path);
  CHECK(s.ok()) << s;
  auto m = Model::Load(path);
  CHECK(m.ok()) << m.status();
  auto& slot = (*models)[key];
  slot = std::move(m).value();
  return *slot;
}

std::unique_ptr<Engine> MakeEngine(const Model& model, int32_t blocks = 256,
                                   GgmlType kv = GgmlType::kF32, int threads = 2) {
  EngineConfig c;
  c.num_kv_blocks = blocks;
  c.kv_dtype = kv;
  c.num_threads = threads;
  auto e = Engine::Create(model, c);
  CHECK(e.ok()) << e.status();
  return std::move(e).value();
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Logits after every prompt position, computed in chunks of `chunk`.
std::vector<float> PromptLogits(Engine& engine, SequenceId seq, const std::vector<int32_t>& prompt,
                                int chunk) {
  auto cached = engine.AddSequence(seq, prompt);
  CHECK(cached.ok()) << cached.status();
  CHECK_EQ(*cached, 0);
  const int vocab = engine.model().config().vocab_size;
  std::vector<float> all;
  for (size_t pos = 0; pos < prompt.size(); pos += chunk) {
    size_t n = std::min<size_t>(chunk, prompt.size() - pos);
    BatchEntry e{seq, absl::MakeConstSpan(prompt).subspan(pos, n), LogitsMode::kAll};
    auto out = engine.Step(absl::MakeConstSpan(&e, 1));
    CHECK(out.ok()) << out.status();
    for (size_t i = 0; i < n; ++i) {
      auto row = out->logits(0, i);
      all.insert(all.end(), row.begin(), row.end());
    }
    CHECK_EQ(out->vocab_size(), vocab);
  }
  return all;
}

float MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b) {
  CHECK_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

int32_t Argmax(absl::Span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

class ChunkedPrefillTest : public ::testing::TestWithParam<GgmlType> {};

// Prefill in chunks of 1, 7, 16 and all tokens gives bitwise the same logits
// at every position. Different chunk sizes take different kernel paths (GEMV
// at one token, blocked GEMM otherwise); every path sums each output in the
// same order (batch-invariant kernels), so a request's tokens cannot depend
// on how the scheduler chunked it or what it was batched with.
TEST_P(ChunkedPrefillTest, ChunkSizesAgree) {
  const Model& model = SmallModel(GetParam());
  auto engine = MakeEngine(model);
  const auto prompt = RandomTokens(45, model.config().vocab_size, 11);
  const auto whole = PromptLogits(*engine, 1, prompt, 1000);
  ASSERT_OK(engine->FreeSequence(1));
  engine->kv_cache().ClearPrefixCache();
  for (int chunk : {1, 7, 16}) {
    SCOPED_TRACE(absl::StrCat("chunk ", chunk));
    const auto chunked = PromptLogits(*engine, 2, prompt, chunk);
    EXPECT_EQ(MaxAbsDiff(whole, chunked), 0.0f);
    EXPECT_TRUE(whole == chunked);
    ASSERT_OK(engine->FreeSequence(2));
    engine->kv_cache().ClearPrefixCache();
  }
  EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, ChunkedPrefillTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0,
                                           GgmlType::kQ4_0),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

// N sequences decoded together in one batch produce bitwise the same logits
// (so the same tokens under any sampler) as each decoded alone.
class BatchedDecodeTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(BatchedDecodeTest, MatchesSingleBitwise) {
  for (const std::string arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    const Model& model = SmallModel(GetParam(), arch);
    const int vocab = model.config().vocab_size;
    constexpr int kSeqs = 6, kSteps = 12;
    std::vector<std::vector<int32_t>> prompts;
    for (int s = 0; s < kSeqs; ++s) prompts.push_back(RandomTokens(5 + 9 * s, vocab, 100 + s));

    // Alone.
    std::vector<std::vector<int32_t>> alone(kSeqs);
    std::vector<std::vector<float>> alone_logits(kSeqs);
    {
      auto engine = MakeEngine(model);
      for (int s = 0; s < kSeqs; ++s) {
        ASSERT_OK(engine->AddSequence(s, prompts[s]).status());
        BatchEntry e{s, prompts[s], LogitsMode::kLast};
        auto out = engine->Step(absl::MakeConstSpan(&e, 1));
        ASSERT_OK(out.status());
        int32_t tok = Argmax(out->last_logits(0));
        for (int i = 0; i < kSteps; ++i) {
          alone[s].push_back(tok);
          BatchEntry d{s, absl::MakeConstSpan(&alone[s].back(), 1), LogitsMode::kLast};
          auto o = engine->Step(absl::MakeConstSpan(&d, 1));
          ASSERT_OK(o.status());
          auto row = o->last_logits(0);
          alone_logits[s].insert(alone_logits[s].end(), row.begin(), row.end());
          tok = Argmax(row);
        }
        ASSERT_OK(engine->FreeSequence(s));
      }
      EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
    }
    // Together: all prompts prefilled in one mixed step, then decoded as a batch.
    auto engine = MakeEngine(model);
    engine->kv_cache().ClearPrefixCache();
    std::vector<BatchEntry> batch;
    for (int s = 0; s < kSeqs; ++s) {
      ASSERT_OK(engine->AddSequence(s, prompts[s]).status());
      batch.push_back({s, prompts[s], LogitsMode::kLast});
    }
    auto out = engine->Step(batch);
    ASSERT_OK(out.status());
    std::vector<std::vector<int32_t>> together(kSeqs);
    std::vector<std::vector<float>> together_logits(kSeqs);
    for (int s = 0; s < kSeqs; ++s) together[s].push_back(Argmax(out->last_logits(s)));
    for (int i = 0; i < kSteps; ++i) {
      batch.clear();
      for (int s = 0; s < kSeqs; ++s) {
        batch.push_back({s, absl::MakeConstSpan(&together[s].back(), 1), LogitsMode::kLast});
      }
      auto o = engine->Step(batch);
      ASSERT_OK(o.status());
      for (int s = 0; s < kSeqs; ++s) {
        auto row = o->last_logits(s);
        together_logits[s].insert(together_logits[s].end(), row.begin(), row.end());
        if (i + 1 < kSteps) together[s].push_back(Argmax(row));
      }
    }
    for (int s = 0; s < kSeqs; ++s) {
      EXPECT_EQ(alone[s], together[s]) << "sequence " << s;
      EXPECT_EQ(MaxAbsDiff(alone_logits[s], together_logits[s]), 0.0f) << "sequence " << s;
      EXPECT_TRUE(alone_logits[s] == together_logits[s]) << "sequence " << s;
      ASSERT_OK(engine->FreeSequence(s));
    }
    EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BatchedDecodeTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0,
                                           GgmlType::kQ4_0),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

// A prefix-cache hit gives the same logits as recomputing the whole prompt,
// and actually skips the cached tokens.
// The load-time repacked weights (WeightMatrix::Create, on where the active
// ISA has kernels for them) change only the speed: a model loaded without
// them (SetLoadTimeRepack(false), tandem-generate --norepack) gives the same
// logits bit for bit, in prefill and decode, for every weight type the
// random-model writer makes (F16 repacked for the GEMV only).
TEST(EngineTest, RepackedWeightsGiveTheSameLogits) {
  for (GgmlType dtype : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    SCOPED_TRACE(GgmlTypeName(dtype));
    RandomModelSpec spec;
    spec.dim = 128;
    spec.layers = 2;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.ffn = 256;
    spec.context = 256;
    spec.vocab_size = 300;
    spec.dtype = dtype;
    spec.seed = 11;
    const std::string path = absl::StrCat(::tandem::testing::TempDir(), "/repack-",
                                          GgmlTypeName(dtype), ".gguf");
    ASSERT_OK(WriteRandomModel(spec, path));
    std::vector<std::vector<float>> logits;
    for (bool repack : {true, false}) {
      SetLoadTimeRepack(repack);
      auto model = Model::Load(path);
      SetLoadTimeRepack(true);
      ASSERT_OK(model.status());
      if (repack && static_cast<int>(ActiveIsa()) >= static_cast<int>(Isa::kAvx2)) {
        EXPECT_TRUE((*model)->layer(0).wq.prepacked());
      }
      if (!repack) {
        EXPECT_FALSE((*model)->layer(0).wq.prepacked());
      }
      auto engine = MakeEngine(**model);
      const std::vector<int32_t> prompt = RandomTokens(37, 300, 5);
      std::vector<float> all = PromptLogits(*engine, 1, prompt, 16);
      int32_t token = Argmax(absl::MakeConstSpan(all).subspan(all.size() - 300));
      for (int step = 0; step < 8; ++step) {
        BatchEntry e{1, absl::MakeConstSpan(&token, 1), LogitsMode::kLast};
        auto out = engine->Step(absl::MakeConstSpan(&e, 1));
        ASSERT_OK(out.status());
        all.insert(all.end(), out->last_logits(0).begin(), out->last_logits(0).end());
        token = Argmax(out->last_logits(0));
      }
      logits.push_back(std::move(all));
    }
    EXPECT_EQ(logits[0], logits[1]);
  }
}

TEST(EngineTest, PrefixCacheHitMatchesRecompute) {
  const Model& model = SmallModel();
  auto engine = MakeEngine(model);
  const int vocab = model.config().vocab_size;
  auto shared = RandomTokens(40, vocab, 5);
  auto a = shared, b = shared;
  auto tail_a = RandomTokens(9, vocab, 6), tail_b = RandomTokens(13, vocab, 7);
  a.insert(a.end(), tail_a.begin(), tail_a.end());
  b.insert(b.end(), tail_b.begin(), tail_b.end());

  // Reference: b computed from scratch with the cache off.
  std::vector<float> reference;
  {
    EngineConfig c;
    c.num_kv_blocks = 64;
    c.enable_prefix_cache = false;
    c.num_threads = 2;
    auto cold = Engine::Create(model, c);
    ASSERT_OK(cold.status());
    reference = PromptLogits(**cold, 1, b, 1000);
  }
  // Run a, free it: its full blocks stay cached.
  PromptLogits(*engine, 1, a, 1000);
  ASSERT_OK(engine->FreeSequence(1));
  EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
  EXPECT_EQ(engine->kv_cache().num_cached_blocks(), 3);  // 49 tokens: 3 full blocks

  auto cached = engine->AddSequence(2, b);
  ASSERT_OK(cached.status());
  EXPECT_EQ(*cached, 32);  // two full blocks of the shared 40 tokens
  BatchEntry e{2, absl::MakeConstSpan(b).subspan(32), LogitsMode::kAll};
  auto out = engine->Step(absl::MakeConstSpan(&e, 1));
  ASSERT_OK(out.status());
  for (size_t i = 32; i < b.size(); ++i) {
    auto row = out->logits(0, i - 32);
    EXPECT_LT(MaxAbsDiff(row, absl::MakeConstSpan(reference).subspan(i * vocab, vocab)), 1e-4)
        << "position " << i;
  }
  ASSERT_OK(engine->FreeSequence(2));
  EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
}

// Forking mid-block shares the KV; diverging continuations copy the shared
// partial block and match independent runs.
TEST(EngineTest, ForkCopyOnWriteMatchesIndependentRuns) {
  const Model& model = SmallModel();
  auto engine = MakeEngine(model);
  const int vocab = model.config().vocab_size;
  auto prompt = RandomTokens(21, vocab, 9);  // block 2 half full
  auto cont_a = RandomTokens(6, vocab, 10), cont_b = RandomTokens(6, vocab, 12);
  auto full_a = prompt, full_b = prompt;
  full_a.insert(full_a.end(), cont_a.begin(), cont_a.end());
  full_b.insert(full_b.end(), cont_b.begin(), cont_b.end());
  std::vector<float> ref_a, ref_b;
  {
    auto e2 = MakeEngine(model);
    ref_a = PromptLogits(*e2, 1, full_a, 1000);
    ASSERT_OK(e2->FreeSequence(1));
    e2->kv_cache().ClearPrefixCache();
    ref_b = PromptLogits(*e2, 2, full_b, 1000);
  }
  PromptLogits(*engine, 1, prompt, 1000);
  ASSERT_OK(engine->ForkSequence(1, 2));
  const auto table = engine->kv_cache().block_table(1);
  EXPECT_EQ(engine->kv_cache().ref_count(table.back()), 2);
  BatchEntry batch[2] = {{1, cont_a, LogitsMode::kAll}, {2, cont_b, LogitsMode::kAll}};
  auto out = engine->Step(batch);
  ASSERT_OK(out.status());
  EXPECT_NE(engine->kv_cache().block_table(1).back(), engine->kv_cache().block_table(2).back());
  for (size_t i = 0; i < cont_a.size(); ++i) {
    size_t pos = prompt.size() + i;
    EXPECT_LT(MaxAbsDiff(out->logits(0, i), absl::MakeConstSpan(ref_a).subspan(pos * vocab, vocab)),
              1e-4);
    EXPECT_LT(MaxAbsDiff(out->logits(1, i), absl::MakeConstSpan(ref_b).subspan(pos * vocab, vocab)),
              1e-4);
  }
  ASSERT_OK(engine->FreeSequence(1));
  ASSERT_OK(engine->FreeSequence(2));
  EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
}

// Disaggregation in one process: engine A prefills, its KV blocks are copied
// byte for byte into blocks engine B reserved for import (different block
// ids), and B's decode continues exactly as A's would.
TEST(EngineTest, ImportedKvDecodesLikeLocalKv) {
  const Model& model = SmallModel(GgmlType::kQ8_0);
  auto a = MakeEngine(model, 64);
  auto b = MakeEngine(model, 64);
  auto prompt = RandomTokens(37, model.config().vocab_size, 21);
  // Occupy some of B's blocks so the imported ids differ from A's.
  auto filler = RandomTokens(40, model.config().vocab_size, 22);
  ASSERT_OK(b->AddSequence(99, filler).status());
  BatchEntry fe{99, filler, LogitsMode::kNone};
  ASSERT_OK(b->Step(absl::MakeConstSpan(&fe, 1)).status());

  ASSERT_OK(a->AddSequence(1, prompt).status());
  BatchEntry pe{1, prompt, LogitsMode::kLast};
  auto out = a->Step(absl::MakeConstSpan(&pe, 1));
  ASSERT_OK(out.status());
  int32_t first = Argmax(out->last_logits(0));

  auto blocks = b->AddSequenceForImport(1, prompt);
  ASSERT_OK(blocks.status());
  auto src = a->kv_cache().block_table(1);
  ASSERT_EQ(blocks->size(), src.size());
  EXPECT_NE((*blocks)[0], src[0]);
  BatchEntry early{1, absl::MakeConstSpan(&first, 1), LogitsMode::kLast};
  EXPECT_THAT(b->Step(absl::MakeConstSpan(&early, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not committed")));
  for (int l = 0; l < model.config().num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (size_t i = 0; i < src.size(); ++i) {
        std::memcpy(static_cast<uint8_t*>(b->kv_pool_base()) + b->BlockOffset(l, kv, (*blocks)[i]),
                    static_cast<uint8_t*>(a->kv_pool_base()) + a->BlockOffset(l, kv, src[i]),
                    a->block_bytes_per_layer());
      }
    }
  }
  ASSERT_OK(b->CommitImport(1));
  std::vector<int32_t> ta = {first}, tb = {first};
  for (int i = 0; i < 10; ++i) {
    BatchEntry ea{1, absl::MakeConstSpan(&ta.back(), 1), LogitsMode::kLast};
    BatchEntry eb{1, absl::MakeConstSpan(&tb.back(), 1), LogitsMode::kLast};
    auto oa = a->Step(absl::MakeConstSpan(&ea, 1));
    auto ob = b->Step(absl::MakeConstSpan(&eb, 1));
    ASSERT_OK(oa.status());
    ASSERT_OK(ob.status());
    EXPECT_LT(MaxAbsDiff(oa->last_logits(0), ob->last_logits(0)), 1e-5);
    ta.push_back(Argmax(oa->last_logits(0)));
    tb.push_back(Argmax(ob->last_logits(0)));
  }
  EXPECT_EQ(ta, tb);
  ASSERT_OK(a->FreeSequence(1));
  ASSERT_OK(b->FreeSequence(1));
  ASSERT_OK(b->FreeSequence(99));
  EXPECT_EQ(a->kv_cache().num_used_blocks(), 0);
  EXPECT_EQ(b->kv_cache().num_used_blocks(), 0);
}

// Step's layer hook runs once per layer, in order.
TEST(EngineTest, LayerHookRunsPerLayerInOrder) {
  const Model& model = SmallModel();
  auto e = MakeEngine(model);
  auto prompt = RandomTokens(20, model.config().vocab_size, 2);
  ASSERT_OK(e->AddSequence(1, prompt).status());
  std::vector<int> layers;
  BatchEntry be{1, prompt, LogitsMode::kLast};
  ASSERT_OK(e->Step(absl::MakeConstSpan(&be, 1), [&](int l) { layers.push_back(l); }).status());
  EXPECT_EQ(layers, (std::vector<int>{0, 1, 2}));
  ASSERT_OK(e->FreeSequence(1));
}

// F16 KV cache stays close to F32 KV (half-precision storage only).
TEST(EngineTest, F16KvCacheCloseToF32) {
  const Model& model = SmallModel();
  auto prompt = RandomTokens(37, model.config().vocab_size, 3);
  auto e32 = MakeEngine(model, 64, GgmlType::kF32);
  auto e16 = MakeEngine(model, 64, GgmlType::kF16);
  auto l32 = PromptLogits(*e32, 1, prompt, 16);
  auto l16 = PromptLogits(*e16, 1, prompt, 16);
  // fp16 keeps 11 significant bits (relative error 2^-11 ~ 5e-4) in K and V;
  // through 3 layers that moves O(1) logits by well under 2e-2.
  float d = MaxAbsDiff(l32, l16);
  EXPECT_LT(d, 2e-2);
  EXPECT_GT(d, 0.0f);  // it really stored half precision
  ASSERT_OK(e32->FreeSequence(1));
  ASSERT_OK(e16->FreeSequence(1));
}

TEST(EngineTest, BadInputIsRejectedAndStateUnchanged) {
  const Model& model = SmallModel();
  auto engine = MakeEngine(model, 8);
  const int vocab = model.config().vocab_size;
  EXPECT_THAT(engine->AddSequence(1, std::vector<int32_t>{1, vocab}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside vocabulary")));
  EXPECT_THAT(engine->AddSequence(1, std::vector<int32_t>{1, -3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-3")));
  EXPECT_THAT(engine->AddSequence(1, std::vector<int32_t>(513, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("context")));
  EXPECT_THAT(engine->AddSequence(1, std::vector<int32_t>{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  std::vector<int32_t> t = {1, 2, 3};
  BatchEntry unknown{42, t, LogitsMode::kLast};
  EXPECT_THAT(engine->Step(absl::MakeConstSpan(&unknown, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown sequence 42")));
  ASSERT_OK(engine->AddSequence(1, t).status());
  std::vector<int32_t> bad = {1, 99999};
  BatchEntry e{1, bad, LogitsMode::kLast};
  EXPECT_THAT(engine->Step(absl::MakeConstSpan(&e, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("99999")));
  BatchEntry twice[2] = {{1, t, LogitsMode::kLast}, {1, t, LogitsMode::kLast}};
  EXPECT_THAT(engine->Step(twice),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  // 8 blocks of 16 hold 128 tokens: 200 more do not fit; nothing is reserved.
  std::vector<int32_t> big(200, 5);
  BatchEntry too_big{1, big, LogitsMode::kLast};
  EXPECT_THAT(engine->Step(absl::MakeConstSpan(&too_big, 1)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("blocks")));
  EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
  EXPECT_EQ(engine->SequenceLength(1), 0);
  // The engine still serves.
  BatchEntry ok{1, t, LogitsMode::kLast};
  ASSERT_OK(engine->Step(absl::MakeConstSpan(&ok, 1)).status());
  EXPECT_EQ(engine->SequenceLength(1), 3);
  ASSERT_OK(engine->FreeSequence(1));
  EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
}

// Generate(): a fixed seed reproduces a sampled continuation while another
// seed changes it. The 40-token prompt spans two full blocks of 16, so the
// second run takes 32 tokens from the prefix cache and still sees the same
// logits (logprob of every chosen token and the top 5) as the cold first run.
TEST(EngineTest, GenerateSeededSamplingIsReproducible) {
  const Model& model = SmallModel();
  auto engine = MakeEngine(model);
  auto prompt = RandomTokens(40, model.config().vocab_size, 1);
  GenerateOptions o;
  o.max_tokens = 24;
  o.sampling.temperature = 0.8f;
  o.sampling.seed = 1234;
  o.sampling.logprobs = true;
  o.sampling.top_logprobs = 5;
  auto r1 = Generate(*engine, 1, prompt, o);
  auto r2 = Generate(*engine, 2, prompt, o);
  o.sampling.seed = 99;
  auto r3 = Generate(*engine, 3, prompt, o);
  ASSERT_OK(r1.status());
  ASSERT_OK(r2.status());
  ASSERT_OK(r3.status());
  EXPECT_EQ(r1->tokens.size(), 24u);
  EXPECT_EQ(r1->tokens, r2->tokens);
  EXPECT_NE(r1->tokens, r3->tokens);
  EXPECT_EQ(r1->cached_prompt_tokens, 0);   // cold engine
  EXPECT_EQ(r2->cached_prompt_tokens, 32);  // two full blocks of r1's prompt
  EXPECT_EQ(r3->cached_prompt_tokens, 32);
  ASSERT_EQ(r2->samples.size(), r1->samples.size());
  for (size_t i = 0; i < r1->samples.size(); ++i) {
    const SampleResult& cold = r1->samples[i];
    const SampleResult& hit = r2->samples[i];
    EXPECT_NEAR(hit.logprob, cold.logprob, 1e-4) << "token " << i;
    ASSERT_EQ(hit.top_logprobs.size(), 5u) << "token " << i;
    ASSERT_EQ(cold.top_logprobs.size(), 5u) << "token " << i;
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(hit.top_logprobs[k].token, cold.top_logprobs[k].token) << "token " << i;
      EXPECT_NEAR(hit.top_logprobs[k].logprob, cold.top_logprobs[k].logprob, 1e-4) << "token " << i;
    }
  }
  EXPECT_EQ(engine->kv_cache().num_used_blocks(), 0);
}

}  // namespace
}  // namespace tandem::engine

namespace tandem::engine {
namespace {

// Random mixed schedules, as a colocated worker runs them: in every step a
// random subset of 8 sequences advances, prefilling sequences by a random
// chunk, decoding ones by one token (teacher-forced with the tokens of their
// solo run). Every logits row equals the solo run's bitwise.
class RandomScheduleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RandomScheduleTest, MixedStepsMatchSoloRunsBitwise) {
  std::unique_ptr<Model> owned;
  const Model* model = nullptr;
  if (GetParam() == "stories260K") {
    auto m =
        Model::Load(::tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf"));
    ASSERT_TRUE(m.ok()) << m.status();
    owned = std::move(m).value();
    model = owned.get();
  } else {
    model = &SmallModel(GetParam() == "small-f16" ? GgmlType::kF16 : GgmlType::kF32);
  }
  const int vocab = model->config().vocab_size;
  constexpr int kSeqs = 8, kGen = 24;
  std::mt19937 rng(61);
  std::vector<std::vector<int32_t>> prompts(kSeqs);
  for (auto& p : prompts) {
    p = {1};
    const int len = 1 + static_cast<int>(rng() % 70);
    for (int t = 0; t < len; ++t) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  }
  // Solo: whole prompt, then greedy tokens one at a time.
  std::vector<std::vector<int32_t>> full(kSeqs);
  std::vector<std::vector<std::vector<float>>> solo(
      kSeqs);  // logits after each position >= prompt-1
  {
    auto engine = MakeEngine(*model, 512, GgmlType::kF16, 1);
    for (int s = 0; s < kSeqs; ++s) {
      full[s] = prompts[s];
      ASSERT_OK(engine->AddSequence(s, prompts[s]).status());
      BatchEntry e{s, prompts[s], LogitsMode::kLast};
      auto out = engine->Step(absl::MakeConstSpan(&e, 1));
      ASSERT_OK(out.status());
      auto row = out->last_logits(0);
      solo[s].emplace_back(row.begin(), row.end());
      for (int g = 0; g < kGen; ++g) {
        full[s].push_back(Argmax(solo[s].back()));
        BatchEntry d{s, absl::MakeConstSpan(&full[s].back(), 1), LogitsMode::kLast};
        auto o = engine->Step(absl::MakeConstSpan(&d, 1));
        ASSERT_OK(o.status());
        auto r = o->last_logits(0);
        solo[s].emplace_back(r.begin(), r.end());
      }
      ASSERT_OK(engine->FreeSequence(s));
    }
  }
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    auto engine = MakeEngine(*model, 512, GgmlType::kF16, 2);
    engine->kv_cache().ClearPrefixCache();
    std::vector<size_t> done(kSeqs, 0);  // tokens of full[s] in the KV
    for (int s = 0; s < kSeqs; ++s) ASSERT_OK(engine->AddSequence(100 + s, prompts[s]).status());
    int steps = 0;
    while (true) {
      std::vector<BatchEntry> batch;
      std::vector<int> who;
      for (int s = 0; s < kSeqs; ++s) {
        if (done[s] >= full[s].size() || rng() % 3 == 0) continue;
        const size_t plen = prompts[s].size();
        size_t n = 1;
        if (done[s] < plen) n = std::min<size_t>(plen - done[s], 1 + rng() % 24);
        batch.push_back({100 + s, absl::MakeConstSpan(full[s]).subspan(done[s], n),
                         done[s] + n >= plen ? LogitsMode::kLast : LogitsMode::kNone});
        who.push_back(s);
      }
      if (batch.empty()) {
        bool all = true;
        for (int s = 0; s < kSeqs; ++s) all = all && done[s] >= full[s].size();
        if (all) break;
        continue;
      }
      auto out = engine->Step(batch);
      ASSERT_OK(out.status());
      ++steps;
      for (size_t b = 0; b < batch.size(); ++b) {
        const int s = who[b];
        done[s] += batch[b].tokens.size();
        if (batch[b].logits == LogitsMode::kNone) continue;
        const size_t idx = done[s] - prompts[s].size();  // 0: after the prompt
        ASSERT_LT(idx, solo[s].size());
        auto row = out->last_logits(static_cast<int>(b));
        ASSERT_TRUE(std::equal(row.begin(), row.end(), solo[s][idx].begin()))
            << "sequence " << s << " position " << done[s] << " (step " << steps << ", batch of "
            << batch.size() << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RandomScheduleTest,
                         ::testing::Values("stories260K", "small-f16", "small-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace tandem::engine
