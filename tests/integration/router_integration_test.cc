// The real tandem-router in front of the real workers, all as subprocesses
// on 127.0.0.1 with free ports, driven over real HTTP and gRPC.
//
// Scenarios:
//  - colocated worker (tandem-decode --role=colocated): greedy tokens over
//    gRPC equal the independent reference decode of stories260K; HTTP
//    completions / chat, streaming and not, include_usage;
//  - bad input over HTTP (400 + OpenAI error body) and gRPC
//    (INVALID_ARGUMENT); the router keeps serving;
//  - the worker is SIGKILLed mid-stream: gRPC gets UNAVAILABLE and SSE an
//    error event, within 5 s; the worker leaves rotation;
//  - disaggregated (tandem-prefill + tandem-decode): the same greedy tokens;
//  - after a request, every process's /metrics (router, colocated, decode,
//    prefill) passes `promtool check metrics` with no finding;
//  - `tandem up` with deploy/local/*.yaml: healthy cluster, a request through
//    it, a dying worker is reported, SIGTERM stops everything (exit 0);
//  - `tandem up deploy/local/qwen.yaml` (Qwen2.5-Coder-0.5B-Instruct): a
//    coding question answered with a Python function; a get_weather tool
//    call (OpenAI tools), streaming and not; the follow-up with the tool
//    result answered as content; prompt token counts as transformers renders
//    and Hugging Face tokenizers counts them (chat_template/reference.json);
//  - `tandem up deploy/local/two-pool.yaml` (Qwen 0.5B + 1.5B pools, the
//    routed alias `auto`): /v1/models, easy -> small, hard -> large,
//    explicit model wins, route headers and metrics;
//  - `tandem up deploy/local/secure.yaml` (API keys): 401 + OpenAI body
//    without / with a wrong key on every HTTP route, 200 with the key, health
//    public, gRPC UNAUTHENTICATED without the metadata; the router logs the
//    tenant, never the key; routes name no worker;
//  - tandem-router warns when a public front listens beyond loopback without
//    keys (and not with keys).
//  - supervision (tandem up deploy/local/disaggregated.yaml): a SIGKILLed
//    decode, then prefill, worker turns the router's /health/ready 503 within
//    2 s (polled every 100 ms), naming the model and the missing role; 200
//    again once tandem up has restarted it, and a completion goes through;
//    the cluster's processes pass promtool before and after.
// Known gaps: no test of DNS discovery against a real resolver (unit-tested
// with an injected resolver), no multi-router test.

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/engine/engine.h"
#include "common/engine/generation.h"
#include "common/engine/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/sse.h"
#include "tests/testing/tls_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"
#include "tests/testing/watch_load.h"
#include "tests/testing/worker_process.h"

namespace tandem::router {
namespace {

namespace v1 = ::tandem::v1;
using json = nlohmann::json;
using ::tandem::testing::ChildOptions;
using ::tandem::testing::ChildProcess;
using ::tandem::testing::SseData;
using ::tandem::testing::StatusIs;
using ::tandem::testing::WorkerProcess;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Model() {
  return tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf");
}

// `argv` as a child process whose stderr goes to a log under the test's temp dir.
ChildOptions Logged(std::vector<std::string> argv) {
  ChildOptions options;
  options.argv = std::move(argv);
  options.log_dir = tandem::testing::TempDir();
  return options;
}

json Reference() {
  std::ifstream in(tandem::testing::RequireSharedFile("models/stories260K/reference_greedy.json"));
  return json::parse(in);
}

struct GrpcResult {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string text;
  v1::GenerateResponse last;
  absl::Duration elapsed;
};

// Streams a Generate call; `on_message` runs after each message (may kill things).
// `authorization`: the metadata's value ("" = none).
GrpcResult Generate(const std::string& address, const v1::GenerateRequest& req,
                    std::function<void(int)> on_message = nullptr,
                    const std::string& authorization = "") {
  auto stub =
      v1::Generation::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  GrpcResult r;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  if (!authorization.empty()) {
    ctx.AddMetadata("authorization", authorization);
  }
  // These tests exercise the workers: never an answer from the response
  // cache the deploy/local configs turn on (router/semantic_cache.h).
  ctx.AddMetadata("cache-control", "no-cache");
  absl::Time start = absl::Now();
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse m;
  int n = 0;
  while (reader->Read(&m)) {
    for (const v1::TokenDelta& t : m.tokens()) {
      r.ids.push_back(t.token());
    }
    r.text += m.text();
    r.last = m;
    if (on_message) {
      if (n == 0) {
        start = absl::Now();  // time the failure from here
      }
      on_message(n++);
    }
  }
  r.status = reader->Finish();
  r.elapsed = absl::Now() - start;
  return r;
}

v1::GenerateRequest BosOnly(int max_tokens) {
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.mutable_token_ids()->add_ids(1);  // BOS, as the reference decode
  req.set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0);
  return req;
}

// The worker at `address` reaches zero used blocks and no requests.
::testing::AssertionResult WorkerIdle(const std::string& address, absl::Duration timeout) {
  return tandem::testing::WatchLoadUntil(address, address, tandem::testing::Idle, "idle", timeout);
}

// GET /metrics of 127.0.0.1:`port` ("" when the request fails).
std::string MetricsText(int port) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(5, 0);
  auto res = cli.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
}

// GET /metrics on 127.0.0.1:`port` until `line` is one of its lines.
::testing::AssertionResult MetricReaches(int port, const std::string& line,
                                         absl::Duration timeout) {
  std::string body;
  for (const absl::Time give_up = absl::Now() + timeout; absl::Now() < give_up;
       absl::SleepFor(absl::Milliseconds(50))) {
    body = MetricsText(port);
    for (absl::string_view l : absl::StrSplit(body, '\n')) {
      if (l == line) {
        return ::testing::AssertionSuccess();
      }
    }
  }
  return ::testing::AssertionFailure() << "no line '" << line << "' in /metrics of port " << port
                                       << " after " << absl::FormatDuration(timeout) << ":\n"
                                       << body;
}

// The path of `name` in a directory of $PATH ("" when none has it).
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path == nullptr ? "" : path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

// promtool's "metric names should not contain ':'" for one of the three
// vLLM-compatible gauges the workers export under vLLM's own names.
bool IsVllmNameFinding(absl::string_view line) {
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"}) {
    if (line == absl::StrCat(name, " metric names should not contain ':'")) {
      return true;
    }
  }
  return false;
}

// `promtool check metrics` (Debian's `prometheus` package) finds nothing in
// the /metrics of `process` at 127.0.0.1:`port`: it exits 0 and prints
// nothing. A missing promtool is a failure, not a skip: scripts/setup.sh
// installs it.
::testing::AssertionResult PromtoolClean(const std::string& process, int port) {
  const std::string promtool = FindOnPath("promtool");
  if (promtool.empty()) {
    return ::testing::AssertionFailure()
           << "promtool is not on PATH: install Debian's `prometheus` package "
              "(scripts/setup.sh --deps)";
  }
  const std::string body = MetricsText(port);
  if (body.empty()) {
    return ::testing::AssertionFailure() << "no /metrics from " << process << " on port " << port;
  }
  const std::string file = absl::StrCat(tandem::testing::TempDir(), "/", process, ".metrics");
  std::ofstream(file) << body;
  absl::StatusOr<tandem::testing::RunResult> run = tandem::testing::RunToCompletion(
      {"/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", promtool, file}, absl::Seconds(60));
  if (!run.ok()) {
    return ::testing::AssertionFailure() << "promtool on " << process << ": " << run.status();
  }
  // The one finding allowed: the vLLM-compatible gauges keep vLLM's names,
  // colon included (common/serving/worker_metrics.h), which promtool's lint
  // reserves for recording rules. Exit 3 is "lint findings only".
  std::string findings;
  for (absl::string_view line : absl::StrSplit(run->output, '\n', absl::SkipEmpty())) {
    if (!IsVllmNameFinding(line)) {
      absl::StrAppend(&findings, line, "\n");
    }
  }
  const bool lint_only = run->exit_code == 3 && findings.empty();
  if ((run->exit_code != 0 && !lint_only) || !findings.empty()) {
    return ::testing::AssertionFailure()
           << "promtool check metrics on " << process << " (exit " << run->exit_code << "):\n"
           << run->output << "\n/metrics:\n"
           << body;
  }
  return ::testing::AssertionSuccess();
}

