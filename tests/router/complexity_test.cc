// router/complexity.h pure parts (prompt features, the score's terms, pool
// thresholds, pool skipping) and the routing: config section's errors.

#include "router/complexity.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/config.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

RoutingConfig TwoPools(double large_min = 0.4) {
  RoutingConfig c;
  c.pools.push_back({"small", "m-small", 0, {}, ""});
  c.pools.push_back({"large", "m-large", large_min, {}, ""});
  return c;
}

TEST(PromptFeaturesTest, EachTermSeesItsMarkers) {
  const PromptFeatures plain = ExtractPromptFeatures("Tell me about your day.", 6);
  EXPECT_EQ(plain.code, 0);
  EXPECT_EQ(plain.math, 0);
  EXPECT_EQ(plain.reasoning, 0);
  EXPECT_EQ(plain.constraints, 0);
  EXPECT_EQ(plain.length, 0);

  EXPECT_EQ(ExtractPromptFeatures("Why?\n```\nint x;\n```", 8).code, 1);
  EXPECT_GT(ExtractPromptFeatures("if (a[i] < b[j]) { x = (y * z) & m; }", 20).code, 0.5);
  // "def" as a word, not inside "define".
  EXPECT_EQ(ExtractPromptFeatures("Please define courage.", 4).code, 0);
  EXPECT_GT(ExtractPromptFeatures("Prove the theorem by induction.", 6).math, 0.9);
  EXPECT_GT(ExtractPromptFeatures("Design it step by step and optimize the hot loop.", 10)
                .reasoning,
            0.9);
  EXPECT_EQ(ExtractPromptFeatures("Please redesign nothing.", 4).reasoning, 0);
  EXPECT_GT(ExtractPromptFeatures("Rules:\n- at most 3 calls\n- must not allocate\n1. sort\n", 20)
                .constraints,
            0.9);
  EXPECT_GT(ExtractPromptFeatures("Summarize and translate this letter.", 6).simple_task, 0.9);
  // Length: 0 up to 32 tokens, 1 from 1024, log-linear between.
  EXPECT_EQ(ExtractPromptFeatures("x", 32).length, 0);
  EXPECT_NEAR(ExtractPromptFeatures("x", 181).length, std::log2(181 / 32.0) / 5, 1e-9);
  EXPECT_EQ(ExtractPromptFeatures("x", 5000).length, 1);
}

TEST(PromptFeaturesTest, HardOutscoresEasyAndALongSimpleTaskStaysLow) {
  const double easy = FeatureScore(ExtractPromptFeatures("What is the capital of Spain?", 8));
  const double hard = FeatureScore(ExtractPromptFeatures(
      "Implement a lock-free queue in C++ and prove it is linearizable, step by step.", 20));
  EXPECT_LT(easy, 0.1);
  EXPECT_GT(hard, 0.6);
  std::string letter = "Summarize this letter: ";
  for (int i = 0; i < 200; ++i) {
    absl::StrAppend(&letter, "We had a lovely time at the seaside and the weather was fine. ");
  }
  EXPECT_LT(FeatureScore(ExtractPromptFeatures(letter, 2400)), 0.1);
}

TEST(PromptFeaturesTest, ReadsOnlyTheFirst16KiB) {
  std::string text(20 << 10, 'a');
  text += " prove the theorem";
  EXPECT_EQ(ExtractPromptFeatures(text, 100).math, 0);
}

