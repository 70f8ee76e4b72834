// router/semantic_cache.h without the embedding model: hand-made unit
// vectors stand in for embeddings (the real model runs in
// semantic_cache_pairs_test.cc), a SimulatedClock for time.
//  - exact tier: hit on the same request, whitespace around chat content
//    ignored, every message and parameter in the key;
//  - vector tier: a hit needs cosine >= tau, the same tenant, model and
//    earlier turns, and equal numbers / negations / entities;
//  - TTL and max-age with a simulated clock; no-cache / no-store;
//  - LRU eviction keeps size and HNSW nodes at capacity;
//  - which requests are cacheable (greedy or an explicit policy, n == 1, no
//    logprobs; tools and token ids exact-only).

#include "router/semantic_cache.h"

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "common/base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/request.h"
#include "tests/testing/router_test_util.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kDim = 8;

// A unit vector at angle `theta` (radians) from axis `axis` towards axis+1:
// cos(Vec(a, 0), Vec(a, t)) = cos(t).
Embedding Vec(int axis, float theta = 0.0f) {
  Embedding e;
  e.vector.assign(kDim, 0.0f);
  e.vector[axis] = std::cos(theta);
  e.vector[(axis + 1) % kDim] = std::sin(theta);
  e.tokens = 10;
  return e;
}

CachedAnswer Answer(const std::string& text) {
  CachedAnswer a;
  ChoiceDelta d;
  d.text = text;
  TokenOutput t;
  t.id = 7;
  d.tokens.push_back(t);
  a.deltas.push_back(d);
  a.result.reason = FinishReason::kStop;
  a.result.completion_tokens = 1;
  return a;
}

std::string TextOf(const std::optional<CacheHit>& hit) {
  if (!hit.has_value()) return "<miss>";
  std::string s;
  for (const ChoiceDelta& d : hit->answer->deltas) s += d.text;
  return s;
}

class SemanticCacheTest : public ::testing::Test {
 protected:
  SemanticCacheTest() : catalog_(testing::StoriesCatalog()) {}

  // A chat request to stories260K through the real PrepareRequest and
  // MakeCacheRequest.
  CacheRequest Chat(std::vector<ChatMessage> messages, const std::string& tenant = "alice",
                    const std::string& cache_control = "",
                    void (*tweak)(GenerationRequest&) = nullptr) {
    GenerationRequest g;
    g.model = "stories260K";
    g.messages = std::move(messages);
    g.tenant = tenant;
    g.max_tokens = 8;
    g.cache_control = cache_control;
    if (tweak != nullptr) tweak(g);
    return Make(g);
  }
  CacheRequest Ask(const std::string& user, const std::string& tenant = "alice",
                   const std::string& cache_control = "") {
    return Chat({{"user", user}}, tenant, cache_control);
  }
  CacheRequest Make(const GenerationRequest& g) {
    absl::StatusOr<PreparedRequest> p = PrepareRequest(g, catalog_, LimitsConfig());
    EXPECT_TRUE(p.ok()) << p.status();
    absl::StatusOr<CacheRequest> c = MakeCacheRequest(g, *p);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : CacheRequest();
  }

  SemanticCache MakeCache(int32_t capacity = 100, float tau = 0.9f) {
    SemanticCacheConfig c;
    c.enabled = true;
    c.capacity = capacity;
    c.ttl = absl::Minutes(10);
    c.threshold = tau;
    return SemanticCache(c, kDim, clock_);
  }

  ModelCatalog catalog_;
  base::SimulatedClock clock_{absl::FromUnixSeconds(1700000000)};
};

