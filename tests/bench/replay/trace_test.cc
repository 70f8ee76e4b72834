// Trace parsers: hand-written Azure CSV and Mooncake JSONL files (including
// malformed rows, which must fail naming FILE:LINE), format detection, the
// time window, and the first rows and row counts of the real traces in
// ../shared/traces (PROVENANCE.md there gives the counts).

#include "bench/replay/trace.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::replay {
namespace {

using ::tandem::testing::RequireSharedFile;
using ::tandem::testing::StatusIs;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kAzureCode[] = "traces/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv";
constexpr char kMooncakeConversation[] = "traces/mooncake-fast25/conversation_trace.jsonl";

// Writes `text` to a fresh file named `name` and returns its path.
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::tandem::testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(AzureTraceTest, ParsesRowsWithCrlfAndNoFinalLineEnd) {
  const std::string path = WriteFile("azure.csv",
                                     "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                                     "2023-11-16 18:15:46.6805900,374,44\r\n"
                                     "2023-11-16 18:15:50.9951690,396,109\r\n"
                                     "2023-11-16 18:16:46.6805900,0,7");
  ASSERT_OK_AND_ASSIGN(const std::vector<TraceEntry> trace, LoadTrace(path, TraceFormat::kAuto));
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[0].arrival_s, 0);
  EXPECT_THAT(trace[1].arrival_s, DoubleNear(4.314579, 1e-6));
  EXPECT_THAT(trace[2].arrival_s, DoubleNear(60.0, 1e-6));
  EXPECT_EQ(trace[0].input_tokens, 374);
  EXPECT_EQ(trace[0].output_tokens, 44);
  EXPECT_EQ(trace[2].input_tokens, 0);
  EXPECT_EQ(trace[2].output_tokens, 7);
  EXPECT_EQ(trace[0].line, 2);
  EXPECT_EQ(trace[2].line, 4);
  EXPECT_TRUE(trace[1].hash_ids.empty());
}

TEST(AzureTraceTest, TimestampsParseToEpochSeconds) {
  // 2023-11-16T00:00:00Z is 1700092800 (date -u -d 2023-11-16 +%s).
  ASSERT_OK_AND_ASSIGN(const double t, ParseAzureTimestamp("2023-11-16 18:15:46.6805900"));
  EXPECT_THAT(t, DoubleNear(1700092800.0 + 18 * 3600 + 15 * 60 + 46.68059, 1e-5));
  ASSERT_OK_AND_ASSIGN(const double whole, ParseAzureTimestamp("2023-11-16 00:00:00"));
  EXPECT_EQ(whole, 1700092800.0);
  EXPECT_THAT(ParseAzureTimestamp("16/11/2023 18:15"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'16/11/2023 18:15'")));
}

struct MalformedCase {
  const char* name;
  const char* text;
  int line;
  const char* what;
};

// Each malformed file must be InvalidArgument "FILE:LINE: what".
void ExpectMalformed(const MalformedCase& c, TraceFormat format) {
  const std::string path = WriteFile(c.name, c.text);
  EXPECT_THAT(LoadTrace(path, format),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr(absl::StrCat(path, ":", c.line, ": ")),
                                        HasSubstr(c.what))))
      << c.name;
}

constexpr char kHeader[] = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

TEST(AzureTraceTest, MalformedRowsNameTheLine) {
  const std::string ok_row = "2023-11-16 18:15:46.6805900,374,44\n";
  const std::vector<std::pair<std::string, MalformedCase>> cases = {
      {"", {"no_header.csv", "", 1, "expected the Azure header"}},
      {"", {"header_only.csv", "", 2, "no rows"}},
      {ok_row + "2023-11-16 18:15:47.0,374\n", {"missing.csv", "", 3, "expected 3 fields"}},
      {ok_row + "2023-11-16 18:15:47.0,-5,44\n", {"negative.csv", "", 3, "ContextTokens -5"}},
      {ok_row + "2023-11-16 18:15:47.0,12,abc\n",
       {"non_numeric.csv", "", 3, "GeneratedTokens 'abc' is not an integer"}},
      {ok_row + "2023-11-16 18:15:47.0,12,\n",
       {"empty_field.csv", "", 3, "GeneratedTokens is empty"}},
      {ok_row + "yesterday,12,4\n", {"bad_time.csv", "", 3, "TIMESTAMP 'yesterday'"}},
      {ok_row + "2023-11-16 18:15:40.0,12,4\n", {"backwards.csv", "", 3, "goes backwards"}},
  };
  for (const auto& [rows, c] : cases) {
    std::string text = c.line == 1 ? "TIMESTAMP;ContextTokens\n" + ok_row : kHeader + rows;
    MalformedCase with_text = c;
    with_text.text = text.c_str();
    ExpectMalformed(with_text, TraceFormat::kAzure);
  }
}