TEST(ExemplarScoreTest, KnnAndSoftmaxRank) {
  const std::vector<std::vector<float>> rows = {{1, 0}, {0, 1}, {0.6f, 0.8f}};
  const std::vector<float> v = {1, 0};
  EXPECT_DOUBLE_EQ(KnnSimilarity(v, rows, 1), 1.0);
  EXPECT_NEAR(KnnSimilarity(v, rows, 2), 0.8, 1e-6);
  EXPECT_NEAR(KnnSimilarity(v, rows, 10), 1.6 / 3, 1e-6);  // k capped by the rows
  EXPECT_EQ(KnnSimilarity(v, {}, 3), -1);
  // Two pools: sigmoid((s_large - s_small) / T).
  const double s[] = {0.40, 0.45};
  EXPECT_NEAR(ExemplarScore(s, 0.05), 1 / (1 + std::exp(-1.0)), 1e-12);
  const double equal[] = {0.3, 0.3, 0.3};
  EXPECT_NEAR(ExemplarScore(equal, 0.05), 0.5, 1e-12);
  // A pool without exemplars takes no part.
  const double one_sided[] = {-1, 0.2};
  EXPECT_DOUBLE_EQ(ExemplarScore(one_sided, 0.05), 1.0);
}

TEST(PoolForScoreTest, ThresholdsAreLowerBounds) {
  RoutingConfig c = TwoPools(0.4);
  c.pools.push_back({"huge", "m-huge", 0.8, {}, ""});
  EXPECT_EQ(PoolForScore(c, 0), 0u);
  EXPECT_EQ(PoolForScore(c, 0.3999), 0u);
  EXPECT_EQ(PoolForScore(c, 0.4), 1u);
  EXPECT_EQ(PoolForScore(c, 0.79), 1u);
  EXPECT_EQ(PoolForScore(c, 0.8), 2u);
  EXPECT_EQ(PoolForScore(c, 1), 2u);
}

TEST(ChoosePoolTest, SkipsDeadPoolsLargerFirstAndNamesAllWhenNoneIsLeft) {
  RoutingConfig c = TwoPools(0.4);
  c.pools.push_back({"huge", "m-huge", 0.8, {}, ""});
  const PoolHealth up{true, ""};
  const PoolHealth down{false, "no live decode worker (mode disaggregated)"};
  {
    const PoolHealth h[] = {up, up, up};
    ASSERT_OK_AND_ASSIGN(PoolChoice p, ChoosePool(c, 0.5, h));
    EXPECT_EQ(p.pool, 1u);
    EXPECT_TRUE(p.skipped.empty());
  }
  {
    const PoolHealth h[] = {up, down, up};  // the score's pool is down: the larger one
    ASSERT_OK_AND_ASSIGN(PoolChoice p, ChoosePool(c, 0.5, h));
    EXPECT_EQ(p.pool, 2u);
    EXPECT_EQ(p.skipped, std::vector<size_t>({1}));
  }
  {
    const PoolHealth h[] = {up, down, down};  // then the smaller one
    ASSERT_OK_AND_ASSIGN(PoolChoice p, ChoosePool(c, 0.5, h));
    EXPECT_EQ(p.pool, 0u);
    EXPECT_EQ(p.skipped, std::vector<size_t>({1, 2}));
  }
  {
    const PoolHealth h[] = {down, up, up};  // an easy prompt goes up when small is down
    ASSERT_OK_AND_ASSIGN(PoolChoice p, ChoosePool(c, 0.1, h));
    EXPECT_EQ(p.pool, 1u);
  }
  const PoolHealth h[] = {down, down, PoolHealth{false, "no live prefill worker"}};
  EXPECT_THAT(ChoosePool(c, 0.5, h),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("'auto'"), HasSubstr("small (m-small: no live decode"),
                             HasSubstr("large (m-large: no live decode"),
                             HasSubstr("huge (m-huge: no live prefill worker)"))));
}

RouterConfig WithModels() {
  RouterConfig c;
  c.models.push_back({"small-model", "/m/a.gguf", "", ""});
  c.models.push_back({"large-model", "/m/b.gguf", "", ""});
  return c;
}