TEST(CacheControlTest, ParsesTheThreeDirectivesAndRefusesOthers) {
  ASSERT_OK_AND_ASSIGN(CachePolicy none, ParseCacheControl(""));
  EXPECT_FALSE(none.given);
  ASSERT_OK_AND_ASSIGN(CachePolicy p, ParseCacheControl("No-Cache, max-age=30 ,no-store"));
  EXPECT_TRUE(p.given && p.no_cache && p.no_store);
  EXPECT_EQ(p.max_age, absl::Seconds(30));
  EXPECT_THAT(ParseCacheControl("max-age=soon"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max-age")));
  EXPECT_THAT(ParseCacheControl("private"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"private\"")));
}

TEST(GuardFeaturesTest, NumbersNegationsEntities) {
  GuardFeatures f = ExtractGuardFeatures(
      "Don't list 3 cities in France with over 1,000 people or \"Paris\". Use iPhone data.");
  EXPECT_THAT(f.numbers, ElementsAre("1000", "3"));
  EXPECT_EQ(f.negations, 1);
  // "Don't" and "Use" start sentences; "France", the quoted "Paris" and the
  // inner-capital "iPhone" are entities.
  EXPECT_THAT(f.entities, ElementsAre("france", "iphone", "paris"));
  EXPECT_EQ(ExtractGuardFeatures("give me five ideas").numbers,
            ExtractGuardFeatures("give me 5 ideas").numbers);
  EXPECT_EQ(ExtractGuardFeatures("it is not red").negations,
            ExtractGuardFeatures("it isn't red").negations);
}

TEST_F(SemanticCacheTest, ExactTierHitsTheSameConversationOnly) {
  SemanticCache cache = MakeCache();
  const CacheRequest a = Ask("Tell me a story about a cat.");
  EXPECT_FALSE(cache.LookupExact(a).has_value());
  cache.Insert(a, nullptr, Answer("Once upon a time"));
  EXPECT_EQ(TextOf(cache.LookupExact(Ask("  Tell me a story about a cat.\n"))), "Once upon a time");
  EXPECT_EQ(cache.LookupExact(Ask("Tell me a story about a cat."))->tier, CacheTier::kExact);
  EXPECT_FALSE(cache.LookupExact(Ask("Tell me a story about a dog.")).has_value());
  // Tenant and model are in the key.
  EXPECT_FALSE(cache.LookupExact(Ask("Tell me a story about a cat.", "bob")).has_value());
  CacheRequest other_model = a;
  other_model.model = "qwen";
  EXPECT_FALSE(cache.LookupExact(other_model).has_value());
  // Parameters that change the output are in the key.
  EXPECT_FALSE(cache
                   .LookupExact(Chat({{"user", "Tell me a story about a cat."}}, "alice", "",
                                     [](GenerationRequest& g) { g.max_tokens = 9; }))
                   .has_value());
  EXPECT_FALSE(cache
                   .LookupExact(Chat({{"user", "Tell me a story about a cat."}}, "alice", "",
                                     [](GenerationRequest& g) {
                                       g.sampling.stop_strings = {"."};
                                     }))
                   .has_value());
}

TEST_F(SemanticCacheTest, MultiTurnKeysOnTheWholeConversation) {
  SemanticCache cache = MakeCache();
  const std::vector<ChatMessage> turns = {
      {"system", "You are terse."}, {"user", "Name a fruit."}, {"assistant", "Apple."},
      {"user", "And another one?"}};
  const CacheRequest a = Chat(turns);
  const Embedding e = Vec(0);
  cache.Insert(a, &e, Answer("Pear."));
  EXPECT_EQ(TextOf(cache.LookupExact(Chat(turns))), "Pear.");
  // Same last message, different earlier turn: neither tier.
  std::vector<ChatMessage> changed = turns;
  changed[2].content = "Banana.";
  const CacheRequest b = Chat(changed);
  EXPECT_EQ(a.text, b.text);
  EXPECT_NE(a.partition_key, b.partition_key);
  EXPECT_FALSE(cache.LookupExact(b).has_value());
  EXPECT_FALSE(cache.LookupSemantic(b, Vec(0)).has_value());
  changed = turns;
  changed[0].content = "You are verbose.";
  EXPECT_FALSE(cache.LookupSemantic(Chat(changed), Vec(0)).has_value());
  // Only the last user message may be paraphrased.
  changed = turns;
  changed[3].content = "And one more?";
  EXPECT_EQ(TextOf(cache.LookupSemantic(Chat(changed), Vec(0, 0.1f))), "Pear.");
}

TEST_F(SemanticCacheTest, VectorTierNeedsTauTenantModelAndTheGuard) {
  SemanticCache cache = MakeCache(100, /*tau=*/0.9f);
  const CacheRequest a = Ask("How do I sort a list in Python?");
  const Embedding ea = Vec(2);
  cache.Insert(a, &ea, Answer("sorted(xs)"));
  const CacheRequest para = Ask("What is the way to sort a list in Python?");
  // cos(0.4) = 0.921 >= 0.9: a hit; cos(0.5) = 0.878: a miss.
  std::optional<CacheHit> hit = cache.LookupSemantic(para, Vec(2, 0.4f));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tier, CacheTier::kSemantic);
  EXPECT_NEAR(hit->similarity, std::cos(0.4f), 1e-5);
  EXPECT_EQ(TextOf(hit), "sorted(xs)");
  EXPECT_FALSE(cache.LookupSemantic(para, Vec(2, 0.5f)).has_value());
  // Another tenant or model with the very same vector: never.
  EXPECT_FALSE(
      cache.LookupSemantic(Ask("What is the way to sort a list in Python?", "bob"), Vec(2))
          .has_value());
  CacheRequest other_model = para;
  other_model.model = "qwen";
  EXPECT_FALSE(cache.LookupSemantic(other_model, Vec(2)).has_value());
  // The guard, even at cosine 1: a negation, a number, an entity.
  EXPECT_FALSE(cache.LookupSemantic(Ask("How do I not sort a list in Python?"), Vec(2)).has_value());
  EXPECT_FALSE(cache.LookupSemantic(Ask("How do I sort 2 lists in Python?"), Vec(2)).has_value());
  EXPECT_FALSE(cache.LookupSemantic(Ask("How do I sort a list in Rust?"), Vec(2)).has_value());
  // A truncated embedding neither hits nor is stored in the vector tier.
  Embedding cut = Vec(2);
  cut.truncated = true;
  EXPECT_FALSE(cache.LookupSemantic(para, cut).has_value());
  const CacheRequest long_one = Ask("Summarize this very long text about sorting.");
  cache.Insert(long_one, &cut, Answer("long"));
  EXPECT_EQ(cache.index_nodes(), 1);
  EXPECT_EQ(TextOf(cache.LookupExact(long_one)), "long");  // exact tier still
}