// The role a worker reports in the first event of Control.Watch (its
// snapshot); a failed RPC or a first event of another kind comes back as
// that status.
// `credentials`: a worker's internal mTLS (tandem up's); null: plaintext.
absl::StatusOr<v1::WorkerRole> WatchedRole(
    const std::string& address,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr) {
  auto stub = v1::Control::NewStub(grpc::CreateChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto reader = stub->Watch(&ctx, v1::WatchRequest());
  v1::WorkerEvent ev;
  const bool got = reader->Read(&ev);
  ctx.TryCancel();
  const grpc::Status st = reader->Finish();
  if (!got) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
  }
  if (!ev.has_snapshot()) {
    return absl::InternalError(
        absl::StrCat("first Watch event is not a snapshot: ", ev.DebugString()));
  }
  return ev.snapshot().role();
}

class RouterIntegrationTest : public ::testing::Test {
 protected:
  // Starts a worker; returns its gRPC address.
  std::string StartWorker(const std::string& binary, const std::string& role) {
    std::vector<std::string> args = {"--model=" + Model(),
                                     "--listen=127.0.0.1:0",
                                     "--metrics_port=0",
                                     "--metrics_host=127.0.0.1",
                                     "--threads=1",
                                     "--kv_blocks=512"};
    if (!role.empty()) {
      args.push_back("--role=" + role);
    }
    absl::StatusOr<std::unique_ptr<WorkerProcess>> p = WorkerProcess::Start(binary, args);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) {
      return "";
    }
    workers_.push_back(*std::move(p));
    return absl::StrCat("127.0.0.1:", workers_.back()->grpc_port());
  }

  void StartRouter(const std::vector<std::string>& workers, const std::string& mode,
                   int live_workers) {
    std::vector<std::string> argv = {TANDEM_ROUTER_BIN,
                                     "--model=stories260K=" + Model(),
                                     "--workers=" + absl::StrJoin(workers, ","),
                                     "--grpc_address=127.0.0.1:0",
                                     "--http_address=127.0.0.1:0",
                                     "--mode=" + mode,
                                     "--expose_route_workers",
                                     "--drain_grace=5s"};
    absl::StatusOr<std::unique_ptr<ChildProcess>> p = ChildProcess::Start(Logged(argv));
    ASSERT_TRUE(p.ok()) << p.status();
    router_ = *std::move(p);
    absl::StatusOr<std::string> ready = router_->WaitForLine("READY");
    ASSERT_TRUE(ready.ok()) << ready.status();
    grpc_ = absl::StrCat("127.0.0.1:", ChildProcess::IntField(*ready, "grpc_port"));
    http_port_ = ChildProcess::IntField(*ready, "http_port");
    // Wait until the router has every worker in rotation.
    httplib::Client cli("127.0.0.1", http_port_);
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    int live = -1;
    while (absl::Now() < give_up) {
      auto res = cli.Get("/health");
      if (res && res->status == 200) {
        json h = json::parse(res->body);
        live = h["workers"]["prefill"].get<int>() + h["workers"]["decode"].get<int>() +
               h["workers"]["colocated"].get<int>();
        if (live == live_workers) {
          return;
        }
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    FAIL() << "router sees " << live << " live workers, want " << live_workers << "\n"
           << router_->Tail();
  }

  std::unique_ptr<httplib::Client> Http() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", http_port_);
    c->set_read_timeout(60);
    return c;
  }

  std::vector<std::unique_ptr<WorkerProcess>> workers_;
  std::unique_ptr<ChildProcess> router_;
  std::string grpc_;
  int http_port_ = 0;
};

TEST_F(RouterIntegrationTest, ColocatedGreedyMatchesReference) {
  const std::string w = StartWorker(TANDEM_DECODE_BIN, "colocated");
  ASSERT_FALSE(w.empty()) << "the worker did not start";
  StartRouter({w}, "auto", 1);
  const json ref = Reference();
  const int n = 64;
  GrpcResult r = Generate(grpc_, BosOnly(n));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << router_->Tail();
  std::vector<int32_t> want(ref["generated_ids"].begin(), ref["generated_ids"].begin() + n);
  EXPECT_EQ(r.ids, want);
  EXPECT_TRUE(absl::StartsWith(ref["text_until_stop"].get<std::string>(), r.text)) << r.text;
  EXPECT_EQ(r.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.last.usage().completion_tokens(), n);
  EXPECT_TRUE(r.last.route().colocated());
  EXPECT_EQ(r.last.route().decode_worker(), w);
}

TEST_F(RouterIntegrationTest, ColocatedOverHttp) {
  const std::string w = StartWorker(TANDEM_DECODE_BIN, "colocated");
  ASSERT_FALSE(w.empty()) << "the worker did not start";
  StartRouter({w}, "colocated", 1);
  auto cli = Http();
  auto plain = cli->Post("/v1/completions",
                         R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":24,)"
                         R"("temperature":0})",
                         "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  json j = json::parse(plain->body);
  const std::string text = j["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  auto stream =
      cli->Post("/v1/completions",
                R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":24,)"
                R"("temperature":0,"stream":true,"stream_options":{"include_usage":true}})",
                "application/json");
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->status, 200);
  std::vector<std::string> data = SseData(stream->body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string streamed;
  for (size_t i = 0; i + 2 < data.size(); ++i) {
    streamed += json::parse(data[i])["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);  // greedy: the same answer either way
  EXPECT_EQ(json::parse(data[data.size() - 2])["usage"]["completion_tokens"], 24);

  auto chat = cli->Post("/v1/chat/completions",
                        R"({"model":"stories260K","messages":[{"role":"user","content":"Hi"}],)"
                        R"("max_tokens":8})",
                        "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  json c = json::parse(chat->body);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  auto models = cli->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "stories260K");
  auto metrics = cli->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body,
              HasSubstr("tandem_router_requests_total{model=\"stories260K\",code=\"ok\"} 3"));
}

TEST_F(RouterIntegrationTest, BadInputOverHttpAndGrpc) {
  const std::string w = StartWorker(TANDEM_DECODE_BIN, "colocated");
  ASSERT_FALSE(w.empty()) << "the worker did not start";
  StartRouter({w}, "auto", 1);
  auto cli = Http();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"prompt\":", ""},
      {"{\"prompt\":\"a\xff\"}", ""},
      {R"({"model":"gpt-4","prompt":"a"})", "model"},
      {R"({"prompt":"a","max_tokens":1000000})", "max_tokens"},
      {R"({"prompt":"a","max_tokens":0})", "max_tokens"},
      {R"({"prompt":"a","n":1000})", "n"},
      {R"({"prompt":"a","logprobs":100})", "logprobs"},
      {R"({"prompt":[1,5,70000]})", "prompt"},
  };
  for (const auto& [body, param] : bad) {
    auto res = cli->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 400) << body << " -> " << res->body;
    json e = json::parse(res->body);
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << res->body;
    if (param.empty()) {
      EXPECT_TRUE(e["error"]["param"].is_null());
    } else {
      EXPECT_EQ(e["error"]["param"], param) << res->body;
    }
  }
  v1::GenerateRequest big = BosOnly(1000000);
  GrpcResult r = Generate(grpc_, big);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("context length"));
  v1::GenerateRequest ids = BosOnly(4);
  ids.mutable_token_ids()->add_ids(70000);
  GrpcResult bad_id = Generate(grpc_, ids);
  EXPECT_EQ(bad_id.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_id.status.error_message(),
              HasSubstr("prompt token id 70000 at index 1 is outside the vocabulary"));
  // Still serving.
  EXPECT_TRUE(Generate(grpc_, BosOnly(4)).status.ok());
}

