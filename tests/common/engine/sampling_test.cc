// Tests for Sampler, SamplingParams::Validate and StopStringMatcher. Every
// random draw is seeded, so each run sees the same numbers; statistical bounds
// are chosen so a correct sampler would fail them with a random seed with
// probability well under 1e-3.

#include "common/engine/sampling.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

// Logits whose softmax at temperature 1 is `probs` (up to float rounding).
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) {
    logits.push_back(static_cast<float>(std::log(p)));
  }
  return logits;
}

std::vector<float> RandomLogits(int32_t vocab, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> logits(vocab);
  for (float& l : logits) {
    // Portable: top 53 bits to [0, 1), then to [-scale, scale).
    l = static_cast<float>((static_cast<double>(rng() >> 11) * 0x1.0p-53 * 2.0 - 1.0) * scale);
  }
  return logits;
}

std::vector<double> LogSoftmaxDouble(const std::vector<float>& logits) {
  double m = -std::numeric_limits<double>::infinity();
  for (float l : logits) {
    m = std::max(m, static_cast<double>(l));
  }
  double sum = 0.0;
  for (float l : logits) {
    sum += std::exp(static_cast<double>(l) - m);
  }
  const double log_z = m + std::log(sum);
  std::vector<double> out;
  for (float l : logits) {
    out.push_back(static_cast<double>(l) - log_z);
  }
  return out;
}

std::map<int32_t, int> Histogram(Sampler& sampler, const std::vector<float>& logits, int draws,
                                 const std::vector<int32_t>& history = {}) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    ++counts[sampler.Sample(logits, history).token];
  }
  return counts;
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  struct Case {
    const char* name;
    std::vector<float> logits;
    int32_t expected;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {"single max", {0.1f, 3.0f, -2.0f, 2.9f}, 1},
      {"max last", {-1.0f, -2.0f, 5.0f}, 2},
      {"tie picks lowest id", {1.0f, 7.0f, 3.0f, 7.0f, 7.0f}, 1},
      {"all equal", {0.5f, 0.5f, 0.5f}, 0},
      {"negative", {-3.0f, -1.5f, -1.5f}, 1},
      {"-inf masked", {-inf, -inf, -10.0f}, 2},
      {"NaN skipped", {nan, 1.0f, nan, 2.0f}, 3},
      {"single token", {4.0f}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Sampler sampler(SamplingParams{});  // temperature 0
    EXPECT_EQ(sampler.Sample(c.logits, {}).token, c.expected);
  }
}

TEST(SamplerTest, EmptyLogitsReturnsNoToken) {
  Sampler sampler(SamplingParams{});
  EXPECT_EQ(sampler.Sample({}, {}).token, -1);
}

TEST(SamplerTest, TopKOneEqualsGreedyAtAnyTemperature) {
  const std::vector<float> logits = RandomLogits(1000, /*seed=*/5);
  Sampler greedy(SamplingParams{});
  const int32_t argmax = greedy.Sample(logits, {}).token;
  std::vector<float> tied = logits;
  tied[argmax + 1] = tied[argmax];  // a tie after the argmax: still the lower id
  for (float t : {0.1f, 1.0f, 5.0f, 100.0f}) {
    SCOPED_TRACE(absl::StrCat("temperature=", t));
    SamplingParams p;
    p.temperature = t;
    p.top_k = 1;
    p.seed = 17;
    Sampler sampler(p);
    for (int i = 0; i < 50; ++i) {
      ASSERT_EQ(sampler.Sample(logits, {}).token, argmax);
      ASSERT_EQ(sampler.Sample(tied, {}).token, argmax);
    }
  }
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const std::vector<float> logits = RandomLogits(5000, /*seed=*/9, /*scale=*/2.0f);
  auto draw = [&logits](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.seed = seed;
    Sampler sampler(p);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 200; ++i) {
      tokens.push_back(sampler.Sample(logits, {}).token);
    }
    return tokens;
  };
  const std::vector<int32_t> a = draw(1234);
  EXPECT_EQ(a, draw(1234));
  EXPECT_NE(a, draw(1235));
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 50u);  // it is really sampling
}