TEST_F(SemanticCacheTest, PerModelThreshold) {
  SemanticCacheConfig c;
  c.enabled = true;
  c.threshold = 0.99f;
  c.thresholds["stories260K"] = 0.9f;
  SemanticCache cache(c, kDim, clock_);
  EXPECT_FLOAT_EQ(cache.Threshold("stories260K"), 0.9f);
  EXPECT_FLOAT_EQ(cache.Threshold("other"), 0.99f);
  const Embedding e = Vec(1);
  cache.Insert(Ask("Write a poem about the sea."), &e, Answer("waves"));
  EXPECT_TRUE(cache.LookupSemantic(Ask("Write a poem on the sea."), Vec(1, 0.4f)).has_value());
}

TEST_F(SemanticCacheTest, TtlAndMaxAgeOnTheClock) {
  SemanticCache cache = MakeCache();
  const CacheRequest a = Ask("What is a monad?");
  const Embedding e = Vec(3);
  cache.Insert(a, &e, Answer("a burrito"));
  clock_.AdvanceTime(absl::Minutes(5));
  EXPECT_TRUE(cache.LookupExact(a).has_value());
  EXPECT_FALSE(cache.LookupExact(Ask("What is a monad?", "alice", "max-age=60")).has_value());
  EXPECT_TRUE(cache.LookupExact(Ask("What is a monad?", "alice", "max-age=301")).has_value());
  EXPECT_FALSE(cache.LookupSemantic(Ask("What's a monad?", "alice", "max-age=60"), Vec(3))
                   .has_value());
  EXPECT_TRUE(cache.LookupSemantic(Ask("What's a monad?"), Vec(3)).has_value());
  clock_.AdvanceTime(absl::Minutes(5));  // 10 min: the TTL
  EXPECT_FALSE(cache.LookupSemantic(Ask("What's a monad?"), Vec(3)).has_value());
  EXPECT_FALSE(cache.LookupExact(a).has_value());
  EXPECT_EQ(cache.size(), 0);  // expired entries are dropped when met
}

TEST_F(SemanticCacheTest, NoCacheAndNoStore) {
  SemanticCache cache = MakeCache();
  const Embedding e = Vec(4);
  cache.Insert(Ask("Define entropy.", "alice", "no-store"), &e, Answer("x"));
  EXPECT_EQ(cache.size(), 0);
  cache.Insert(Ask("Define entropy.", "alice", "no-cache"), &e, Answer("fresh"));
  EXPECT_EQ(cache.size(), 1);
  EXPECT_FALSE(cache.LookupExact(Ask("Define entropy.", "alice", "no-cache")).has_value());
  EXPECT_FALSE(
      cache.LookupSemantic(Ask("Define entropy please.", "alice", "no-cache"), e).has_value());
  // no-store may be answered from what is stored.
  EXPECT_EQ(TextOf(cache.LookupExact(Ask("Define entropy.", "alice", "no-store"))), "fresh");
}