TEST_F(RouterIntegrationTest, WorkerKilledMidStreamGrpc) {
  const std::string w = StartWorker(TANDEM_DECODE_BIN, "colocated");
  ASSERT_FALSE(w.empty()) << "the worker did not start";
  StartRouter({w}, "auto", 1);
  WorkerProcess* worker = workers_[0].get();
  GrpcResult r = Generate(grpc_, BosOnly(1500), [worker](int n) {
    if (n == 1) {
      worker->Signal(SIGKILL);
    }
  });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  // Which role failed, never where (the address is in the router's log only).
  EXPECT_THAT(r.status.error_message(), HasSubstr("decode worker"));
  EXPECT_THAT(r.status.error_message(), ::testing::Not(HasSubstr(w)));
  EXPECT_LT(r.elapsed, absl::Seconds(5));
  // Out of rotation.
  GrpcResult again = Generate(grpc_, BosOnly(4));
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(again.status.error_message(), HasSubstr("no live worker for model"));
  EXPECT_THAT(again.status.error_message(), HasSubstr("live: 0 prefill, 0 decode, 0 colocated"));
}

TEST_F(RouterIntegrationTest, WorkerKilledMidStreamSse) {
  const std::string w = StartWorker(TANDEM_DECODE_BIN, "colocated");
  ASSERT_FALSE(w.empty()) << "the worker did not start";
  StartRouter({w}, "auto", 1);
  WorkerProcess* worker = workers_[0].get();
  httplib::Client cli("127.0.0.1", http_port_);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt":"Once upon a time","max_tokens":1500,"stream":true})";
  req.set_header("Content-Type", "application/json");
  std::string body;
  int chunks = 0;
  absl::Time killed = absl::InfiniteFuture();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    if (++chunks == 2) {
      worker->Signal(SIGKILL);
      killed = absl::Now();
    }
    return true;
  };
  auto res = cli.send(req);
  ASSERT_TRUE(res);
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));
  std::vector<std::string> data = SseData(body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  json err = json::parse(data[data.size() - 2]);
  ASSERT_TRUE(err.contains("error")) << body.substr(body.size() > 500 ? body.size() - 500 : 0);
  EXPECT_EQ(err["error"]["type"], "server_error");
}