TEST(SamplerTest, DrawIsPortable) {
  // With n equal weights the draw is floor(n * u), u built from the top 53
  // bits of one mt19937_64 output (fully specified by the C++ standard), so
  // the tokens are pinned for every standard library.
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 2024;
  Sampler sampler(p);
  std::mt19937_64 engine(2024);
  const std::vector<float> logits(8, 0.0f);
  for (int i = 0; i < 100; ++i) {
    const double u = static_cast<double>(engine() >> 11) * 0x1.0p-53;
    ASSERT_EQ(sampler.Sample(logits, {}).token, static_cast<int32_t>(u * 8)) << "draw " << i;
  }
}

TEST(SamplerTest, EmpiricalDistributionMatchesSoftmax) {
  // 20000 draws from a 4-token distribution, at temperatures 1 and 2 (p ~ q^(1/T)).
  // Pearson chi-square with 3 degrees of freedom: P(X > 16.27) = 0.001 for a
  // correct sampler, so 16.27 rejects a wrong distribution without flaking.
  // Also each frequency within 0.015 of its probability: the standard error is
  // at most sqrt(0.25 / 20000) = 0.0035, so that is more than 4 sigma.
  constexpr int kDraws = 20000;
  const std::vector<double> q = {0.1, 0.2, 0.3, 0.4};
  for (float t : {1.0f, 2.0f}) {
    SCOPED_TRACE(absl::StrCat("temperature=", t));
    std::vector<double> expected;
    double z = 0.0;
    for (double qi : q) {
      expected.push_back(std::pow(qi, 1.0 / t));
      z += expected.back();
    }
    for (double& e : expected) {
      e /= z;
    }
    SamplingParams p;
    p.temperature = t;
    p.seed = 99;
    Sampler sampler(p);
    const std::map<int32_t, int> counts = Histogram(sampler, LogitsFor(q), kDraws);
    double chi2 = 0.0;
    for (int32_t tok = 0; tok < 4; ++tok) {
      const double observed = counts.count(tok) ? counts.at(tok) : 0;
      const double exp_count = expected[tok] * kDraws;
      chi2 += (observed - exp_count) * (observed - exp_count) / exp_count;
      EXPECT_NEAR(observed / kDraws, expected[tok], 0.015) << "token " << tok;
    }
    EXPECT_LT(chi2, 16.27);
    EXPECT_EQ(counts.size(), 4u);
  }
}

TEST(SamplerTest, TruncationKeepsExactlyTheRightTokens) {
  // Probabilities at temperature 1, most likely first.
  const std::vector<double> probs = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005};
  struct Case {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    std::set<int32_t> allowed;
  };
  const Case cases[] = {
      {"top_k 3", 1.0f, 3, 1.0f, 0.0f, {0, 1, 2}},
      {"top_k larger than vocab", 1.0f, 100, 1.0f, 0.0f, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"top_p 0.7: 0.4+0.25 < 0.7 <= 0.8", 1.0f, 0, 0.7f, 0.0f, {0, 1, 2}},
      {"top_p 0.6", 1.0f, 0, 0.6f, 0.0f, {0, 1}},
      {"top_p tiny keeps one", 1.0f, 0, 1e-6f, 0.0f, {0}},
      {"top_p 0.96", 1.0f, 0, 0.96f, 0.0f, {0, 1, 2, 3, 4, 5}},
      {"min_p 0.3: p >= 0.12", 1.0f, 0, 1.0f, 0.3f, {0, 1, 2}},
      {"min_p 0.2: p >= 0.08", 1.0f, 0, 1.0f, 0.2f, {0, 1, 2, 3}},
      {"min_p 1 keeps the max", 1.0f, 0, 1.0f, 1.0f, {0}},
      // top-k first, then top-p over the renormalised survivors: 0.4 / 0.65 >= 0.6.
      {"top_k 2 then top_p 0.6", 1.0f, 2, 0.6f, 0.0f, {0}},
      // Temperature 0.5 squares the odds: p0 = 0.16 / 0.2587 = 0.62.
      {"temperature sharpens top_p", 0.5f, 0, 0.6f, 0.0f, {0}},
      // Temperature 2 flattens: p / p_max = sqrt(q / 0.4) >= 0.45 for q >= 0.081.
      {"temperature flattens min_p", 2.0f, 0, 1.0f, 0.45f, {0, 1, 2, 3}},
      {"top_p and min_p: the tighter wins", 1.0f, 0, 0.96f, 0.2f, {0, 1, 2, 3}},
      {"all three", 1.0f, 4, 0.7f, 0.1f, {0, 1}},
      // After top-k, min-p still binds: p / p_max >= 0.3 keeps q >= 0.12.
      {"top_k then min_p", 1.0f, 5, 1.0f, 0.3f, {0, 1, 2}},
  };
  // "all three": top-4 renormalised = {0.444, 0.278, 0.167, 0.111}; top_p 0.7
  // keeps {0, 1} (0.722); min_p 0.1 (>= 0.044) removes none of those.
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.seed = 7;
    ASSERT_OK(p.Validate());
    Sampler sampler(p);
    const std::map<int32_t, int> counts = Histogram(sampler, LogitsFor(probs), 5000);
    std::set<int32_t> drawn;
    for (const auto& [token, n] : counts) {
      drawn.insert(token);
    }
    EXPECT_EQ(drawn, c.allowed) << "drawn: " << absl::StrJoin(drawn, ",");
  }
}

