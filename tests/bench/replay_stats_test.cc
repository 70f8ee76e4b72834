// tandem-replay's statistics (bench/replay/stats.h) and its output schema:
//  - a hand-computed example: percentiles (linear interpolation), TPOT and
//    ITL as vLLM defines them, goodput under each SLO, errors by status and
//    sent = ok + errors;
//  - 40 seeded random records against numpy (tests/reference/gen_replay_stats.py,
//    data in tests/data/replay_stats);
//  - --slo parsing and its errors;
//  - summary.json has every field the issue names; requests.jsonl round-trips.
#include <fstream>
#include <string>
#include <vector>

#include "bench/replay/record.h"
#include "bench/replay/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::replay {
namespace {

using json = nlohmann::json;
using ::tandem::testing::StatusIs;
using ::testing::DoubleNear;
using ::testing::HasSubstr;

RequestRecord Ok(double send, std::vector<double> tokens, double end, int64_t prompt) {
  RequestRecord r;
  r.ok = true;
  r.status = "OK";
  r.send_s = send;
  r.first_token_s = tokens.front();
  r.output_tokens = static_cast<int64_t>(tokens.size());
  r.chunk_times_s = std::move(tokens);
  r.end_s = end;
  r.prompt_tokens = prompt;
  return r;
}

RequestRecord Failed(double send, double end, const std::string& status) {
  RequestRecord r;
  r.status = status;
  r.send_s = send;
  r.end_s = end;
  r.prompt_tokens = 1000;  // not counted: failed
  return r;
}

// Three OK requests and three failed ones:
//   A: send 0, tokens at 1, 1.5, 2, 3, end 3   -> TTFT 1,   E2E 3, TPOT 2/3, ITL .5 .5 1
//   B: send 1, tokens at 1.5, 1.7, end 2       -> TTFT 0.5, E2E 1, TPOT 0.5, ITL .2
//   C: send 2, one token at 5, end 5           -> TTFT 3,   E2E 3, no TPOT, no ITL
//   UNAVAILABLE x2 (send 3, 4), CANCELLED (send 4.5, end 9): duration 9 - 0 = 9 s.
std::vector<RequestRecord> Example() {
  return {Ok(0, {1, 1.5, 2, 3}, 3, 10),  Ok(1, {1.5, 1.7}, 2, 20),
          Ok(2, {5}, 5, 30),             Failed(3, 3.1, "UNAVAILABLE"),
          Failed(4, 4, "UNAVAILABLE"),   Failed(4.5, 9, "CANCELLED")};
}

void ExpectDistribution(const Distribution& d, int64_t count, double mean, double p50, double p90,
                        double p99, const char* name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(d.count, count);
  EXPECT_NEAR(d.mean, mean, 1e-12);
  EXPECT_NEAR(d.p50, p50, 1e-12);
  EXPECT_NEAR(d.p90, p90, 1e-12);
  EXPECT_NEAR(d.p99, p99, 1e-12);
}

TEST(ReplayStatsTest, HandComputedExample) {
  const Summary s = Summarize(Example(), Slo{});
  EXPECT_EQ(s.requests_sent, 6);
  EXPECT_EQ(s.requests_ok, 3);
  EXPECT_EQ(s.requests_error, 3);
  EXPECT_EQ(s.requests_sent, s.requests_ok + s.requests_error);
  EXPECT_EQ(s.errors, (std::map<std::string, int64_t>{{"CANCELLED", 1}, {"UNAVAILABLE", 2}}));
  EXPECT_DOUBLE_EQ(s.duration_s, 9.0);
  EXPECT_EQ(s.input_tokens, 60);
  EXPECT_EQ(s.output_tokens, 7);
  EXPECT_NEAR(s.throughput_rps, 3.0 / 9, 1e-12);
  EXPECT_NEAR(s.output_tokens_per_s, 7.0 / 9, 1e-12);
  EXPECT_NEAR(s.goodput_rps, 3.0 / 9, 1e-12);  // no SLO: every OK request counts
  // TTFT {0.5, 1, 3}: p90 at rank 0.9 * 2 = 1.8 -> 1 + 0.8 * (3 - 1) = 2.6.
  ExpectDistribution(s.ttft_s, 3, 1.5, 1.0, 2.6, 2.96, "ttft");
  // TPOT {0.5, 2/3}: p90 at rank 0.9 -> 0.5 + 0.9 / 6.
  ExpectDistribution(s.tpot_s, 2, (0.5 + 2.0 / 3) / 2, (0.5 + 2.0 / 3) / 2, 0.5 + 0.9 / 6,
                     0.5 + 0.99 / 6, "tpot");
  // ITL {0.2, 0.5, 0.5, 1}: p50 at rank 1.5 -> 0.5; p90 at 2.7 -> 0.5 + 0.7 * 0.5.
  ExpectDistribution(s.itl_s, 4, 0.55, 0.5, 0.85, 0.985, "itl");
  ExpectDistribution(s.e2e_s, 3, 7.0 / 3, 3.0, 3.0, 3.0, "e2e");
}

TEST(ReplayStatsTest, GoodputCountsRequestsMeetingEverySlo) {
  struct Case {
    const char* slo;
    int64_t good;
  } cases[] = {
      {"ttft=2s,tpot=600ms", 1},  // A's TPOT 0.667 > 0.6, C's TTFT 3 > 2: only B
      {"tpot=700ms", 3},          // C has one token, so no TPOT: meets it
      {"e2e=2s", 1},              // only B (E2E 1)
      {"ttft=1s", 2},             // A (exactly 1: <= meets) and B
      {"ttft=100ms", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.slo);
    absl::StatusOr<Slo> slo = ParseSlo(c.slo);
    ASSERT_TRUE(slo.ok()) << slo.status();
    const Summary s = Summarize(Example(), *slo);
    EXPECT_EQ(s.requests_meeting_slo, c.good);
    EXPECT_NEAR(s.goodput_rps, c.good / 9.0, 1e-12);
  }
}

TEST(ReplayStatsTest, ChunksOfSeveralTokensSplitTheirGap) {
  // Chunks at 1.0 (1 token), 1.4 (2 tokens), 1.5 (1 token): ITL 0.2, 0.2, 0.1.
  RequestRecord r = Ok(0, {1.0, 1.4, 1.5}, 1.5, 5);
  r.chunk_tokens = {1, 2, 1};
  r.output_tokens = 4;
  std::vector<double> itl;
  AppendItl(r, itl);
  EXPECT_THAT(itl, ::testing::ElementsAre(DoubleNear(0.2, 1e-12), DoubleNear(0.2, 1e-12),
                                          DoubleNear(0.1, 1e-12)));
  EXPECT_NEAR(*Tpot(r), 0.5 / 3, 1e-12);
  // Without counts (HTTP): one gap per chunk.
  r.chunk_tokens.clear();
  itl.clear();
  AppendItl(r, itl);
  EXPECT_THAT(itl, ::testing::ElementsAre(DoubleNear(0.4, 1e-12), DoubleNear(0.1, 1e-12)));
}

TEST(ReplayStatsTest, PercentileInterpolatesLinearly) {
  const std::vector<double> one = {4};
  EXPECT_EQ(Percentile(one, 0), 4);
  EXPECT_EQ(Percentile(one, 99), 4);
  const std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 9.1);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 9.91);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 10);
}