TEST_F(RouterIntegrationTest, DisaggregatedGreedyMatchesReference) {
  const std::string d = StartWorker(TANDEM_DECODE_BIN, "decode");
  const std::string p = StartWorker(TANDEM_PREFILL_BIN, "");
  ASSERT_FALSE(d.empty() || p.empty()) << "a worker did not start";
  StartRouter({p, d}, "disaggregated", 2);
  const json ref = Reference();
  const int n = 48;
  GrpcResult r = Generate(grpc_, BosOnly(n));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\nrouter:\n"
                             << router_->Tail() << "\nprefill:\n"
                             << workers_[1]->Tail() << "\ndecode:\n"
                             << workers_[0]->Tail();
  std::vector<int32_t> want(ref["generated_ids"].begin(), ref["generated_ids"].begin() + n);
  EXPECT_EQ(r.ids, want);
  EXPECT_FALSE(r.last.route().colocated());
  EXPECT_EQ(r.last.route().prefill_worker(), p);
  EXPECT_EQ(r.last.route().decode_worker(), d);
  // A longer text prompt through the same pair, over HTTP.
  auto cli = Http();
  auto res = cli->Post("/v1/completions",
                       R"({"prompt":"Once upon a time, there was a little girl named Lily.",)"
                       R"("max_tokens":16,"temperature":0})",
                       "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

// Every process's /metrics, after a request so that labelled series and
// histograms exist, passes `promtool check metrics` with no finding: a
// colocated cluster, then a disaggregated one.
TEST_F(RouterIntegrationTest, PromtoolCheckMetricsCleanOnEveryProcess) {
  struct Worker {
    std::string binary, role, name;
  };
  struct Cluster {
    std::string mode;
    std::vector<Worker> workers;
  };
  const std::vector<Cluster> clusters = {
      {"colocated", {{TANDEM_DECODE_BIN, "colocated", "tandem-decode-colocated"}}},
      {"disaggregated",
       {{TANDEM_PREFILL_BIN, "", "tandem-prefill"},
        {TANDEM_DECODE_BIN, "decode", "tandem-decode"}}},
  };
  for (const Cluster& cluster : clusters) {
    SCOPED_TRACE(cluster.mode);
    router_.reset();
    workers_.clear();
    std::vector<std::string> addresses;
    for (const Worker& w : cluster.workers) {
      addresses.push_back(StartWorker(w.binary, w.role));
      ASSERT_FALSE(addresses.back().empty()) << w.name << " did not start";
    }
    const int live = static_cast<int>(addresses.size());
    ASSERT_NO_FATAL_FAILURE(StartRouter(addresses, cluster.mode, live));
    GrpcResult r = Generate(grpc_, BosOnly(8));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\nrouter:\n" << router_->Tail();
    EXPECT_EQ(r.last.route().colocated(), cluster.mode == "colocated");
    EXPECT_TRUE(PromtoolClean("tandem-router", http_port_));
    for (size_t i = 0; i < addresses.size(); ++i) {
      ASSERT_TRUE(WorkerIdle(addresses[i], absl::Seconds(10))) << cluster.workers[i].name;
      EXPECT_TRUE(PromtoolClean(cluster.workers[i].name, workers_[i]->metrics_port()));
    }
  }
}

// A client that cancels mid-stream: the router cancels its decode (and
// prefill) calls and both workers' pools return to zero used blocks.
TEST_F(RouterIntegrationTest, ClientCancelMidStreamFreesKvOnBothWorkers) {
  const std::string d = StartWorker(TANDEM_DECODE_BIN, "decode");
  const std::string p = StartWorker(TANDEM_PREFILL_BIN, "");
  ASSERT_FALSE(d.empty() || p.empty()) << "a worker did not start";
  StartRouter({p, d}, "disaggregated", 2);
  v1::GenerateRequest req = BosOnly(400);
  req.mutable_sampling()->set_ignore_eos(true);
  for (int t = 0; t < 60; ++t) req.mutable_token_ids()->add_ids(3 + (t * 7) % 500);
  auto stub =
      v1::Generation::NewStub(grpc::CreateChannel(grpc_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse m;
  int tokens = 0;
  while (tokens < 3 && reader->Read(&m)) tokens += m.tokens_size();
  ASSERT_GE(tokens, 3) << "the stream ended early";
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WorkerIdle(d, absl::Seconds(5)));
  EXPECT_TRUE(WorkerIdle(p, absl::Seconds(5)));
  // The decode worker ended the request as cancelled (its /metrics), not by
  // running out its 400 tokens.
  EXPECT_TRUE(MetricReaches(workers_[0]->metrics_port(), "tandem_decode_requests_total{code=\"CANCELLED\"} 1",
                            absl::Seconds(10)));
  EXPECT_THAT(MetricsText(workers_[0]->metrics_port()),
              Not(HasSubstr("tandem_decode_requests_total{code=\"OK\"}")));
}

// The issue's agreement test: 50 greedy prompts and 50 seeded
// temperature-0.8 prompts from 8 concurrent clients, through a disaggregated cluster (router +
// prefill + decode, KV over UCX) and a colocated cluster (router + colocated worker), give exactly
// the token ids of the single-process engine loop that tandem-generate runs (common/engine/generation.h),
// for every prompt.
TEST_F(RouterIntegrationTest, FiftyPromptsEightClientsAgreeAcrossClusters) {
  const std::string d = StartWorker(TANDEM_DECODE_BIN, "decode");
  const std::string p = StartWorker(TANDEM_PREFILL_BIN, "");
  const std::string c = StartWorker(TANDEM_DECODE_BIN, "colocated");
  ASSERT_FALSE(d.empty() || p.empty() || c.empty()) << "a worker did not start";
  StartRouter({p, d}, "disaggregated", 2);
  const std::string disaggregated = grpc_;
  std::unique_ptr<ChildProcess> disaggregated_router = std::move(router_);
  StartRouter({c}, "colocated", 1);
  const std::string colocated = grpc_;

  // Reference: the in-process engine loop on the same model.
  auto model = tandem::engine::Model::Load(Model());
  ASSERT_TRUE(model.ok()) << model.status();
  tandem::engine::EngineConfig ec;
  ec.num_threads = 1;
  ec.num_kv_blocks = 256;
  auto engine = tandem::engine::Engine::Create(**model, ec);
  ASSERT_TRUE(engine.ok()) << engine.status();

  constexpr int kPrompts = 50, kClients = 8, kMaxTokens = 24;
  std::mt19937 rng(2026);
  struct Case {
    v1::GenerateRequest request;
    std::vector<int32_t> want;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 2 * kPrompts; ++i) {
    const bool sampled = i >= kPrompts;
    std::vector<int32_t> prompt = {1};
    const int len = 1 + static_cast<int>(rng() % 70);
    for (int t = 0; t < len; ++t) prompt.push_back(3 + static_cast<int32_t>(rng() % 509));
    tandem::engine::GenerateOptions o;
    o.max_tokens = kMaxTokens;
    o.sampling.ignore_eos = true;
    if (sampled) {
      o.sampling.temperature = 0.8f;
      o.sampling.seed = 1000 + i;
    }
    auto r = tandem::engine::Generate(**engine, i, prompt, o);
    ASSERT_TRUE(r.ok()) << r.status();
    Case cs;
    cs.want = r->tokens;
    v1::GenerateRequest& req = cs.request;
    req.set_model("stories260K");
    for (int32_t t : prompt) req.mutable_token_ids()->add_ids(t);
    req.set_max_tokens(kMaxTokens);
    req.mutable_sampling()->set_ignore_eos(true);
    req.mutable_sampling()->set_temperature(o.sampling.temperature);
    if (sampled) req.mutable_sampling()->set_seed(o.sampling.seed);
    cases.push_back(std::move(cs));
  }

  // All 100 go from 8 concurrent clients, greedy and seeded interleaved, so
  // decode batches mix both and change size every step. The seeded ones match
  // only because every kernel is batch-invariant (a row's logits do not
  // depend on the batch; kernels_test checks it bitwise): a draw near a CDF
  // boundary would otherwise pick a neighbour.
  std::vector<size_t> order;
  for (int i = 0; i < kPrompts; ++i) {
    order.push_back(i);
    order.push_back(kPrompts + i);
  }
  for (const std::string& router : {disaggregated, colocated}) {
    SCOPED_TRACE(router == disaggregated ? "disaggregated" : "colocated");
    std::vector<GrpcResult> results(cases.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> clients;
    for (int k = 0; k < kClients; ++k) {
      clients.emplace_back([&] {
        for (size_t j = next++; j < order.size(); j = next++) {
          results[order[j]] = Generate(router, cases[order[j]].request);
        }
      });
    }
    for (std::thread& t : clients) t.join();
    for (size_t i = 0; i < cases.size(); ++i) {
      ASSERT_TRUE(results[i].status.ok())
          << "prompt " << i << ": " << results[i].status.error_message();
      EXPECT_EQ(results[i].ids, cases[i].want)
          << "prompt " << i << (i >= kPrompts ? " (temperature 0.8)" : " (greedy)");
    }
  }
}

// A process line of `tandem up`'s printout: "  NAME  gRPC ADDRESS ... pid PID ...".
struct UpProcess {
  std::string name;
  std::string grpc_address;
  std::string http_address;  // the router's ("HTTP http://ADDRESS")
  std::string log_path;      // a worker's ("log PATH")
  int metrics_port = -1;     // a worker's ("metrics http://HOST:PORT/metrics")
  pid_t pid = -1;
};

std::vector<UpProcess> UpProcesses(const std::string& output) {
  std::vector<UpProcess> out;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() < 4 || parts[1] != "gRPC") {
      continue;
    }
    UpProcess p;
    p.name = parts[0];
    p.grpc_address = parts[2];
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i] == "pid") {
        EXPECT_TRUE(absl::SimpleAtoi(parts[i + 1], &p.pid)) << line;
      } else if (parts[i] == "HTTP") {
        absl::string_view http = parts[i + 1];
        absl::ConsumePrefix(&http, "http://");
        p.http_address = std::string(http);
      } else if (parts[i] == "log") {
        p.log_path = parts[i + 1];
      } else if (parts[i] == "metrics" && absl::StartsWith(parts[i + 1], "http://") &&
                 absl::EndsWith(parts[i + 1], "/metrics")) {
        // A worker's; the router's (its HTTP port) is written "metrics http://…/metrics)".
        absl::string_view url = parts[i + 1];
        url.remove_suffix(std::strlen("/metrics"));
        EXPECT_TRUE(absl::SimpleAtoi(url.substr(url.rfind(':') + 1), &p.metrics_port)) << line;
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// An HTTP client for "host:port" with a read timeout (a test failure when
// the address is not host:port).
httplib::Client ClientFor(const std::string& http_address, time_t read_timeout_s) {
  const size_t colon = http_address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(http_address.substr(colon + 1), &port)) {
    ADD_FAILURE() << "'" << http_address << "' is not host:port";
  }
  httplib::Client cli(http_address.substr(0, colon), port);
  cli.set_read_timeout(read_timeout_s, 0);
  // Every request reaches the workers (the deploy/local configs turn the
  // response cache on).
  cli.set_default_headers({{"Cache-Control", "no-cache"}});
  return cli;
}

// `tandem up CONFIG`, once it says the cluster is ready (else the error,
// with its log's tail).
absl::StatusOr<std::unique_ptr<ChildProcess>> StartUp(const std::string& config) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> up =
      ChildProcess::Start(Logged({TANDEM_CLI_BIN, "up", config}));
  if (!up.ok()) {
    return up.status();
  }
  absl::StatusOr<std::string> ready =
      (*up)->WaitForLine("Ctrl-C stops the cluster", absl::Seconds(120));
  if (!ready.ok()) {
    return absl::Status(ready.status().code(),
                        absl::StrCat(ready.status().message(), "\n", (*up)->Tail()));
  }
  return up;
}

// Live workers the router's /health (readiness) counts, ready or not.
int RouterLiveWorkers(const std::string& http_address) {
  httplib::Client cli = ClientFor(http_address, 5);
  auto res = cli.Get("/health");
  // 503 is an honest answer here (a model lost its last worker of a role);
  // the body counts live workers either way.
  if (!res || (res->status != 200 && res->status != 503)) {
    return -1;
  }
  json h = json::parse(res->body);
  return h["workers"]["prefill"].get<int>() + h["workers"]["decode"].get<int>() +
         h["workers"]["colocated"].get<int>();
}

// `deploy_config` (a deploy/local file) under the test's temp dir, with the
// model's absolute path and `extra` YAML appended.
std::string CopyConfig(const std::string& deploy_config, const std::string& extra) {
  std::ifstream in(deploy_config);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    out += absl::StartsWith(line, "model:") ? absl::StrCat("model: ", Model()) : line;
    out += "\n";
  }
  const std::string path = absl::StrCat(tandem::testing::TempDir(), "/",
                                        std::filesystem::path(deploy_config).filename().string());
  std::ofstream(path) << out << extra;
  return path;
}

