// BuildWorkload end to end on the stories260K vocabulary: trace arrivals with
// window and speed-up, scaled and capped lengths, Mooncake prefix blocks,
// synthetic arrivals drawing lengths from a trace in order, fixed concurrency,
// repeat and paraphrase fractions, and option errors.

#include "bench/replay/workload.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/replay/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/bench/replay/test_tokenizers.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::replay {
namespace {

using engine::Tokenizer;
using ::tandem::testing::RequireSharedFile;
using ::tandem::testing::StatusIs;
using ::testing::DoubleNear;
using ::testing::HasSubstr;

constexpr char kAzureCode[] = "traces/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv";
constexpr char kMooncakeConversation[] = "traces/mooncake-fast25/conversation_trace.jsonl";
constexpr char kShareGpt[] = "traces/sharegpt-prompts-ml-energy/ShareGPT_V3_filtered_1000.json";

const Tokenizer& Stories() { return testing::TestTokenizer("stories260K"); }

std::vector<engine::TokenId> Encode(const std::string& text) {
  return testing::EncodePlain(Stories(), text);
}

int64_t CountTokens(const std::string& text) { return static_cast<int64_t>(Encode(text).size()); }

TEST(WorkloadTest, AzureTraceWindowSpeedupAndLengths) {
  WorkloadOptions options;
  options.trace_path = RequireSharedFile(kAzureCode);
  options.window_start_s = 180;
  options.duration_s = 30;
  options.speedup = 3;
  options.input_scale = 0.05;
  options.output_scale = 2;
  options.max_input_tokens = 200;
  options.min_input_tokens = 8;
  options.max_output_tokens = 64;
  ASSERT_OK_AND_ASSIGN(const Workload workload, BuildWorkload(options, Stories()));
  ASSERT_OK_AND_ASSIGN(const std::vector<TraceEntry> trace,
                       LoadTrace(options.trace_path, TraceFormat::kAzure));
  std::vector<const TraceEntry*> expected;
  for (const TraceEntry& e : trace) {
    if (e.arrival_s >= 180 && e.arrival_s < 210) {
      expected.push_back(&e);
    }
  }
  ASSERT_GT(expected.size(), 20u);
  ASSERT_EQ(workload.requests.size(), expected.size());
  EXPECT_EQ(workload.concurrency, 0);
  for (size_t i = 0; i < expected.size(); ++i) {
    const ReplayRequest& r = workload.requests[i];
    const TraceEntry& e = *expected[i];
    EXPECT_EQ(r.id, static_cast<int64_t>(i));
    EXPECT_EQ(r.source_line, e.line);
    EXPECT_EQ(r.kind, "trace");
    EXPECT_THAT(r.send_at_s, DoubleNear((e.arrival_s - expected[0]->arrival_s) / 3, 1e-9));
    const int64_t input = std::max<int64_t>(
        8, std::min<int64_t>(200, std::llround(static_cast<double>(e.input_tokens) * 0.05)));
    EXPECT_EQ(r.prompt_tokens, input) << "line " << e.line;
    EXPECT_EQ(CountTokens(r.prompt), input) << "line " << e.line;
    EXPECT_EQ(r.max_tokens, std::min<int64_t>(64, 2 * e.output_tokens));
  }
  EXPECT_LT(workload.requests.back().send_at_s, 10);
}

class MooncakeSeedTest : public ::testing::TestWithParam<uint64_t> {};

// Under any seed (seed 0: the unsalted text).
TEST_P(MooncakeSeedTest, HashIdsBecomeSharedPrefixes) {
  WorkloadOptions options;
  options.seed = GetParam();
  options.trace_path = RequireSharedFile(kMooncakeConversation);
  options.max_requests = 40;
  options.input_scale = 1.0 / 32;  // 512-token blocks -> 16
  options.hash_block_tokens = 16;
  options.prompt_source = RequireSharedFile(kShareGpt);
  ASSERT_OK_AND_ASSIGN(const Workload workload, BuildWorkload(options, Stories()));
  ASSERT_EQ(workload.requests.size(), 40u);
  ASSERT_OK_AND_ASSIGN(const std::vector<TraceEntry> trace,
                       LoadTrace(options.trace_path, TraceFormat::kAuto));
  int shared_pairs = 0;
  for (size_t a = 0; a < 40; ++a) {
    const ReplayRequest& ra = workload.requests[a];
    EXPECT_EQ(ra.prompt_tokens, std::max<int64_t>(1, std::llround(trace[a].input_tokens / 32.0)));
    EXPECT_EQ(CountTokens(ra.prompt), ra.prompt_tokens);
    for (size_t b = a + 1; b < 40; ++b) {
      const ReplayRequest& rb = workload.requests[b];
      const auto whole = [&](size_t i) {
        return std::min<size_t>(trace[i].hash_ids.size(), workload.requests[i].prompt_tokens / 16);
      };
      size_t shared = 0;
      while (shared < std::min(whole(a), whole(b)) &&
             trace[a].hash_ids[shared] == trace[b].hash_ids[shared]) {
        ++shared;
      }
      // Byte-identical text and token prefixes over the shared blocks; when
      // both go on with a different block, they diverge inside it.
      const std::vector<engine::TokenId> ta = Encode(ra.prompt);
      const std::vector<engine::TokenId> tb = Encode(rb.prompt);
      size_t common = 0;
      while (common < std::min(ta.size(), tb.size()) && ta[common] == tb[common]) {
        ++common;
      }
      EXPECT_GE(common, shared * 16) << a << " " << b;
      if (shared < std::min(whole(a), whole(b))) {
        EXPECT_LT(common, (shared + 1) * 16) << a << " " << b;
      }
      const std::string text = Stories().Decode(absl::MakeConstSpan(ta).subspan(0, shared * 16));
      EXPECT_TRUE(absl::StartsWith(ra.prompt, text) && absl::StartsWith(rb.prompt, text))
          << a << " " << b;
      shared_pairs += shared > 0;
    }
  }
  // Every conversation row starts with hash id 0 (the system prompt).
  EXPECT_GT(shared_pairs, 700);
}

INSTANTIATE_TEST_SUITE_P(Seeds, MooncakeSeedTest, ::testing::Values(0, 7));

// The same seed gives the same prompts; another seed shares no block and no
// request text with it (a kept server's prefix cache finds nothing of the
// other run beyond a few tokens).
TEST(WorkloadTest, SeedMovesThePromptText) {
  const auto build = [](uint64_t seed) {
    WorkloadOptions options;
    options.trace_path = RequireSharedFile(kMooncakeConversation);
    options.max_requests = 12;
    options.input_scale = 1.0 / 32;
    options.hash_block_tokens = 16;
    options.prompt_source = RequireSharedFile(kShareGpt);
    options.seed = seed;
    absl::StatusOr<Workload> w = BuildWorkload(options, Stories());
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *w : Workload{};
  };
  const Workload a = build(3);
  const Workload again = build(3);
  const Workload b = build(4);
  ASSERT_EQ(a.requests.size(), 12u);
  ASSERT_EQ(b.requests.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a.requests[i].prompt, again.requests[i].prompt);
    EXPECT_EQ(a.requests[i].prompt_tokens, b.requests[i].prompt_tokens);
    const std::vector<engine::TokenId> ta = Encode(a.requests[i].prompt);
    for (size_t j = 0; j < 12; ++j) {
      const std::vector<engine::TokenId> tb = Encode(b.requests[j].prompt);
      size_t common = 0;
      while (common < std::min(ta.size(), tb.size()) && ta[common] == tb[common]) {
        ++common;
      }
      EXPECT_LT(common, 16u) << "seed 3 request " << i << " vs seed 4 request " << j;
    }
  }
}

