// tandem-replay against a real cluster: `tandem up deploy/local/secure.yaml`
// (stories260K, a prefill and a decode worker, API keys) on 127.0.0.1.
//  - gRPC: 60 s of the Azure code trace at 6x speed-up (lengths scaled to the
//    model), key from --api-key: every request accounted for (sent = ok +
//    errors, one requests.jsonl line each), all OK, summary.json has every
//    field with sane values (TTFT <= E2E, output tokens = max_tokens), the
//    plots drawn;
//  - HTTP: a short run, key from $TANDEM_API_KEY, same checks;
//  - no key: every request UNAUTHENTICATED, the summary still written;
//  - a non-loopback --target is refused without --allow-remote.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/child_process.h"
#include "tests/testing/test_paths.h"

namespace tandem::replay {
namespace {

using json = nlohmann::json;
using ::tandem::testing::ChildOptions;
using ::tandem::testing::ChildProcess;
using ::testing::HasSubstr;

constexpr char kKey[] = "sk-tandem-dev-alice-00000000000000000000";  // deploy/local/secure-keys.yaml

struct Cluster {
  std::unique_ptr<ChildProcess> up;
  std::string grpc;
  std::string http;
};

// `tandem up deploy/local/secure.yaml` until ready; the router's addresses
// from its "router gRPC ADDRESS HTTP http://ADDRESS" line.
Cluster StartCluster() {
  Cluster c;
  ChildOptions o;
  o.argv = {TANDEM_CLI_BIN, "up", absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/secure.yaml")};
  o.log_dir = tandem::testing::TempDir();
  absl::StatusOr<std::unique_ptr<ChildProcess>> up = ChildProcess::Start(std::move(o));
  EXPECT_TRUE(up.ok()) << up.status();
  if (!up.ok()) {
    return c;
  }
  c.up = *std::move(up);
  absl::StatusOr<std::string> ready =
      c.up->WaitForLine("Ctrl-C stops the cluster", absl::Seconds(120));
  EXPECT_TRUE(ready.ok()) << ready.status() << "\n" << c.up->Tail();
  for (absl::string_view line : absl::StrSplit(c.up->output(), '\n')) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 5 && f[0] == "router" && f[1] == "gRPC" && f[3] == "HTTP") {
      c.grpc = f[2];
      c.http = std::string(absl::StripPrefix(f[4], "http://"));
    }
  }
  EXPECT_FALSE(c.grpc.empty() || c.http.empty()) << c.up->output();
  return c;
}

struct Replay {
  int exit_code = -1;
  std::string output;
  json summary;
  std::vector<json> records;
};

// Runs tandem-replay with `args` (plus the model and output flags) to its end.
Replay RunReplay(const std::string& dir, std::vector<std::string> args,
                 std::vector<std::string> env = {}) {
  Replay r;
  ChildOptions o;
  o.argv = {TANDEM_REPLAY_BIN, "--model=stories260K",
            "--tokenizer=" + tandem::testing::RequireSharedFile(
                                 "models/stories260K/stories260K.gguf"),
            "--output=" + dir, "--progress=lines"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.env = std::move(env);
  o.stderr_to_stdout = true;
  absl::StatusOr<std::unique_ptr<ChildProcess>> p = ChildProcess::Start(std::move(o));
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return r;
  }
  absl::StatusOr<std::string> out = (*p)->ReadToEnd(absl::Seconds(90));
  r.output = out.ok() ? *out : out.status().ToString();
  absl::StatusOr<int> code = (*p)->Wait(absl::Seconds(10));
  r.exit_code = code.ok() ? *code : -1;
  std::ifstream s(dir + "/summary.json");
  if (s) {
    r.summary = json::parse(s, nullptr, false);
  }
  std::ifstream lines(dir + "/requests.jsonl");
  for (std::string line; std::getline(lines, line);) {
    r.records.push_back(json::parse(line, nullptr, false));
  }
  return r;
}

// Every field the issue names, and sent = ok + errors = records.
void ExpectAccounted(const Replay& r) {
  for (const char* key :
       {"requests_sent", "requests_ok", "errors", "throughput_rps", "output_tokens_per_s",
        "goodput_rps", "ttft_s", "tpot_s", "itl_s", "e2e_s", "duration_s", "run"}) {
    EXPECT_TRUE(r.summary.contains(key)) << key << "\n" << r.output;
  }
  int64_t errors = 0;
  for (const auto& [status, n] : r.summary["errors"].items()) {
    errors += n.get<int64_t>();
  }
  EXPECT_EQ(r.summary["requests_sent"].get<int64_t>(),
            r.summary["requests_ok"].get<int64_t>() + errors);
  EXPECT_EQ(r.summary["requests_sent"].get<int64_t>(), static_cast<int64_t>(r.records.size()));
}

// A run where everything succeeded: sane statistics and records.
void ExpectAllOk(const Replay& r, const std::string& ok_status, int64_t min_requests) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectAccounted(r);
  EXPECT_GE(r.summary["requests_sent"].get<int64_t>(), min_requests) << r.output;
  EXPECT_EQ(r.summary["requests_ok"], r.summary["requests_sent"]) << r.summary.dump(1);
  EXPECT_GT(r.summary["throughput_rps"].get<double>(), 0);
  EXPECT_GT(r.summary["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(r.summary["goodput_rps"].get<double>(), 0);  // a generous SLO
  EXPECT_LE(r.summary["goodput_rps"].get<double>(), r.summary["throughput_rps"].get<double>());
  for (const char* dist : {"ttft_s", "tpot_s", "itl_s", "e2e_s"}) {
    const json& d = r.summary[dist];
    EXPECT_GT(d["count"].get<int64_t>(), 0) << dist;
    EXPECT_GE(d["p50"].get<double>(), 0) << dist;
    EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>()) << dist;
    EXPECT_LE(d["p90"].get<double>(), d["p99"].get<double>()) << dist;
  }
  EXPECT_LE(r.summary["ttft_s"]["p99"].get<double>(), r.summary["e2e_s"]["p99"].get<double>());
  for (const json& rec : r.records) {
    SCOPED_TRACE(rec.dump());
    EXPECT_EQ(rec["status"], ok_status);
    EXPECT_LE(rec["ttft_s"].get<double>(), rec["e2e_s"].get<double>());
    EXPECT_GE(rec["send_s"].get<double>(), 0);
    EXPECT_GT(rec["max_tokens"].get<int64_t>(), 0);
    EXPECT_EQ(rec["output_tokens"], rec["max_tokens"]);  // ignore_eos enforced the length
    EXPECT_GT(rec["prompt_tokens"].get<int64_t>(), 0);
    EXPECT_TRUE(rec["prompt_tokens_from_server"].get<bool>());
    EXPECT_EQ(rec["finish_reason"], "length");
    EXPECT_EQ(rec["route"]["model"], "stories260K");
  }
}

class ReplayClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(StartCluster()); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static Cluster* cluster_;
};
Cluster* ReplayClusterTest::cluster_ = nullptr;