TEST(MooncakeTraceTest, ParsesRows) {
  const std::string path = WriteFile(
      "mooncake.jsonl",
      "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 52, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 1500, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [0]}\n"
      "\n"
      "{\"timestamp\": 4000, \"input_length\": 700, \"output_length\": 1}\n");
  ASSERT_OK_AND_ASSIGN(const std::vector<TraceEntry> trace, LoadTrace(path, TraceFormat::kAuto));
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[0].arrival_s, 0);
  EXPECT_EQ(trace[1].arrival_s, 0);
  EXPECT_DOUBLE_EQ(trace[2].arrival_s, 2.5);
  EXPECT_THAT(trace[0].hash_ids, ElementsAre(0, 1));
  EXPECT_THAT(trace[1].hash_ids, ElementsAre(0));
  EXPECT_TRUE(trace[2].hash_ids.empty());
  EXPECT_EQ(trace[2].input_tokens, 700);
  EXPECT_EQ(trace[2].output_tokens, 1);
  EXPECT_EQ(trace[2].line, 4);
}

TEST(MooncakeTraceTest, MalformedRowsNameTheLine) {
  const std::string ok = "{\"timestamp\": 5, \"input_length\": 6, \"output_length\": 7}\n";
  const std::vector<std::pair<std::string, MalformedCase>> cases = {
      {ok + "{\"timestamp\": 6, \"input_length\": 6,\n",
       {"bad_json.jsonl", "", 2, "not valid JSON"}},
      {ok + "[1, 2]\n", {"array.jsonl", "", 2, "not a JSON object"}},
      {ok + "{\"timestamp\": 6, \"output_length\": 7}\n",
       {"missing.jsonl", "", 2, "missing field 'input_length'"}},
      {ok + "{\"timestamp\": 6, \"input_length\": 6, \"output_length\": -7}\n",
       {"negative.jsonl", "", 2, "'output_length' -7"}},
      {ok + "{\"timestamp\": 6, \"input_length\": \"6\", \"output_length\": 7}\n",
       {"string.jsonl", "", 2, "'input_length' is \"6\""}},
      {ok + "{\"timestamp\": 6, \"input_length\": 6.5, \"output_length\": 7}\n",
       {"fraction.jsonl", "", 2, "not a non-negative integer"}},
      {ok + "{\"input_length\": 6, \"output_length\": 7}\n",
       {"no_time.jsonl", "", 2, "missing field 'timestamp'"}},
      {ok + "{\"timestamp\": 6, \"input_length\": 6, \"output_length\": 7, \"hash_ids\": 3}\n",
       {"hash_scalar.jsonl", "", 2, "'hash_ids' is 3"}},
      {ok +
           "{\"timestamp\": 6, \"input_length\": 6, \"output_length\": 7, \"hash_ids\": [1, -2]}\n",
       {"hash_negative.jsonl", "", 2, "hash_ids[1] is -2"}},
      {ok + ok + "{\"timestamp\": 4, \"input_length\": 6, \"output_length\": 7}\n",
       {"backwards.jsonl", "", 3, "goes backwards"}},
  };
  for (const auto& [text, c] : cases) {
    MalformedCase with_text = c;
    with_text.text = text.c_str();
    ExpectMalformed(with_text, TraceFormat::kMooncake);
  }
}

TEST(TraceFormatTest, DetectsBothFormatsAndRejectsOthers) {
  const std::string azure = WriteFile(
      "detect.csv", absl::StrCat("\xEF\xBB\xBF", kHeader, "2023-11-16 18:15:46.68,1,2\n"));
  const std::string mooncake = WriteFile(
      "detect.jsonl", "\n{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n");
  const std::string other = WriteFile("detect.txt", "\nhello,world\n");
  ASSERT_OK_AND_ASSIGN(const TraceFormat azure_format, DetectTraceFormat(azure));
  EXPECT_EQ(azure_format, TraceFormat::kAzure);
  ASSERT_OK_AND_ASSIGN(const TraceFormat mooncake_format, DetectTraceFormat(mooncake));
  EXPECT_EQ(mooncake_format, TraceFormat::kMooncake);
  EXPECT_THAT(LoadTrace(other, TraceFormat::kAuto),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr(other + ":2: cannot detect the trace format"),
                                        HasSubstr("'hello,world'"))));
  EXPECT_THAT(LoadTrace("/nonexistent/trace.csv", TraceFormat::kAuto),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/trace.csv")));
  // A forced format that does not match is an error on line 1.
  EXPECT_THAT(LoadTrace(mooncake, TraceFormat::kAzure),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(mooncake + ":1: ")));
}