TEST(SamplerTest, TopKTieAtTheBoundaryKeepsLowerIds) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler sampler(p);
  const std::map<int32_t, int> counts = Histogram(sampler, {1.0f, 0.0f, 1.0f, 1.0f}, 2000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_GT(counts.count(0), 0u);
  EXPECT_GT(counts.count(2), 0u);
}

TEST(SamplerTest, MaskedAndNanLogitsAreNeverDrawn) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingParams p;
  p.temperature = 1.5f;
  p.seed = 3;
  Sampler sampler(p);
  const std::map<int32_t, int> counts =
      Histogram(sampler, {-inf, 0.0f, nan, 0.5f, -inf, -1.0f}, 3000);
  std::set<int32_t> drawn;
  for (const auto& [token, n] : counts) {
    drawn.insert(token);
  }
  EXPECT_EQ(drawn, (std::set<int32_t>{1, 3, 5}));
}

TEST(SamplerTest, LargeVocabTruncation) {
  // 150k vocab: top-p over the whole vocabulary goes through the incremental
  // partial sort; draws are checked against a brute-force top-p set (with
  // 1e-4 of extra mass, so float-vs-double rounding at the cut cannot flake;
  // the exact cut is TruncationKeepsExactlyTheRightTokens' job).
  constexpr int32_t kVocab = 150000;
  const std::vector<float> logits = RandomLogits(kVocab, /*seed=*/21, /*scale=*/8.0f);
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> lp = LogSoftmaxDouble(logits);
  double cumulative = 0.0;
  std::set<int32_t> allowed;
  for (int32_t t : order) {
    allowed.insert(t);
    cumulative += std::exp(lp[t]);
    if (cumulative >= 0.5 + 1e-4) {
      break;
    }
  }
  ASSERT_GT(allowed.size(), 1024u);  // crosses several sorted slices
  ASSERT_LT(allowed.size(), static_cast<size_t>(kVocab / 10));
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  p.seed = 8;
  Sampler sampler(p);
  for (int i = 0; i < 300; ++i) {
    const int32_t token = sampler.Sample(logits, {}).token;
    ASSERT_TRUE(allowed.count(token)) << "token " << token << " outside the top-p set";
  }
}