// The pid on tandem up's log line "tandem up: NAME restarted (...): pid N, ...",
// once it is there; -1 before.
pid_t RestartedPid(const ChildProcess& up, const std::string& name) {
  const std::string log = up.Tail(1 << 20);
  const std::string marker = absl::StrCat("tandem up: ", name, " restarted ");
  const size_t at = log.rfind(marker);
  if (at == std::string::npos) {
    return -1;
  }
  const std::string line = log.substr(at, log.find('\n', at) - at);
  const size_t pid_at = line.find(": pid ");
  pid_t pid = -1;
  if (pid_at == std::string::npos ||
      !absl::SimpleAtoi(line.substr(pid_at + 6, line.find(',', pid_at) - pid_at - 6), &pid)) {
    ADD_FAILURE() << "no pid on '" << line << "'";
  }
  return pid;
}

// `tandem up CONFIG` starts a router and `workers` workers of `roles`; a
// request goes through; a SIGKILLed worker leaves the router's rotation,
// tandem up restarts it (after restart.backoff) on its address, the router
// picks it up again and requests go through; SIGTERM stops every process
// (exit 0).
void TandemUp(const std::string& deploy_config, int workers,
              const std::multiset<v1::WorkerRole>& roles) {
  // A 2 s backoff: long enough to see the router drop the dead worker first.
  const std::string config = CopyConfig(deploy_config, "restart:\n  backoff: 2s\n");
  absl::StatusOr<std::unique_ptr<ChildProcess>> up = StartUp(config);
  ASSERT_TRUE(up.ok()) << up.status();
  ChildProcess& p = **up;
  const std::vector<UpProcess> procs = UpProcesses(p.output());
  ASSERT_EQ(procs.size(), static_cast<size_t>(workers) + 1) << p.output();
  ASSERT_EQ(procs[0].name, "router") << p.output();
  ASSERT_FALSE(procs[0].http_address.empty()) << p.output();
  const std::string address = procs[0].grpc_address;
  // tandem up picks no ports (one released before a child binds it can be
  // taken in between): every config it writes, beside the logs, says port 0.
  const std::string run_dir = std::filesystem::path(procs[1].log_path).parent_path().string();
  auto config_of = [&](const std::string& name) {
    std::ifstream in(absl::StrCat(run_dir, "/", name, ".yaml"));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  EXPECT_THAT(config_of("router"), ::testing::AllOf(HasSubstr("grpc_address: 127.0.0.1:0\n"),
                                                    HasSubstr("http_address: 127.0.0.1:0\n")));
  // Internal mutual TLS (internal_tls: dev): tandem up made a CA in the run
  // dir and gave every worker and the router its files; UCX on loopback.
  const proto::TlsFiles tls{run_dir + "/certs/ca.pem", run_dir + "/certs/cluster.pem",
                            run_dir + "/certs/cluster.key"};
  const std::shared_ptr<grpc::ChannelCredentials> creds = testing::ClientCredentials(tls);
  EXPECT_THAT(config_of("router"), HasSubstr(tls.cert_file));
  for (size_t i = 1; i < procs.size(); ++i) {
    EXPECT_THAT(config_of(procs[i].name),
                ::testing::AllOf(HasSubstr("listen: 127.0.0.1:0\n"), HasSubstr("metrics_port: 0\n"),
                                 HasSubstr("tls_cert: " + tls.cert_file),
                                 HasSubstr("ucx_net_devices: lo\n")))
        << procs[i].name;
    // A caller without the cluster's certificate is refused.
    EXPECT_THAT(WatchedRole(procs[i].grpc_address),
                StatusIs(absl::StatusCode::kUnavailable, ::testing::_))
        << procs[i].name << " answered a plaintext Control.Watch";
  }
  // Every worker printed answers Control.Watch with its snapshot.
  std::multiset<v1::WorkerRole> watched;
  for (size_t i = 1; i < procs.size(); ++i) {
    absl::StatusOr<v1::WorkerRole> role = WatchedRole(procs[i].grpc_address, creds);
    ASSERT_TRUE(role.ok()) << procs[i].name << " at " << procs[i].grpc_address << ": "
                           << role.status();
    watched.insert(*role);
  }
  EXPECT_EQ(watched, roles);
  EXPECT_EQ(RouterLiveWorkers(procs[0].http_address), workers);
  GrpcResult r = Generate(address, BosOnly(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << p.Tail();
  EXPECT_EQ(r.ids.size(), 16u);
  // Kill one worker (the decode one when disaggregated): the router drops it;
  // tandem up keeps supervising.
  const UpProcess& victim = procs.back();
  ASSERT_GT(victim.pid, 0) << p.output();
  kill(victim.pid, SIGKILL);
  absl::StatusOr<v1::WorkerRole> gone = WatchedRole(victim.grpc_address, creds);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10);
       gone.ok() && absl::Now() < give_up; gone = WatchedRole(victim.grpc_address, creds)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable) << gone.status();
  int live = RouterLiveWorkers(procs[0].http_address);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(30);
       live != workers - 1 && absl::Now() < give_up;
       live = RouterLiveWorkers(procs[0].http_address)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(live, workers - 1) << "the router's /health after " << victim.name << " died";
  EXPECT_THAT(p.Wait(absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_))
      << "tandem up exited\n"
      << p.Tail();
  // tandem up restarts it: a new process on the same address, which the
  // router sees again and routes to.
  pid_t restarted = RestartedPid(p, victim.name);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
       restarted < 0 && absl::Now() < give_up; restarted = RestartedPid(p, victim.name)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GT(restarted, 0) << victim.name << " was not restarted\n" << p.Tail();
  EXPECT_NE(restarted, victim.pid);
  EXPECT_EQ(kill(restarted, 0), 0) << victim.name << " (pid " << restarted << ") is not running";
  absl::StatusOr<v1::WorkerRole> back = WatchedRole(victim.grpc_address, creds);
  EXPECT_TRUE(back.ok()) << victim.name << " at " << victim.grpc_address << ": " << back.status();
  live = RouterLiveWorkers(procs[0].http_address);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(30);
       live != workers && absl::Now() < give_up; live = RouterLiveWorkers(procs[0].http_address)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(live, workers) << "the router's /health after " << victim.name << " was restarted\n"
                           << p.Tail();
  for (int i = 0; i < 2; ++i) {
    GrpcResult again = Generate(address, BosOnly(16));
    ASSERT_TRUE(again.status.ok()) << again.status.error_message() << "\n" << p.Tail();
    EXPECT_EQ(again.ids, r.ids);
  }
  // SIGTERM stops everything cleanly: tandem up exits 0 after the router
  // and every worker it started are gone (reaped).
  p.Signal(SIGTERM);
  const absl::StatusOr<int> exit_code = p.Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << "tandem up did not exit: " << exit_code.status() << "\n"
                              << p.Tail();
  EXPECT_EQ(*exit_code, 0) << p.Tail();
  std::vector<std::pair<std::string, pid_t>> pids = {{victim.name, restarted}};
  for (const UpProcess& proc : procs) {
    pids.emplace_back(proc.name, proc.pid);
  }
  for (const auto& [name, pid] : pids) {
    const int rc = kill(pid, 0);
    const int err = errno;
    EXPECT_TRUE(rc == -1 && err == ESRCH)
        << name << " (pid " << pid << ") still exists after tandem up exited";
  }
}

// The router's GET /health/ready at `http_address`: status and body (0 and
// "" when it does not answer).
std::pair<int, std::string> RouterReady(const std::string& http_address) {
  httplib::Client cli = ClientFor(http_address, 5);
  auto res = cli.Get("/health/ready");
  return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
}

// Polls the router's /health/ready every 100 ms until it answers `status`
// or `bound` has passed; returns how long that took and the body.
::testing::AssertionResult ReadyTurns(const std::string& http_address, int status,
                                      absl::Duration bound, absl::Duration* took,
                                      std::string* body) {
  const absl::Time start = absl::Now();
  std::pair<int, std::string> r = RouterReady(http_address);
  while (r.first != status && absl::Now() - start < bound) {
    absl::SleepFor(absl::Milliseconds(100));
    r = RouterReady(http_address);
  }
  *took = absl::Now() - start;
  *body = r.second;
  if (r.first != status) {
    return ::testing::AssertionFailure() << "/health/ready still " << r.first << " after "
                                         << absl::FormatDuration(*took) << ", want " << status
                                         << ": " << r.second;
  }
  return ::testing::AssertionSuccess();
}

// The issue's supervision check with real processes: kill -9 the decode
// worker, then the prefill worker, of `tandem up deploy/local/disaggregated.yaml`.
// Each time the router's readiness is 503 within 2 s, naming the model and
// the role it lost, and 200 again once tandem up has restarted the worker
// (it restarts after restart.backoff, 1 s here, plus the model load); then a
// completion goes through. Every process of the cluster passes promtool.
TEST(TandemUpTest, ReadinessFollowsAKilledWorkerAndItsRestart) {
  const std::string config =
      CopyConfig(absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/disaggregated.yaml"),
                 "restart:\n  backoff: 1s\n");
  absl::StatusOr<std::unique_ptr<ChildProcess>> up = StartUp(config);
  ASSERT_TRUE(up.ok()) << up.status();
  ChildProcess& p = **up;
  const std::vector<UpProcess> procs = UpProcesses(p.output());
  ASSERT_EQ(procs.size(), 3u) << p.output();
  const std::string router_http = procs[0].http_address;
  absl::Duration took;
  std::string body;
  ASSERT_TRUE(ReadyTurns(router_http, 200, absl::Seconds(30), &took, &body)) << p.Tail();
  ASSERT_TRUE(Generate(procs[0].grpc_address, BosOnly(8)).status.ok()) << p.Tail();
  int router_port = -1;
  ASSERT_TRUE(absl::SimpleAtoi(router_http.substr(router_http.rfind(':') + 1), &router_port));
  for (const UpProcess& proc : procs) {
    EXPECT_TRUE(PromtoolClean(proc.name, proc.name == "router" ? router_port : proc.metrics_port));
  }

  for (const std::string role : {"decode", "prefill"}) {
    SCOPED_TRACE(role);
    const UpProcess* victim = nullptr;
    for (const UpProcess& proc : procs) {
      if (absl::StartsWith(proc.name, role)) victim = &proc;
    }
    ASSERT_NE(victim, nullptr) << p.output();
    ASSERT_EQ(kill(victim->pid, SIGKILL), 0) << victim->name << " pid " << victim->pid;
    // The issue's bound, exactly: 503 within 2 s of the death.
    ASSERT_TRUE(ReadyTurns(router_http, 503, absl::Seconds(2), &took, &body)) << p.Tail();
    std::cout << "[ measured ] router /health/ready 503 " << absl::FormatDuration(took)
              << " after " << victim->name << " was killed" << std::endl;
    EXPECT_THAT(body, HasSubstr("\"model\":\"stories260K\""));
    EXPECT_THAT(body, HasSubstr(absl::StrCat("no live ", role, " worker")));
    // tandem up restarts it and the router takes it back.
    ASSERT_TRUE(ReadyTurns(router_http, 200, absl::Seconds(60), &took, &body))
        << victim->name << " not back\n" << p.Tail();
    std::cout << "[ measured ] router /health/ready 200 again " << absl::FormatDuration(took)
              << " later" << std::endl;
    const pid_t restarted = RestartedPid(p, victim->name);
    EXPECT_GT(restarted, 0) << p.Tail();
    EXPECT_NE(restarted, victim->pid);
    GrpcResult again = Generate(procs[0].grpc_address, BosOnly(8));
    EXPECT_TRUE(again.status.ok()) << again.status.error_message() << "\n" << p.Tail();
    EXPECT_EQ(again.ids.size(), 8u);
  }
  EXPECT_TRUE(PromtoolClean("router", router_port));

  p.Signal(SIGTERM);
  const absl::StatusOr<int> exit_code = p.Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << "tandem up did not exit: " << exit_code.status() << "\n"
                              << p.Tail();
  EXPECT_EQ(*exit_code, 0) << p.Tail();
}

TEST(TandemUpTest, Colocated) {
  TandemUp(absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/colocated.yaml"), 2,
           {v1::WORKER_ROLE_COLOCATED, v1::WORKER_ROLE_COLOCATED});
}

TEST(TandemUpTest, Disaggregated) {
  TandemUp(absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/disaggregated.yaml"), 2,
           {v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_DECODE});
}

// The README's main command's cluster (deploy/local/chat.yaml): the real
// SmolLM2-135M-Instruct from the model cache (scripts/fetch_models.sh), its
// own chat template, disaggregated over UCX with mTLS. A real question gets a
// real answer (greedy, so the same one every time) ending at <|im_end|>.
// The question is one whose greedy answer does not hang on rounding: in the
// float reference (tests/reference/gen_real_model_golden.py's forward pass)
// every step of "The capital of France is Paris.<|im_end|>" leads its
// runner-up by >= 1.0 logit (1.02-6.17), with llama.cpp's int8 activation
// rounding simulated too (1.06-6.05): the margin the golden test asks of
// SmolLM2. "What is the capital of France?", asked here before, starts on a
// tie: "The" 25.33 vs "L" 25.24 in the reference, and int8 activations flip
// it; a change of rounding in attention (the 512-bit kernel, 2026-12-05)
// flipped the engine's too, into "L'Étoile, la Marseillaise, ...".
TEST(TandemUpTest, ChatWithSmolLm2) {
  // As written: the model is a name, which tandem up resolves in the cache.
  const std::string config = absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/chat.yaml");
  absl::StatusOr<std::unique_ptr<ChildProcess>> up = StartUp(config);
  ASSERT_TRUE(up.ok()) << up.status();
  ChildProcess& p = **up;
  const std::vector<UpProcess> procs = UpProcesses(p.output());
  ASSERT_EQ(procs.size(), 3u) << p.output();
  const std::string http = procs[0].http_address;
  httplib::Client cli = ClientFor(http, 120);
  auto res = cli.Post("/v1/chat/completions",
                      R"({"model":"smollm2-135m-instruct","temperature":0,"max_tokens":48,)"
                      R"("messages":[{"role":"user","content":"Name the capital of France."}]})",
                      "application/json");
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  json body = json::parse(res->body);
  const std::string answer = body["choices"][0]["message"]["content"];
  EXPECT_THAT(answer, HasSubstr("Paris")) << res->body;
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << res->body;  // <|im_end|>
  // The GGUF's template: SmolLM2's default system prompt, then the question.
  EXPECT_EQ(body["usage"]["prompt_tokens"], 36) << res->body;
  p.Signal(SIGTERM);
  const absl::StatusOr<int> exit_code = p.Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << p.Tail();
  EXPECT_EQ(*exit_code, 0) << p.Tail();
}

// deploy/local/qwen.yaml as written: Qwen2.5-Coder-0.5B-Instruct from the
// model cache. The requests and their prompt token counts come from
// tests/reference/gen_chat_templates.py (transformers' rendering, HF
// tokenizers' count), not from our own output; the answers are greedy.
TEST(TandemUpTest, ChatWithQwen) {
  std::ifstream ref_in(testing::RequireTestDataFile("chat_template/reference.json"));
  std::stringstream ref_text;
  ref_text << ref_in.rdbuf();
  const json ref = json::parse(ref_text.str());
  std::map<std::string, json> cases;
  for (const json& m : ref["models"]) {
    for (const json& c : m.value("cluster_cases", json::array())) {
      cases[c["name"]] = c;
    }
  }
  ASSERT_EQ(cases.size(), 3u);
  // A reference request with the test's sampling settings (keys kept in
  // order: the tools reach the model as written).
  auto body = [&](const std::string& name, bool stream) {
    nlohmann::ordered_json b =
        nlohmann::ordered_json::parse(cases[name]["request"].get<std::string>());
    b["model"] = "qwen2.5-coder-0.5b-instruct";
    b["temperature"] = 0;
    b["max_tokens"] = 64;
    b["stream"] = stream;
    return b.dump();
  };
  const std::string config = absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/qwen.yaml");
  absl::StatusOr<std::unique_ptr<ChildProcess>> up = StartUp(config);
  ASSERT_TRUE(up.ok()) << up.status();
  ChildProcess& p = **up;
  const std::vector<UpProcess> procs = UpProcesses(p.output());
  ASSERT_EQ(procs.size(), 3u) << p.output();
  httplib::Client cli = ClientFor(procs[0].http_address, 120);

  // A coding question: a Python function, ended by <|im_end|>.
  auto res = cli.Post("/v1/chat/completions", body("code", false), "application/json");
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  json r = json::parse(res->body);
  const std::string code = r["choices"][0]["message"]["content"];
  EXPECT_THAT(code, HasSubstr("def is_even(n)")) << res->body;
  EXPECT_THAT(code, HasSubstr("return")) << res->body;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << res->body;
  EXPECT_EQ(r["usage"]["prompt_tokens"], cases["code"]["prompt_tokens"]) << res->body;

  // A tool: the model calls it.
  res = cli.Post("/v1/chat/completions", body("weather_call", false), "application/json");
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  r = json::parse(res->body);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << res->body;
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null()) << res->body;
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << res->body;
  const json& call = r["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_THAT(call["id"].get<std::string>(), ::testing::StartsWith("chatcmpl-tool-"));
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}))
      << res->body;
  EXPECT_EQ(r["usage"]["prompt_tokens"], cases["weather_call"]["prompt_tokens"]) << res->body;

  // The same, streamed: one tool_calls delta, finish_reason tool_calls.
  res = cli.Post("/v1/chat/completions", body("weather_call", true), "application/json");
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  std::vector<json> deltas;
  std::string finish;
  for (const std::string& data : testing::SseData(res->body)) {
    if (data == "[DONE]") {
      continue;
    }
    const json chunk = json::parse(data);
    for (const json& c : chunk["choices"]) {
      if (c["delta"].contains("tool_calls")) {
        deltas.push_back(c["delta"]["tool_calls"]);
      }
      if (!c["finish_reason"].is_null()) {
        finish = c["finish_reason"];
      }
    }
  }
  ASSERT_EQ(deltas.size(), 1u) << res->body;
  EXPECT_EQ(deltas[0][0]["index"], 0) << res->body;
  EXPECT_EQ(deltas[0][0]["function"]["name"], "get_weather") << res->body;
  EXPECT_EQ(deltas[0][0]["function"]["arguments"], call["function"]["arguments"]) << res->body;
  EXPECT_EQ(finish, "tool_calls") << res->body;

  // The tool's result: the answer is content, no further call. (The 0.5B
  // echoes the call and the result rather than writing a sentence.)
  res = cli.Post("/v1/chat/completions", body("weather_answer", false), "application/json");
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  r = json::parse(res->body);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << res->body;
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls")) << res->body;
  EXPECT_THAT(r["choices"][0]["message"]["content"].get<std::string>(), HasSubstr("sunny"))
      << res->body;
  EXPECT_EQ(r["usage"]["prompt_tokens"], cases["weather_answer"]["prompt_tokens"]) << res->body;

  p.Signal(SIGTERM);
  const absl::StatusOr<int> exit_code = p.Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << p.Tail();
  EXPECT_EQ(*exit_code, 0) << p.Tail();
}