TEST(RoutingConfigTest, ParsesTheSection) {
  ASSERT_OK_AND_ASSIGN(RouterConfig c, ParseRouterConfigYaml(R"(
models:
  - {name: small-model, path: /m/a.gguf}
  - {name: large-model, path: /m/b.gguf}
routing:
  alias: smart
  embedding_weight: 0.25
  neighbors: 5
  temperature: 0.1
  pools:
    - name: small
      model: small-model
      exemplars: ["hi there", "what is 2+2"]
    - name: large
      model: large-model
      min_score: 0.45
      exemplars_file: hard.txt
)",
                                                                "/etc/tandem"));
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  const RoutingConfig& r = c.routing;
  EXPECT_TRUE(r.enabled());
  EXPECT_EQ(r.alias, "smart");
  EXPECT_EQ(r.embedding_weight, 0.25);
  EXPECT_EQ(r.neighbors, 5);
  EXPECT_EQ(r.temperature, 0.1);
  ASSERT_EQ(r.pools.size(), 2u);
  EXPECT_EQ(r.pools[0].exemplars, std::vector<std::string>({"hi there", "what is 2+2"}));
  EXPECT_EQ(r.pools[1].min_score, 0.45);
  EXPECT_EQ(r.pools[1].exemplars_file, "/etc/tandem/hard.txt");
  // Absent: off, alias auto.
  ASSERT_OK_AND_ASSIGN(RouterConfig off, ParseRouterConfigYaml("models: [{path: /m/a.gguf}]\n"));
  EXPECT_FALSE(off.routing.enabled());
  EXPECT_EQ(off.routing.alias, "auto");
}

TEST(RoutingConfigTest, ErrorsNameTheKey) {
  EXPECT_THAT(ParseRouterConfigYaml("routing: {pools: [{name: a, model: b, min_scor: 1}]}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("routing.pools[0]")));
  EXPECT_THAT(ParseRouterConfigYaml("routing: {temperature: warm}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("routing.temperature: want a number, got 'warm'")));
  EXPECT_THAT(ParseRouterConfigYaml("routing: {pools: {name: a}}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("routing.pools: want a list")));
  EXPECT_THAT(ParseRouterConfigYaml("routing: {cache: on}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cache")));

  struct Case {
    void (*edit)(RoutingConfig&);
    const char* want;
  };
  const Case cases[] = {
      {[](RoutingConfig& r) { r.pools.pop_back(); }, "routing.pools: want at least two pools"},
      {[](RoutingConfig& r) { r.pools[1].min_score = 0; }, "routing.pools[1].min_score must be in"},
      {[](RoutingConfig& r) { r.pools[0].min_score = 0.1; },
       "routing.pools[0].min_score must be 0"},
      {[](RoutingConfig& r) { r.pools[1].min_score = 1.5; }, "routing.pools[1].min_score"},
      {[](RoutingConfig& r) { r.pools[1].name = "small"; },
       "routing.pools[1].name 'small' is used twice"},
      {[](RoutingConfig& r) { r.pools[1].model = "small-model"; },
       "routing.pools[1].model 'small-model' is also routing.pools[0].model"},
      {[](RoutingConfig& r) { r.pools[0].model = ""; }, "routing.pools[0].model is empty"},
      {[](RoutingConfig& r) { r.pools[0].name = ""; }, "routing.pools[0].name is empty"},
      {[](RoutingConfig& r) { r.embedding_weight = 2; }, "routing.embedding_weight"},
      {[](RoutingConfig& r) { r.neighbors = 0; }, "routing.neighbors"},
      {[](RoutingConfig& r) { r.temperature = 0; }, "routing.temperature"},
      {[](RoutingConfig& r) { r.alias = ""; }, "routing.alias is empty"},
      {[](RoutingConfig& r) { r.alias = "large-model"; },
       "routing.alias: 'large-model' is also models[1].name"},
  };
  for (const Case& k : cases) {
    RouterConfig c = WithModels();
    c.routing = TwoPools();
    c.routing.pools[0].model = "small-model";
    c.routing.pools[1].model = "large-model";
    ASSERT_TRUE(c.Validate().ok()) << c.Validate();
    k.edit(c.routing);
    EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(k.want)))
        << k.want;
  }
}

}  // namespace
}  // namespace tandem::router