TEST(SamplerTest, RepetitionPenaltyChangesTheArgmax) {
  struct Case {
    const char* name;
    std::vector<float> logits;
    std::vector<int32_t> history;
    float penalty;
    int32_t window;
    int32_t expected;
  };
  const Case cases[] = {
      {"no penalty", {2.0f, 1.9f, -1.0f}, {0}, 1.0f, 64, 0},
      {"positive logit divided", {2.0f, 1.9f, -1.0f}, {0}, 1.5f, 64, 1},  // 1.33 < 1.9
      {"negative logit multiplied", {-1.0f, -1.2f}, {0}, 2.0f, 64, 1},   // -2 < -1.2
      {"penalty < 1 encourages", {1.0f, 1.5f}, {0}, 0.5f, 64, 0},        // 2 > 1.5
      // Applied once per distinct token: 2 / 1.5 = 1.33 > 1.2 (thrice would be 0.59).
      {"distinct tokens once", {2.0f, 1.2f}, {0, 0, 0}, 1.5f, 64, 0},
      // Token 0 is outside the last 2 tokens of history.
      {"outside the window", {2.0f, 1.9f}, {0, 5, 5}, 1.5f, 2, 0},
      {"window 0 means all", {2.0f, 1.9f}, {0, 5, 5}, 1.5f, 0, 1},
      {"out-of-vocab ids ignored", {2.0f, 1.9f}, {-3, 99}, 1.5f, 64, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SamplingParams p;
    p.repetition_penalty = c.penalty;
    p.repetition_window = c.window;
    p.logprobs = true;
    Sampler sampler(p);
    const SampleResult r = sampler.Sample(c.logits, c.history);
    EXPECT_EQ(r.token, c.expected);
    // The reported logprob is still that of the raw logits.
    EXPECT_NEAR(r.logprob, LogSoftmaxDouble(c.logits)[c.expected], 1e-5);
  }
}

TEST(SamplerTest, LogprobsMatchDoubleLogSoftmax) {
  // Sizes off a multiple of 4 exercise the vectorised passes' tails.
  for (int32_t vocab : {4, 7, 32000, 32003, 150000}) {
    SCOPED_TRACE(absl::StrCat("vocab=", vocab));
    const std::vector<float> logits = RandomLogits(vocab, /*seed=*/vocab, /*scale=*/12.0f);
    const std::vector<double> ref = LogSoftmaxDouble(logits);
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&ref](int32_t a, int32_t b) { return ref[a] > ref[b]; });
    for (float t : {0.0f, 0.7f}) {
      SamplingParams p;
      p.temperature = t;
      p.repetition_penalty = 1.3f;  // must not affect the reported values
      p.logprobs = true;
      p.top_logprobs = 5;
      p.seed = 1;
      Sampler sampler(p);
      const std::vector<int32_t> history = {order[0], order[3]};
      for (int i = 0; i < 5; ++i) {
        const SampleResult r = sampler.Sample(logits, history);
        ASSERT_GE(r.token, 0);
        EXPECT_NEAR(r.logprob, ref[r.token], 1e-5);
        const size_t n = std::min<size_t>(5, vocab);
        ASSERT_EQ(r.top_logprobs.size(), n);
        for (size_t k = 0; k < n; ++k) {
          EXPECT_EQ(r.top_logprobs[k].token, order[k]) << "rank " << k;
          EXPECT_NEAR(r.top_logprobs[k].logprob, ref[order[k]], 1e-5) << "rank " << k;
        }
      }
    }
  }
}

TEST(SamplerTest, TopLogprobsOffLeavesListEmpty) {
  Sampler sampler(SamplingParams{});
  const SampleResult r = sampler.Sample({1.0f, 2.0f}, {});
  EXPECT_EQ(r.token, 1);
  EXPECT_TRUE(r.top_logprobs.empty());
}

TEST(SamplingParamsTest, ValidateNamesTheField) {
  struct Case {
    const char* field;
    std::function<void(SamplingParams&)> mutate;
  };
  const Case cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = std::nanf(""); }},
      {"top_k", [](SamplingParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.5f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_window", [](SamplingParams& p) { p.repetition_window = -1; }},
      {"top_logprobs", [](SamplingParams& p) { p.top_logprobs = 21; }},
      {"top_logprobs", [](SamplingParams& p) { p.top_logprobs = -1; }},
      {"stop_strings[1]", [](SamplingParams& p) { p.stop_strings = {"x", ""}; }},
  };
  EXPECT_OK(SamplingParams{}.Validate());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    SamplingParams p;
    c.mutate(p);
    EXPECT_THAT(p.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)));
  }
  SamplingParams edge;
  edge.top_p = 1.0f;
  edge.min_p = 1.0f;
  edge.top_logprobs = 20;
  edge.temperature = 2.0f;
  edge.stop_strings = {"\n\n"};
  EXPECT_OK(edge.Validate());
}

// Feeds `pieces` one Append at a time; returns everything emitted (plus the
// flush when no stop matched) and whether a stop matched.
std::pair<std::string, bool> RunMatcher(std::vector<std::string> stops,
                                        const std::vector<std::string>& pieces) {
  StopStringMatcher m(std::move(stops));
  std::string out;
  bool stopped = false;
  for (const std::string& piece : pieces) {
    out += m.Append(piece, &stopped);
    if (stopped) {
      return {out, true};
    }
  }
  out += m.Flush();
  return {out, false};
}