// deploy/local/secure.yaml: both public fronts want a key; health stays
// public; the router's log names the tenant, never the key; routes name no
// worker.
TEST(TandemUpTest, SecureWantsAKeyOnBothFronts) {
  const std::string deploy = absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/");
  const std::string config = CopyConfig(deploy + "secure.yaml", "");
  // The config names its key file relative to itself: copy that beside it.
  std::filesystem::copy_file(deploy + "secure-keys.yaml",
                             std::filesystem::path(config).parent_path() / "secure-keys.yaml",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string key = "sk-tandem-dev-alice-00000000000000000000";  // the committed dev key
  absl::StatusOr<std::unique_ptr<ChildProcess>> up = StartUp(config);
  ASSERT_TRUE(up.ok()) << up.status();
  ChildProcess& p = **up;
  const std::vector<UpProcess> procs = UpProcesses(p.output());
  ASSERT_EQ(procs.size(), 3u) << p.output();
  const std::string http = procs[0].http_address;
  httplib::Client cli = ClientFor(http, 60);
  const std::string completion = R"({"model":"stories260K","prompt":"Once","max_tokens":8})";
  const std::string chat =
      R"({"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"max_tokens":8})";
  for (const httplib::Headers& h :
       {httplib::Headers{}, httplib::Headers{{"Authorization", key + "x"}},
        httplib::Headers{{"Authorization", "Bearer sk-tandem-dev-mallory-000000000000000"}}}) {
    for (const auto& [method, path] :
         std::vector<std::pair<std::string, std::string>>{{"POST", "/v1/completions"},
                                                          {"POST", "/v1/chat/completions"},
                                                          {"GET", "/v1/models"},
                                                          {"GET", "/v1/nope"}}) {
      auto res = method == "GET"
                     ? cli.Get(path.c_str(), h)
                     : cli.Post(path.c_str(), h, path == "/v1/completions" ? completion : chat,
                                "application/json");
      ASSERT_TRUE(res) << path;
      EXPECT_EQ(res->status, 401) << path << ": " << res->body;
      EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer") << path;
      json e = json::parse(res->body);
      EXPECT_EQ(e["error"]["type"], "invalid_request_error") << res->body;
      EXPECT_EQ(e["error"]["code"], "invalid_api_key") << res->body;
      EXPECT_TRUE(e["error"]["param"].is_null()) << res->body;
      EXPECT_THAT(res->body, Not(HasSubstr("sk-tandem"))) << res->body;
    }
  }
  const httplib::Headers bearer = {{"Authorization", "Bearer " + key},
                                   {"X-Request-Id", "secure-test-1"}};
  auto res = cli.Post("/v1/completions", bearer, completion, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  res = cli.Post("/v1/chat/completions", bearer, chat, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  res = cli.Get("/v1/models", bearer);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  for (const char* path : {"/health", "/health/ready", "/health/live", "/metrics"}) {
    res = cli.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path << ": " << res->body;
  }
  // gRPC: the `authorization` metadata.
  GrpcResult none = Generate(procs[0].grpc_address, BosOnly(8));
  EXPECT_EQ(none.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << none.status.error_message();
  GrpcResult wrong = Generate(procs[0].grpc_address, BosOnly(8), nullptr,
                              "Bearer sk-tandem-dev-mallory-0000000000");
  EXPECT_EQ(wrong.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  GrpcResult ok = Generate(procs[0].grpc_address, BosOnly(8), nullptr, "Bearer " + key);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message() << "\n" << p.Tail();
  EXPECT_EQ(ok.ids.size(), 8u);
  EXPECT_FALSE(ok.last.route().colocated());
  EXPECT_EQ(ok.last.route().prefill_worker(), "");  // no worker address for clients
  EXPECT_EQ(ok.last.route().decode_worker(), "");
  // `tandem generate`: refused without a key; --api-key or $TANDEM_API_KEY.
  auto cli_generate = [&](std::vector<std::string> extra, std::vector<std::string> env) {
    std::vector<std::string> argv = {TANDEM_CLI_BIN, "generate", "--router",
                                     procs[0].grpc_address, "--prompt", "Once", "--max-tokens",
                                     "4"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ChildOptions o;
    o.argv = std::move(argv);
    o.env = std::move(env);
    o.stderr_to_stdout = true;
    absl::StatusOr<std::unique_ptr<ChildProcess>> gen = ChildProcess::Start(std::move(o));
    if (!gen.ok()) {
      return std::make_pair(-1, std::string(gen.status().message()));
    }
    absl::StatusOr<std::string> out = (*gen)->ReadToEnd(absl::Seconds(60));
    absl::StatusOr<int> rc = (*gen)->Wait(absl::Seconds(10));
    return std::make_pair(rc.ok() ? *rc : -1, out.ok() ? *out : std::string(out.status().message()));
  };
  auto [no_key_rc, no_key_out] = cli_generate({}, {"TANDEM_API_KEY="});
  EXPECT_NE(no_key_rc, 0) << no_key_out;
  EXPECT_THAT(no_key_out, HasSubstr("UNAUTHENTICATED")) << no_key_out;
  auto [flag_rc, flag_out] = cli_generate({"--api-key", key}, {"TANDEM_API_KEY="});
  EXPECT_EQ(flag_rc, 0) << flag_out;
  auto [env_rc, env_out] = cli_generate({}, {"TANDEM_API_KEY=" + key});
  EXPECT_EQ(env_rc, 0) << env_out;

  p.Signal(SIGTERM);
  const absl::StatusOr<int> exit_code = p.Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << p.Tail();
  EXPECT_EQ(*exit_code, 0) << p.Tail();
  // The router's log (beside the workers'): tenants, never keys.
  const std::filesystem::path log =
      std::filesystem::path(procs[1].log_path).parent_path() / "router.log";
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("API keys on for tenant(s) dev-alice, dev-bob"));
  EXPECT_THAT(text.str(), HasSubstr("client_request_id=\"secure-test-1\" tenant=\"dev-alice\""));
  EXPECT_THAT(text.str(), Not(HasSubstr("sk-tandem"))) << log;
  EXPECT_THAT(text.str(), Not(HasSubstr("WARNING: the public"))) << log;
}

// A public front on 0.0.0.0 without keys gets a WARNING at start; with keys
// (from TANDEM_API_KEYS) none, and the key is not logged.
TEST(RouterStartTest, WarnsForAFrontBeyondLoopbackWithoutKeys) {
  const std::string key = "sk-warn-test-0123456789abcdef";
  for (bool keys : {false, true}) {
    ChildOptions o = Logged({TANDEM_ROUTER_BIN, "--model=stories260K=" + Model(),
                             "--grpc_address=0.0.0.0:0", "--http_address=127.0.0.1:0"});
    o.env = {keys ? "TANDEM_API_KEYS=ops=" + key : "TANDEM_API_KEYS="};
    absl::StatusOr<std::unique_ptr<ChildProcess>> router = ChildProcess::Start(o);
    ASSERT_TRUE(router.ok()) << router.status();
    absl::StatusOr<std::string> ready = (*router)->WaitForLine("READY");
    ASSERT_TRUE(ready.ok()) << ready.status();
    (*router)->Signal(SIGTERM);
    ASSERT_TRUE((*router)->Wait(absl::Seconds(30)).ok());
    const std::string log = (*router)->Tail(1 << 20);
    if (keys) {
      EXPECT_THAT(log, Not(HasSubstr("WARNING: the public"))) << log;
      EXPECT_THAT(log, HasSubstr("API keys on for tenant(s) ops")) << log;
      EXPECT_THAT(log, Not(HasSubstr(key))) << log;
    } else {
      EXPECT_THAT(log, HasSubstr("WARNING: the public gRPC front listens on 0.0.0.0:0 beyond "
                                 "loopback without API keys"))
          << log;
      EXPECT_THAT(log, Not(HasSubstr("public HTTP front"))) << log;
    }
  }
}

// deploy/local/two-pool.yaml: Qwen2.5-Coder-0.5B (small) and 1.5B (large),
// each with its own prefill and decode worker, and the routed alias `auto`
// (router/complexity.h, the embedder on): /v1/models lists both and the
// alias; an easy prompt goes to small and a short hard one to large (X-Tandem-
// Route-Pool, the response's model); an explicit model wins. Two tokens per
// answer: the 1.5B decodes slowly on a shared 2-core machine.
TEST(TandemUpTest, TwoPoolRoutesByComplexity) {
  const std::string config = absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/two-pool.yaml");
  absl::StatusOr<std::unique_ptr<ChildProcess>> up = StartUp(config);
  ASSERT_TRUE(up.ok()) << up.status();
  ChildProcess& p = **up;
  const std::vector<UpProcess> procs = UpProcesses(p.output());
  ASSERT_EQ(procs.size(), 5u) << p.output();
  httplib::Client cli = ClientFor(procs[0].http_address, 120);
  auto res = cli.Get("/v1/models");
  ASSERT_TRUE(res) << p.Tail();
  std::vector<std::string> ids;
  const json listed = json::parse(res->body);
  for (const json& m : listed["data"]) {
    ids.push_back(m["id"]);
  }
  EXPECT_EQ(ids, std::vector<std::string>({"qwen2.5-coder-0.5b-instruct",
                                           "qwen2.5-coder-1.5b-instruct", "auto"}));
  auto chat = [&](const std::string& model, const std::string& text) {
    const json body = {{"model", model},
                       {"max_tokens", 2},
                       {"temperature", 0},
                       {"messages", {{{"role", "user"}, {"content", text}}}}};
    return cli.Post("/v1/chat/completions", body.dump(), "application/json");
  };
  const std::string easy = "What is the capital of France?";
  const std::string hard = "Prove that there are infinitely many primes of the form 4k+3.";
  res = chat("auto", easy);
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("X-Tandem-Route-Pool"), "small");
  EXPECT_EQ(json::parse(res->body)["model"], "qwen2.5-coder-0.5b-instruct") << res->body;
  res = chat("auto", hard);
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("X-Tandem-Route-Pool"), "large");
  EXPECT_EQ(json::parse(res->body)["model"], "qwen2.5-coder-1.5b-instruct") << res->body;
  res = chat("qwen2.5-coder-0.5b-instruct", hard);
  ASSERT_TRUE(res) << p.Tail();
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(res->has_header("X-Tandem-Route-Pool"));
  EXPECT_EQ(json::parse(res->body)["model"], "qwen2.5-coder-0.5b-instruct") << res->body;
  res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, ::testing::AllOf(
                             HasSubstr("tandem_route_decisions_total{pool=\"small\"} 1"),
                             HasSubstr("tandem_route_decisions_total{pool=\"large\"} 1")));

  p.Signal(SIGTERM);
  const absl::StatusOr<int> exit_code = p.Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << p.Tail();
  EXPECT_EQ(*exit_code, 0) << p.Tail();
}

}  // namespace
}  // namespace tandem::router