TEST(ReplayStatsTest, NothingSentGivesZerosAndNullStatistics) {
  const Summary s = Summarize({}, Slo{});
  EXPECT_EQ(s.requests_sent, 0);
  EXPECT_EQ(s.duration_s, 0);
  EXPECT_EQ(s.throughput_rps, 0);
  const json j = SummaryJson(s);
  EXPECT_TRUE(j["ttft_s"]["p50"].is_null());
  EXPECT_EQ(j["ttft_s"]["count"], 0);
}

TEST(ReplayStatsTest, AgreesWithNumpyOnSeededRecords) {
  std::ifstream in(tandem::testing::RequireTestDataFile("replay_stats/records.jsonl"));
  std::vector<RequestRecord> records;
  for (std::string line; std::getline(in, line);) {
    absl::StatusOr<RequestRecord> r = RecordFromJson(json::parse(line));
    ASSERT_TRUE(r.ok()) << r.status();
    records.push_back(*std::move(r));
  }
  ASSERT_EQ(records.size(), 40u);
  std::ifstream ein(tandem::testing::RequireTestDataFile("replay_stats/expected.json"));
  const json want = json::parse(ein);
  Slo slo;
  slo.ttft_s = want["slo"]["ttft_s"].get<double>();
  slo.tpot_s = want["slo"]["tpot_s"].get<double>();
  slo.e2e_s = want["slo"]["e2e_s"].get<double>();
  const json got = SummaryJson(Summarize(records, slo));
  for (const char* key : {"requests_sent", "requests_ok", "requests_error",
                          "requests_meeting_slo", "output_tokens", "errors"}) {
    EXPECT_EQ(got[key], want[key]) << key;
  }
  for (const char* key :
       {"duration_s", "throughput_rps", "output_tokens_per_s", "goodput_rps"}) {
    EXPECT_THAT(got[key].get<double>(), DoubleNear(want[key].get<double>(), 1e-9)) << key;
  }
  for (const char* dist : {"ttft_s", "tpot_s", "itl_s", "e2e_s"}) {
    EXPECT_EQ(got[dist]["count"], want[dist]["count"]) << dist;
    for (const char* stat : {"mean", "p50", "p90", "p99"}) {
      EXPECT_THAT(got[dist][stat].get<double>(),
                  DoubleNear(want[dist][stat].get<double>(), 1e-9))
          << dist << "." << stat;
    }
  }
}