TEST(StopStringMatcherTest, Cases) {
  struct Case {
    const char* name;
    std::vector<std::string> stops;
    std::vector<std::string> pieces;
    std::string out;
    bool stopped;
  };
  const Case cases[] = {
      {"no stops passes through", {}, {"ab", "cd"}, "abcd", false},
      {"no match", {"xyz"}, {"hello ", "world"}, "hello world", false},
      {"match in one piece", {"END"}, {"abcENDdef"}, "abc", true},
      {"match spanning pieces", {"END"}, {"abcE", "N", "Ddef"}, "abc", true},
      {"stop at the very start", {"END"}, {"EN", "D"}, "", true},
      {"false start released", {"END"}, {"abE", "Nx"}, "abENx", false},
      {"held prefix flushed", {"END"}, {"abcEN"}, "abcEN", false},
      {"multiple stops: first to complete", {"abc", "b"}, {"abc"}, "a", true},
      {"multiple stops: longest of equal end", {"bc", "abc"}, {"xabc"}, "x", true},
      {"multiple stops spanning", {"\n\n", "###"}, {"one\n", "two#", "##three"}, "one\ntwo", true},
      {"overlapping prefix", {"aab"}, {"a", "a", "a", "b"}, "a", true},
      {"utf8 stop", {"\xE3\x80\x82"}, {"hi\xE3", "\x80", "\x82", "more"}, "hi", true},
      {"empty stop ignored", {""}, {"abc"}, "abc", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto [out, stopped] = RunMatcher(c.stops, c.pieces);
    EXPECT_EQ(out, c.out);
    EXPECT_EQ(stopped, c.stopped);
  }
}

TEST(StopStringMatcherTest, HoldsBackOnlyPossibleStopPrefixes) {
  StopStringMatcher m({"STOP", "xy"});
  bool stopped = true;
  EXPECT_EQ(m.Append("abcST", &stopped), "abc");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Append("O", &stopped), "");
  EXPECT_EQ(m.Append("x", &stopped), "STO");  // "STOx" cannot become STOP; "x" can become "xy"
  EXPECT_EQ(m.Append("z", &stopped), "xz");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, AfterStopEmitsNothing) {
  StopStringMatcher m({"</s>"});
  bool stopped = false;
  EXPECT_EQ(m.Append("done</s>tail", &stopped), "done");
  EXPECT_TRUE(stopped);
  stopped = false;
  EXPECT_EQ(m.Append("more", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, SplitsDoNotChangeTheResult) {
  // Every way of cutting the text into two or three pieces gives the same
  // output as one Append.
  const std::vector<std::string> stops = {"<|end|>", "end", "\n\nUser:"};
  const std::string text = "the <|en of it\n\nUse no <|end|> after";
  const auto whole = RunMatcher(stops, {text});
  EXPECT_EQ(whole.first, "the <|en of it\n\nUse no <|");
  EXPECT_TRUE(whole.second);
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); j += 3) {
      const auto split =
          RunMatcher(stops, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
      ASSERT_EQ(split, whole) << "cuts at " << i << ", " << j;
    }
  }
}

}  // namespace
}  // namespace tandem::engine

namespace tandem::engine {
namespace {

// A sampler that skips the steps another process already sampled continues
// exactly where a single sampler would be.
TEST(SamplerSkipTest, SkipStepsContinuesTheStream) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 77;
  std::vector<float> logits(64);
  for (int i = 0; i < 64; ++i) logits[i] = std::sin(i * 0.7f) * 2.0f;
  Sampler whole(p);
  std::vector<int32_t> expected;
  for (int i = 0; i < 50; ++i) expected.push_back(whole.Sample(logits, {}).token);
  Sampler first(p);
  EXPECT_EQ(first.Sample(logits, {}).token, expected[0]);
  Sampler rest(p);
  rest.SkipSteps(1);
  std::vector<int32_t> got = {expected[0]};
  for (int i = 1; i < 50; ++i) got.push_back(rest.Sample(logits, {}).token);
  EXPECT_EQ(got, expected);
  Sampler no_skip(p);
  std::vector<int32_t> shifted = {expected[0]};
  for (int i = 1; i < 50; ++i) shifted.push_back(no_skip.Sample(logits, {}).token);
  EXPECT_NE(shifted, expected);
}

}  // namespace
}  // namespace tandem::engine