TEST(WorkloadTest, PoissonWithRepeatsAndParaphrases) {
  WorkloadOptions options;
  options.arrival = Arrival::kPoisson;
  options.rate = 4;
  options.max_requests = 600;
  options.fixed_input_tokens = 40;
  options.fixed_output_tokens = 16;
  options.repeat_fraction = 0.2;
  options.paraphrase_fraction = 0.1;
  options.seed = 11;
  ASSERT_OK_AND_ASSIGN(const Workload workload, BuildWorkload(options, Stories()));
  ASSERT_EQ(workload.requests.size(), 600u);
  int repeats = 0;
  int paraphrases = 0;
  std::set<std::string> earlier;
  std::set<std::string> originals;
  for (const ReplayRequest& r : workload.requests) {
    EXPECT_EQ(r.max_tokens, 16);
    EXPECT_EQ(r.source_line, 0);
    EXPECT_EQ(r.prompt_tokens, CountTokens(r.prompt));
    if (r.kind == "repeat") {
      ++repeats;
      EXPECT_EQ(earlier.count(r.prompt), 1u) << r.id;
    } else if (r.kind == "paraphrase") {
      ++paraphrases;
      EXPECT_EQ(originals.count(r.prompt), 0u) << r.id;
    } else {
      EXPECT_EQ(r.kind, "trace");
      EXPECT_EQ(r.prompt_tokens, 40);
      EXPECT_EQ(earlier.count(r.prompt), 0u) << "original prompts are unique";
      originals.insert(r.prompt);
    }
    earlier.insert(r.prompt);
  }
  // Binomial(599, p): 5 standard deviations.
  EXPECT_NEAR(repeats, 0.2 * 599, 5 * std::sqrt(599 * 0.2 * 0.8));
  EXPECT_NEAR(paraphrases, 0.1 * 599, 5 * std::sqrt(599 * 0.1 * 0.9));
  EXPECT_GT(repeats, 0);
  EXPECT_GT(paraphrases, 0);
  // Deterministic by seed.
  ASSERT_OK_AND_ASSIGN(const Workload again, BuildWorkload(options, Stories()));
  for (size_t i = 0; i < 600; ++i) {
    ASSERT_EQ(again.requests[i].prompt, workload.requests[i].prompt);
    ASSERT_EQ(again.requests[i].send_at_s, workload.requests[i].send_at_s);
  }
}