TEST(TraceWindowTest, SelectsSpeedsUpAndCaps) {
  std::vector<TraceEntry> trace;
  for (int i = 0; i < 10; ++i) {
    TraceEntry entry;
    entry.arrival_s = 2.0 * i;
    entry.input_tokens = i;
    entry.line = i + 2;
    trace.push_back(entry);
  }
  // [5, 15): rows at 6, 8, 10, 12, 14 -> relative 0..8, / 2.
  ASSERT_OK_AND_ASSIGN(auto window, SelectWindow(trace, 5, 10, 2.0, 0));
  ASSERT_EQ(window.size(), 5u);
  EXPECT_EQ(window[0].input_tokens, 3);
  EXPECT_EQ(window[0].arrival_s, 0);
  EXPECT_EQ(window[4].arrival_s, 4.0);
  ASSERT_OK_AND_ASSIGN(window, SelectWindow(trace, 5, 0, 1.0, 2));
  ASSERT_EQ(window.size(), 2u);
  EXPECT_EQ(window[1].arrival_s, 2.0);
  ASSERT_OK_AND_ASSIGN(window, SelectWindow(trace, 100, 0, 1.0, 0));
  EXPECT_TRUE(window.empty());
  EXPECT_THAT(SelectWindow(trace, 0, 0, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("speedup")));
  EXPECT_THAT(SelectWindow(trace, -1, 0, 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be >= 0")));
}

TEST(RealTraceTest, AzureCodeFirstRowsAndCount) {
  ASSERT_OK_AND_ASSIGN(const std::vector<TraceEntry> trace,
                       LoadTrace(RequireSharedFile(kAzureCode), TraceFormat::kAuto));
  ASSERT_EQ(trace.size(), 8819u);  // PROVENANCE.md
  // 2023-11-16 18:17:03.9799600,4808,10 / 18:17:04.0319600,3180,8 /
  // 18:17:04.0781490,110,27 / 18:17:04.1206440,7433,14 / 18:17:04.4249540,34,12
  const std::vector<std::tuple<double, int64_t, int64_t>> first = {{0.0, 4808, 10},
                                                                   {0.052, 3180, 8},
                                                                   {0.098189, 110, 27},
                                                                   {0.140684, 7433, 14},
                                                                   {0.444994, 34, 12}};
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_THAT(trace[i].arrival_s, DoubleNear(std::get<0>(first[i]), 1e-6)) << i;
    EXPECT_EQ(trace[i].input_tokens, std::get<1>(first[i])) << i;
    EXPECT_EQ(trace[i].output_tokens, std::get<2>(first[i])) << i;
    EXPECT_EQ(trace[i].line, static_cast<int64_t>(i) + 2);
  }
  // Last row 19:14:19.93: span 3436 s (PROVENANCE.md).
  EXPECT_THAT(trace.back().arrival_s, DoubleNear(3436, 1));
}

TEST(RealTraceTest, MooncakeConversationFirstRowsAndCount) {
  ASSERT_OK_AND_ASSIGN(const std::vector<TraceEntry> trace,
                       LoadTrace(RequireSharedFile(kMooncakeConversation), TraceFormat::kAuto));
  ASSERT_EQ(trace.size(), 12031u);  // PROVENANCE.md
  EXPECT_EQ(trace[0].input_tokens, 6758);
  EXPECT_EQ(trace[0].output_tokens, 500);
  EXPECT_THAT(trace[0].hash_ids, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13));
  EXPECT_EQ(trace[3].input_tokens, 2290);
  EXPECT_THAT(trace[3].hash_ids, ElementsAre(0, 42, 43, 44, 45));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(trace[i].arrival_s, 0) << i;  // the first five rows are all at 0
  }
  EXPECT_EQ(trace.back().arrival_s, 3536.999);
  // Every row: (blocks - 1) * 512 < input_length <= blocks * 512 (PROVENANCE.md).
  for (const TraceEntry& entry : trace) {
    const auto blocks = static_cast<int64_t>(entry.hash_ids.size());
    ASSERT_LT((blocks - 1) * 512, entry.input_tokens) << "line " << entry.line;
    ASSERT_LE(entry.input_tokens, blocks * 512) << "line " << entry.line;
  }
}

}  // namespace
}  // namespace tandem::replay