TEST_F(SemanticCacheTest, LruEvictionKeepsSizeAndIndexBounded) {
  SemanticCache cache = MakeCache(/*capacity=*/4);
  std::vector<CacheRequest> reqs;
  for (int i = 0; i < 40; ++i) {
    reqs.push_back(Ask(absl::StrCat("Question number ", i, " about topic ", i * 7)));
  }
  for (int i = 0; i < 40; ++i) {
    const Embedding e = Vec(i % kDim, 0.05f * static_cast<float>(i / kDim));
    cache.Insert(reqs[i], &e, Answer(absl::StrCat("answer ", i)));
    if (i == 2) {
      ASSERT_TRUE(cache.LookupExact(reqs[0]).has_value());  // touch 0: 1 is now oldest
    }
    if (i == 4) {
      EXPECT_TRUE(cache.LookupExact(reqs[0]).has_value());
      EXPECT_FALSE(cache.LookupExact(reqs[1]).has_value());
    }
    EXPECT_LE(cache.size(), 4);
    EXPECT_LE(cache.index_nodes(), 4);
  }
  EXPECT_EQ(cache.size(), 4);
  for (int i = 36; i < 40; ++i) {
    const Embedding e = Vec(i % kDim, 0.05f * static_cast<float>(i / kDim));
    EXPECT_EQ(TextOf(cache.LookupSemantic(reqs[i], e)), absl::StrCat("answer ", i));
  }
  EXPECT_FALSE(cache.LookupExact(reqs[35]).has_value());
}

TEST_F(SemanticCacheTest, ConcurrentInsertsAndLookupsStayBounded) {
  SemanticCache cache = MakeCache(/*capacity=*/16);
  std::vector<CacheRequest> reqs;
  for (int i = 0; i < 64; ++i) {
    reqs.push_back(Ask(absl::StrCat("Concurrent question ", i)));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 200; ++k) {
        const int i = (k * 7 + t * 13) % 64;
        const Embedding e = Vec(i % kDim, 0.01f * static_cast<float>(i));
        if (k % 3 == 0) {
          cache.Insert(reqs[i], &e, Answer(absl::StrCat("a", i)));
        } else if (std::optional<CacheHit> hit = cache.LookupSemantic(reqs[i], e)) {
          EXPECT_EQ(TextOf(hit), absl::StrCat("a", i));  // the guard: only its own
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_LE(cache.size(), 16);
  EXPECT_LE(cache.index_nodes(), 16);
}

TEST_F(SemanticCacheTest, WhichRequestsAreCacheable) {
  EXPECT_TRUE(Ask("hi").eligible);
  EXPECT_FALSE(Ask("hi").text.empty());
  auto sampled = [](GenerationRequest& g) { g.sampling.temperature = 0.7f; };
  EXPECT_FALSE(Chat({{"user", "hi"}}, "alice", "", sampled).eligible);
  EXPECT_TRUE(Chat({{"user", "hi"}}, "alice", "max-age=60", sampled).eligible);
  EXPECT_FALSE(Chat({{"user", "hi"}}, "alice", "", [](GenerationRequest& g) { g.n = 2; }).eligible);
  EXPECT_FALSE(Chat({{"user", "hi"}}, "alice", "", [](GenerationRequest& g) {
                 g.sampling.logprobs = true;
               }).eligible);
  // A seed is part of the key.
  CacheRequest s1 = Chat({{"user", "hi"}}, "alice", "max-age=60", [](GenerationRequest& g) {
    g.sampling.temperature = 0.7f;
    g.sampling.seed = 1;
    g.has_seed = true;
  });
  CacheRequest s2 = Chat({{"user", "hi"}}, "alice", "max-age=60", [](GenerationRequest& g) {
    g.sampling.temperature = 0.7f;
    g.sampling.seed = 2;
    g.has_seed = true;
  });
  EXPECT_NE(s1.exact_key, s2.exact_key);
  // Exact tier only: a last turn that is not the user's, token ids.
  EXPECT_TRUE(Chat({{"user", "hi"}, {"assistant", "hello"}}).text.empty());
  GenerationRequest ids;
  ids.model = "stories260K";
  ids.prompt_ids = std::vector<int32_t>{1, 2, 3};
  ids.max_tokens = 4;
  CacheRequest c = Make(ids);
  EXPECT_TRUE(c.eligible);
  EXPECT_TRUE(c.text.empty());
  // A text prompt and the same text as a chat message are different keys.
  GenerationRequest text;
  text.model = "stories260K";
  text.prompt_text = "hi";
  text.max_tokens = 8;
  text.tenant = "alice";
  EXPECT_NE(Make(text).exact_key, Ask("hi").exact_key);
  EXPECT_NE(Make(text).partition_key, Ask("hi").partition_key);
}

}  // namespace
}  // namespace tandem::router