TEST(WorkloadTest, SyntheticArrivalsTakeTraceLengthsInOrder) {
  WorkloadOptions options;
  options.arrival = Arrival::kGamma;
  options.rate = 2;
  options.burstiness = 0.5;
  options.trace_path = RequireSharedFile(kAzureCode);
  options.duration_s = 5;  // the trace window: rows in the first 5 s
  options.max_requests = 30;
  options.input_scale = 0.01;
  ASSERT_OK_AND_ASSIGN(const Workload workload, BuildWorkload(options, Stories()));
  ASSERT_OK_AND_ASSIGN(auto trace, LoadTrace(options.trace_path, TraceFormat::kAzure));
  ASSERT_OK_AND_ASSIGN(auto window, SelectWindow(trace, 0, 5, 1, 0));
  ASSERT_FALSE(window.empty());
  ASSERT_LT(window.size(), 30u);
  ASSERT_FALSE(workload.requests.empty());
  ASSERT_LE(workload.requests.size(), 30u);
  for (const ReplayRequest& r : workload.requests) {
    EXPECT_LT(r.send_at_s, 5);  // also bounded by the duration
    const TraceEntry& row = window[r.id % window.size()];
    EXPECT_EQ(r.source_line, row.line);
    EXPECT_EQ(r.max_tokens, row.output_tokens);
    EXPECT_EQ(r.prompt_tokens, std::max<int64_t>(1, std::llround(row.input_tokens * 0.01)));
  }
}

TEST(WorkloadTest, FixedConcurrency) {
  WorkloadOptions options;
  options.arrival = Arrival::kConcurrency;
  options.concurrency = 4;
  options.max_requests = 12;
  options.fixed_input_tokens = 5;
  options.fixed_output_tokens = 3;
  ASSERT_OK_AND_ASSIGN(const Workload workload, BuildWorkload(options, Stories()));
  EXPECT_EQ(workload.concurrency, 4);
  ASSERT_EQ(workload.requests.size(), 12u);
  for (const ReplayRequest& r : workload.requests) {
    EXPECT_EQ(r.send_at_s, 0);
    EXPECT_EQ(r.prompt_tokens, 5);
    EXPECT_EQ(r.max_tokens, 3);
  }
}

TEST(WorkloadTest, BadOptionsAreRejected) {
  WorkloadOptions base;
  base.arrival = Arrival::kPoisson;
  base.rate = 1;
  base.max_requests = 3;
  base.fixed_input_tokens = 4;
  base.fixed_output_tokens = 4;
  const auto expect_error = [&](auto change, absl::string_view what) {
    WorkloadOptions o = base;
    change(o);
    EXPECT_THAT(BuildWorkload(o, Stories()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(std::string(what))));
  };
  expect_error([](WorkloadOptions& o) { o.arrival = Arrival::kTrace; }, "need a trace file");
  expect_error([](WorkloadOptions& o) { o.fixed_input_tokens = 0; }, "fixed input and output");
  expect_error([](WorkloadOptions& o) { o.repeat_fraction = 0.7, o.paraphrase_fraction = 0.4; },
               "sum <= 1");
  expect_error([](WorkloadOptions& o) { o.hash_block_tokens = 0; },
               "hash_block_tokens 0 is below the minimum 4");
  expect_error([](WorkloadOptions& o) { o.input_scale = 0; }, "length scales");
  expect_error([](WorkloadOptions& o) { o.min_input_tokens = 9, o.max_input_tokens = 8; },
               "min_input_tokens 9 exceeds");
  expect_error([](WorkloadOptions& o) { o.arrival = Arrival::kConcurrency; },
               "fixed concurrency 0");
  expect_error([](WorkloadOptions& o) { o.rate = 0; }, "request rate 0");
  expect_error(
      [](WorkloadOptions& o) {
        o.arrival = Arrival::kTrace;
        o.trace_path = RequireSharedFile(kAzureCode);
        o.window_start_s = 1e6;
      },
      "no rows in the window");
}

}  // namespace
}  // namespace tandem::replay