TEST(ReplayStatsTest, ParsesSlo) {
  absl::StatusOr<Slo> slo = ParseSlo("ttft=2s, tpot=200ms,e2e=1.5s");
  ASSERT_TRUE(slo.ok()) << slo.status();
  EXPECT_DOUBLE_EQ(*slo->ttft_s, 2.0);
  EXPECT_DOUBLE_EQ(*slo->tpot_s, 0.2);
  EXPECT_DOUBLE_EQ(*slo->e2e_s, 1.5);
  absl::StatusOr<Slo> none = ParseSlo("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->ttft_s || none->tpot_s || none->e2e_s);
}

TEST(ReplayStatsTest, BadSloNamesTheItem) {
  EXPECT_THAT(ParseSlo("ttft=2"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("'ttft=2': the value needs a unit")));
  EXPECT_THAT(ParseSlo("ttft=2s,itl=5ms"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown SLO 'itl'")));
  EXPECT_THAT(ParseSlo("tpot=-3ms"), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("'-3' is not a positive number")));
  EXPECT_THAT(ParseSlo("ttft"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("'ttft' is not NAME=VALUE")));
}

TEST(ReplayStatsTest, SummaryJsonHasEveryField) {
  const json j = SummaryJson(Summarize(Example(), *ParseSlo("ttft=2s")));
  for (const char* key :
       {"requests_sent", "requests_ok", "requests_error", "errors", "requests_meeting_slo", "slo",
        "duration_s", "input_tokens", "output_tokens", "throughput_rps", "input_tokens_per_s",
        "output_tokens_per_s", "goodput_rps", "cached_prompt_tokens", "cache_hits"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["errors"], (json{{"CANCELLED", 1}, {"UNAVAILABLE", 2}}));
  EXPECT_EQ(j["slo"], (json{{"ttft_s", 2.0}}));
  for (const char* dist : {"ttft_s", "tpot_s", "itl_s", "e2e_s"}) {
    for (const char* stat : {"mean", "p50", "p90", "p99"}) {
      EXPECT_TRUE(j[dist][stat].is_number()) << dist << "." << stat;
    }
  }
}

TEST(ReplayStatsTest, RecordJsonRoundTrips) {
  RequestRecord r = Example()[0];
  r.id = 7;
  r.kind = "repeat";
  r.protocol = "http";
  r.cached_prompt_tokens = 16;
  r.chunk_tokens = {1, 1, 1, 1};
  r.route_model = "m";
  r.colocated = false;
  const json j = RecordJson(r);
  EXPECT_DOUBLE_EQ(j["ttft_s"].get<double>(), 1.0);
  EXPECT_TRUE(j["cache_hit"].is_null());
  absl::StatusOr<RequestRecord> back = RecordFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(RecordJson(*back), j);
  json broken = j;
  broken.erase("send_s");
  EXPECT_THAT(RecordFromJson(broken),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no field 'send_s'")));
  broken = j;
  broken["output_tokens"] = "many";
  EXPECT_THAT(RecordFromJson(broken), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("field 'output_tokens'")));
}

}  // namespace
}  // namespace tandem::replay