std::vector<std::string> AzureCode60s() {
  return {"--trace=" + tandem::testing::RequireSharedFile(
                           "traces/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv"),
          "--duration=60", "--input-scale=0.1", "--max-output-tokens=16",
          "--slo=ttft=5s,tpot=1s"};
}

TEST_F(ReplayClusterTest, GrpcReplaysSixtySecondsOfTheAzureCodeTrace) {
  ASSERT_FALSE(cluster_->grpc.empty());
  const std::string dir = tandem::testing::TempDir() + "/grpc";
  std::vector<std::string> args = AzureCode60s();
  args.insert(args.end(), {"--target=" + cluster_->grpc, "--protocol=grpc",
                           absl::StrCat("--api-key=", kKey), "--speedup=6",
                           "--max-requests=40"});
  const Replay r = RunReplay(dir, args);
  ExpectAllOk(r, "OK", 30);
  EXPECT_THAT(r.output, HasSubstr("tandem-replay summary"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/latency_cdf.png") ||
              absl::StrContains(r.output, "gnuplot is not on PATH"))
      << r.output;
  // Trace lines and the replay's schedule: in order, 6x faster than the trace.
  EXPECT_EQ(r.records.front()["source_line"], 2);
  EXPECT_LE(r.records.back()["scheduled_s"].get<double>(), 60.0 / 6 + 0.01);
}

TEST_F(ReplayClusterTest, HttpReplaysWithTheKeyFromTheEnvironment) {
  ASSERT_FALSE(cluster_->http.empty());
  std::vector<std::string> args = AzureCode60s();
  args.insert(args.end(), {"--target=" + cluster_->http, "--protocol=http", "--speedup=12",
                           "--max-requests=12"});
  const Replay r = RunReplay(tandem::testing::TempDir() + "/http", args,
                             {absl::StrCat("TANDEM_API_KEY=", kKey)});
  ExpectAllOk(r, "200", 12);
  for (const json& rec : r.records) {
    EXPECT_TRUE(rec["cached_prompt_tokens"].is_number());  // usage.prompt_tokens_details
  }
}

TEST_F(ReplayClusterTest, WithoutTheKeyEveryRequestFailsAndIsCounted) {
  ASSERT_FALSE(cluster_->grpc.empty());
  std::vector<std::string> args = AzureCode60s();
  args.insert(args.end(), {"--target=" + cluster_->grpc, "--speedup=20", "--max-requests=5"});
  const Replay r = RunReplay(tandem::testing::TempDir() + "/nokey", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectAccounted(r);
  EXPECT_EQ(r.summary["requests_ok"], 0);
  EXPECT_EQ(r.summary["errors"], (json{{"UNAUTHENTICATED", 5}})) << r.output;
  EXPECT_EQ(r.summary["goodput_rps"], 0.0);
}

TEST(ReplayCliTest, RefusesARemoteTarget) {
  const Replay r = RunReplay(tandem::testing::TempDir() + "/remote",
                             {"--target=192.0.2.1:50051", "--rate=1", "--input-tokens=8",
                              "--output-tokens=4", "--max-requests=1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("is not loopback; pass --allow-remote"));
  EXPECT_FALSE(std::filesystem::exists(tandem::testing::TempDir() + "/remote/summary.json"));
}

}  // namespace
}  // namespace tandem::replay
