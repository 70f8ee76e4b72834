// The router end to end in one process: the real gRPC and HTTP fronts,
// watcher and router against FakeWorkers (small real gRPC servers). Covers
// the request path (colocated and disaggregated), streaming, stop strings,
// cancellation both ways, worker death and heartbeat loss mid-stream,
// retries, admission (429 / RESOURCE_EXHAUSTED), deadlines and bad input.

#include <httplib.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_split.h"
#include "common/base/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/cli/health_client.h"
#include "router/request.h"
#include "tests/router/router_harness.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_worker.h"
#include "tests/testing/sse.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

namespace v1 = ::tandem::v1;
using json = nlohmann::json;
using testing::FakeWorker;
using testing::RouterHarness;
using ::tandem::testing::Eventually;
using ::tandem::testing::SseData;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

struct GrpcResult {
  grpc::Status status;
  std::vector<v1::GenerateResponse> messages;
  std::string text;
  absl::Duration elapsed;
};

GrpcResult Generate(v1::Generation::Stub& stub, const v1::GenerateRequest& req,
                    absl::Duration deadline = absl::Seconds(30), int cancel_after = -1) {
  GrpcResult r;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  const absl::Time start = absl::Now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&ctx, req);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    r.text += m.text();
    r.messages.push_back(m);
    if (cancel_after >= 0 && static_cast<int>(r.messages.size()) >= cancel_after) {
      ctx.TryCancel();
    }
  }
  r.status = reader->Finish();
  r.elapsed = absl::Now() - start;
  return r;
}

v1::GenerateRequest TextRequest(const std::string& text, int max_tokens = 32) {
  v1::GenerateRequest r;
  r.set_model("stories260K");
  r.set_text(text);
  r.set_max_tokens(max_tokens);
  r.set_add_special_tokens(true);
  return r;
}

class RouterServiceTest : public ::testing::Test {
 protected:
  RouterServiceTest() : catalog_(testing::StoriesCatalog()) {}

  const engine::Tokenizer& tok() { return catalog_.models()[0]->tokenizer(); }
  std::vector<int32_t> Ids(const std::string& text) {
    absl::StatusOr<std::vector<engine::TokenId>> ids = tok().Encode(text, false, false);
    EXPECT_TRUE(ids.ok());
    return *ids;
  }

  std::unique_ptr<FakeWorker> Worker(v1::WorkerRole role, int free_blocks = 100) {
    FakeWorker::Options o;
    o.role = role;
    o.free_blocks = free_blocks;
    std::unique_ptr<FakeWorker> w = FakeWorker::Start(o);
    EXPECT_NE(w, nullptr);
    w->SetScript(Ids("Hello world. The end."));
    return w;
  }

  // A colocated worker that streams `tokens` tokens, one every `delay`.
  std::unique_ptr<FakeWorker> SlowWorker(int tokens, absl::Duration delay) {
    std::unique_ptr<FakeWorker> w = Worker(v1::WORKER_ROLE_COLOCATED);
    w->SetScript(std::vector<int32_t>(tokens, 100));
    w->SetTokenDelay(delay);
    return w;
  }

  std::unique_ptr<RouterHarness> Router(std::vector<std::string> workers,
                                        void (*tweak)(RouterConfig&) = nullptr) {
    RouterConfig c;
    c.discovery.static_workers = std::move(workers);
    c.discovery.backoff_initial = absl::Milliseconds(20);
    c.discovery.backoff_max = absl::Milliseconds(200);
    c.expose_route_workers = true;  // these tests check which worker served
    if (tweak != nullptr) {
      tweak(c);
    }
    return std::make_unique<RouterHarness>(c);
  }

  ModelCatalog catalog_;
};

TEST_F(RouterServiceTest, GrpcStreamsFromColocatedWorker) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  GrpcResult r = Generate(h->stub(), TextRequest("Once upon a time"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, " Hello world. The end.");
  ASSERT_GE(r.messages.size(), 3u);
  // Route first and last; finish reason, usage and timings last.
  EXPECT_EQ(r.messages.front().route().decode_worker(), w->address());
  EXPECT_TRUE(r.messages.front().route().colocated());
  const v1::GenerateResponse& last = r.messages.back();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(last.usage().completion_tokens(), static_cast<int>(Ids("Hello world. The end.").size()));
  EXPECT_GT(last.usage().prompt_tokens(), 1);
  EXPECT_GT(last.timings().total_seconds(), 0);
  EXPECT_EQ(last.route().decode_worker(), w->address());
  // The worker got the tokenized prompt with BOS.
  EXPECT_EQ(w->last_submit().prompt_ids(0), tok().bos_id());
  EXPECT_EQ(w->last_submit().max_tokens(), 32);
}

TEST_F(RouterServiceTest, DisaggregatedReserveThenPrefillThenTokens) {
  auto p = Worker(v1::WORKER_ROLE_PREFILL);
  auto d = Worker(v1::WORKER_ROLE_DECODE);
  auto h = Router({p->address(), d->address()});
  ASSERT_TRUE(h->WaitForLive(2));
  GrpcResult r = Generate(h->stub(), TextRequest("Once upon a time"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, " Hello world. The end.");
  EXPECT_FALSE(r.messages.back().route().colocated());
  EXPECT_EQ(r.messages.back().route().prefill_worker(), p->address());
  EXPECT_EQ(r.messages.back().route().decode_worker(), d->address());
  EXPECT_EQ(d->commits(), 1);
  EXPECT_EQ(p->requests(), 1);
  EXPECT_GT(r.messages.back().timings().prefill_seconds(), 0);
}

TEST_F(RouterServiceTest, MultiByteCharacterNeverSplitAcrossMessages) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  // "a€😀b" as single-byte tokens.
  std::vector<int32_t> script;
  for (unsigned char b : std::string("a\xE2\x82\xAC\xF0\x9F\x98\x80" "b")) {
    script.push_back(3 + b);
  }
  w->SetScript(script);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  GrpcResult r = Generate(h->stub(), TextRequest("x"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  for (const v1::GenerateResponse& m : r.messages) {
    EXPECT_TRUE(base::IsValidUtf8(m.text())) << "a message split a code point";
  }
  EXPECT_EQ(r.text, "a\xE2\x82\xAC\xF0\x9F\x98\x80" "b");
  // The same over SSE.
  httplib::Client cli("127.0.0.1", h->http_port());
  auto res = cli.Post("/v1/completions", R"({"prompt":"x","stream":true,"max_tokens":20})",
                      "application/json");
  ASSERT_TRUE(res);
  std::string text;
  for (const std::string& d : SseData(res->body)) {
    if (d == "[DONE]") {
      continue;
    }
    json j = json::parse(d);  // throws on invalid UTF-8
    text += j["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "a\xE2\x82\xAC\xF0\x9F\x98\x80" "b");
}

TEST_F(RouterServiceTest, StopStringEndsAndCancelsDecode) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  w->SetScript(Ids("Hello world. The end. And then more and more and more text follows."));
  w->SetTokenDelay(absl::Milliseconds(20));
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  v1::GenerateRequest req = TextRequest("Once", 100);
  req.mutable_sampling()->add_stop(". The");
  GrpcResult r = Generate(h->stub(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, " Hello world");
  EXPECT_EQ(r.messages.back().finish_reason(), v1::FINISH_REASON_STOP);
  // The decode worker's stream was cancelled, not run to the end.
  EXPECT_TRUE(Eventually([&] { return w->cancelled() == 1; }, "the worker to see the cancel"));
  EXPECT_EQ(w->active_streams(), 0);
}

TEST_F(RouterServiceTest, MaxTokensEnforcedByRouter) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  GrpcResult r = Generate(h->stub(), TextRequest("Once", 2));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.messages.back().usage().completion_tokens(), 2);
  EXPECT_EQ(r.messages.back().finish_reason(), v1::FINISH_REASON_LENGTH);
}

TEST_F(RouterServiceTest, GrpcClientCancelCancelsDecode) {
  auto w = SlowWorker(200, absl::Milliseconds(20));
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  GrpcResult r = Generate(h->stub(), TextRequest("Once", 200), absl::Seconds(30), 3);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return w->cancelled() == 1; }, "the worker to see the cancel"));
  EXPECT_TRUE(Eventually([&] { return h->router().inflight() == 0; }, "the request to end"));
}

TEST_F(RouterServiceTest, HttpClientDisconnectCancelsDecode) {
  auto w = SlowWorker(300, absl::Milliseconds(10));
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  httplib::Client cli("127.0.0.1", h->http_port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt":"Once","stream":true,"max_tokens":300})";
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  req.content_receiver = [&chunks](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 3;  // hang up after a few chunks
  };
  auto res = cli.send(req);
  EXPECT_GE(chunks, 3);
  EXPECT_TRUE(Eventually([&] { return w->cancelled() == 1; }, "the worker to see the cancel"));
  EXPECT_TRUE(Eventually([&] { return h->router().inflight() == 0; }, "the request to end"));
}

TEST_F(RouterServiceTest, DecodeDiesMidStreamGrpcGetsUnavailable) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  w->SetFailure(FakeWorker::Failure::kDieMidStream, 2);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  GrpcResult r = Generate(h->stub(), TextRequest("Once"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  // Which role failed, never where: internal addresses stay in the router's log.
  EXPECT_THAT(r.status.error_message(), HasSubstr("decode worker"));
  EXPECT_THAT(r.status.error_message(), Not(HasSubstr(w->address())));
  EXPECT_THAT(r.status.error_message(), Not(HasSubstr("127.0.0.1")));
  EXPECT_LT(r.elapsed, absl::Seconds(5));
  EXPECT_FALSE(r.text.empty());  // what came before the failure was delivered
}

TEST_F(RouterServiceTest, DecodeDiesMidStreamSseGetsErrorEvent) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  w->SetFailure(FakeWorker::Failure::kDieMidStream, 2);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  httplib::Client cli("127.0.0.1", h->http_port());
  const absl::Time start = absl::Now();
  auto res = cli.Post("/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})",
                      "application/json");
  ASSERT_TRUE(res);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(res->status, 200);  // the stream had started
  std::vector<std::string> data = SseData(res->body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  json err = json::parse(data[data.size() - 2]);
  ASSERT_TRUE(err.contains("error")) << err;
  EXPECT_EQ(err["error"]["code"], "unavailable");
  EXPECT_THAT(err["error"]["message"].get<std::string>(), HasSubstr("decode worker"));
  EXPECT_THAT(err["error"]["message"].get<std::string>(), Not(HasSubstr(w->address())));
  EXPECT_THAT(err["error"]["message"].get<std::string>(), Not(HasSubstr("127.0.0.1")));
}

TEST_F(RouterServiceTest, HungWorkerWithoutHeartbeatsFailsWithinFiveSeconds) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  w->SetFailure(FakeWorker::Failure::kHangMidStream, 2);
  auto h = Router({w->address()});  // default heartbeat timeout: 3 s
  ASSERT_TRUE(h->WaitForLive(1));
  std::thread pause([&] {
    absl::SleepFor(absl::Milliseconds(200));
    w->PauseHeartbeats(true);
  });
  GrpcResult r = Generate(h->stub(), TextRequest("Once"));
  pause.join();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  EXPECT_THAT(r.status.error_message(), HasSubstr("heartbeat"));
  EXPECT_THAT(r.status.error_message(), Not(HasSubstr(w->address())));
  EXPECT_LT(r.elapsed, absl::Seconds(5));
  EXPECT_TRUE(Eventually([&] { return w->cancelled() == 1; }, "the hung stream to be cancelled"));
  // Out of rotation: a new request finds no worker.
  GrpcResult again = Generate(h->stub(), TextRequest("Once"));
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(again.status.error_message(), HasSubstr("no live worker"));
  // Heartbeats resume (the watcher reconnects): back in rotation.
  w->PauseHeartbeats(false);
  w->SetFailure(FakeWorker::Failure::kNone);
  ASSERT_TRUE(h->WaitForLive(1));
  EXPECT_TRUE(Generate(h->stub(), TextRequest("Once")).status.ok());
}

TEST_F(RouterServiceTest, RetriesAnotherDecodeWorkerWhenReserveFails) {
  auto p = Worker(v1::WORKER_ROLE_PREFILL);
  auto bad = Worker(v1::WORKER_ROLE_DECODE, /*free_blocks=*/500);  // picked first
  auto good = Worker(v1::WORKER_ROLE_DECODE, /*free_blocks=*/100);
  bad->SetFailure(FakeWorker::Failure::kReserveUnavailable);
  auto h = Router({p->address(), bad->address(), good->address()});
  ASSERT_TRUE(h->WaitForLive(3));
  GrpcResult r = Generate(h->stub(), TextRequest("Once"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(bad->requests(), 1);
  EXPECT_EQ(good->requests(), 1);
  EXPECT_EQ(r.messages.back().route().decode_worker(), good->address());
  EXPECT_EQ(r.text, " Hello world. The end.");
}

TEST_F(RouterServiceTest, PrefillFailureFailsTheRequestAndFreesTheReservation) {
  auto bad = Worker(v1::WORKER_ROLE_PREFILL);
  auto d = Worker(v1::WORKER_ROLE_DECODE);
  bad->SetFailure(FakeWorker::Failure::kPrefillUnavailable);
  auto h = Router({bad->address(), d->address()});
  ASSERT_TRUE(h->WaitForLive(2));
  // One prefill worker only: the retry finds none and the client is told why.
  GrpcResult r = Generate(h->stub(), TextRequest("Once"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("prefill worker"));
  EXPECT_THAT(r.status.error_message(), Not(HasSubstr(bad->address())));
  EXPECT_THAT(r.status.error_message(), Not(HasSubstr("127.0.0.1")));
  // The decode worker's reservation stream was cancelled, not left waiting.
  EXPECT_TRUE(Eventually([&] { return d->active_streams() == 0; }, "the reservation to go"));
}

TEST_F(RouterServiceTest, AdmissionControl) {
  // The first request would stream for 20 s: it holds the only slot for as
  // long as the checks take, however slow the machine, and is cancelled after.
  auto w = SlowWorker(400, absl::Milliseconds(50));
  auto h = Router({w->address()}, [](RouterConfig& c) { c.limits.max_inflight = 1; });
  ASSERT_TRUE(h->WaitForLive(1));
  grpc::ClientContext first_ctx;
  std::thread first([&] {
    auto reader = h->stub().Generate(&first_ctx, TextRequest("Once", 400));
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  });
  ASSERT_TRUE(Eventually([&] { return h->router().inflight() == 1; }, "the first request"));
  GrpcResult r = Generate(h->stub(), TextRequest("Once"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("the router is at capacity (1 requests in flight)"));
  httplib::Client cli("127.0.0.1", h->http_port());
  auto res = cli.Post("/v1/completions", R"({"prompt":"Once"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(res->body)["error"]["type"], "rate_limit_error");
  first_ctx.TryCancel();
  first.join();
  ASSERT_TRUE(Eventually([&] { return h->router().inflight() == 0; }, "the slot to free"));
  // Capacity is back.
  EXPECT_TRUE(Generate(h->stub(), TextRequest("Once", 3)).status.ok());
}

TEST_F(RouterServiceTest, NoWorkersIsUnavailable) {
  auto h = Router({});
  GrpcResult r = Generate(h->stub(), TextRequest("Once"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("no live worker"));
  httplib::Client cli("127.0.0.1", h->http_port());
  auto res = cli.Post("/v1/completions", R"({"prompt":"Once","stream":true})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);  // failed before streaming: a real status, not SSE
  EXPECT_EQ(json::parse(res->body)["error"]["type"], "server_error");
}

TEST_F(RouterServiceTest, BadInputIsRejectedAndTheRouterKeepsServing) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  httplib::Client cli("127.0.0.1", h->http_port());
  struct Bad {
    const char* path;
    std::string body;
    const char* param;  // "" = null
  };
  const std::vector<Bad> bad = {
      {"/v1/completions", "{not json", ""},
      {"/v1/completions", "{\"prompt\":\"\xff\"}", ""},
      {"/v1/completions", R"({"model":"nope","prompt":"x"})", "model"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":100000})", "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","n":100})", "n"},
      {"/v1/completions", R"({"prompt":"x","logprobs":50})", "logprobs"},
      {"/v1/completions", R"({"prompt":[1,2,100000]})", "prompt"},
      {"/v1/chat/completions", R"({"messages":[]})", "messages"},
  };
  for (const Bad& b : bad) {
    auto res = cli.Post(b.path, b.body, "application/json");
    ASSERT_TRUE(res) << b.body;
    EXPECT_EQ(res->status, 400) << b.body;
    json e = json::parse(res->body);
    ASSERT_TRUE(e.contains("error")) << res->body;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
    if (std::string(b.param).empty()) {
      EXPECT_TRUE(e["error"]["param"].is_null()) << res->body;
    } else {
      EXPECT_EQ(e["error"]["param"], b.param) << res->body;
    }
  }
  // gRPC: INVALID_ARGUMENT naming the problem.
  v1::GenerateRequest big = TextRequest("x", 100000);
  GrpcResult r = Generate(h->stub(), big);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("maximum context length"));
  v1::GenerateRequest ids;
  ids.mutable_token_ids()->add_ids(-1);
  GrpcResult bad_id = Generate(h->stub(), ids);
  EXPECT_EQ(bad_id.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_id.status.error_message(),
              HasSubstr("prompt token id -1 at index 0 is outside the vocabulary"));
  v1::GenerateRequest model = TextRequest("x");
  model.set_model("nope");
  GrpcResult bad_model = Generate(h->stub(), model);
  EXPECT_EQ(bad_model.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_model.status.error_message(), HasSubstr("The model 'nope' does not exist"));
  // Unknown routes get an OpenAI error body too.
  auto nf = cli.Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_TRUE(json::parse(nf->body).contains("error"));
  // Still serving.
  EXPECT_EQ(w->requests(), 0);
  auto ok = cli.Post("/v1/completions", R"({"prompt":"Once","max_tokens":4})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(RouterServiceTest, ClientDeadlinePropagatesToWorkers) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  const absl::Time before = absl::Now();
  ASSERT_TRUE(Generate(h->stub(), TextRequest("Once"), absl::Seconds(7)).status.ok());
  ASSERT_EQ(w->deadlines().size(), 1u);
  const absl::Duration left = w->deadlines()[0] - before;
  EXPECT_LE(left, absl::Seconds(7) + absl::Milliseconds(50));
  EXPECT_GT(left, absl::Seconds(6));
  // A deadline that passes mid-stream ends the request DEADLINE_EXCEEDED.
  w->SetScript(std::vector<int32_t>(100, 100));
  w->SetTokenDelay(absl::Milliseconds(50));
  GrpcResult r = Generate(h->stub(), TextRequest("Once", 100), absl::Milliseconds(300));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(Eventually([&] { return w->active_streams() == 0; }, "the worker to stop"));
}

TEST_F(RouterServiceTest, HttpCompletionsAndChat) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  httplib::Client cli("127.0.0.1", h->http_port());
  auto res = cli.Post("/v1/completions", R"({"model":"stories260K","prompt":"Once","n":2})",
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["text"], " Hello world. The end.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], 2 * static_cast<int>(Ids("Hello world. The end.").size()));
  EXPECT_FALSE(res->get_header_value("X-Request-Id").empty());

  auto chat = cli.Post("/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,)"
                       R"("stream_options":{"include_usage":true}})",
                       "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200);
  EXPECT_THAT(chat->get_header_value("Content-Type"), HasSubstr("text/event-stream"));
  std::vector<std::string> data = SseData(chat->body);
  ASSERT_GE(data.size(), 4u);
  EXPECT_EQ(data.back(), "[DONE]");
  json role = json::parse(data[0]);
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  json usage = json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_GT(usage["usage"]["prompt_tokens"].get<int>(), 1);
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < data.size(); ++i) {
    json c = json::parse(data[i]);
    text += c["choices"][0]["delta"].value("content", "");
    if (!c["choices"][0]["finish_reason"].is_null()) {
      finish = c["choices"][0]["finish_reason"];
    }
  }
  EXPECT_EQ(text, " Hello world. The end.");
  EXPECT_EQ(finish, "stop");
  // The chat prompt went through the chatml fallback template.
  const v1::DecodeSubmit submit = w->last_submit();
  std::string prompt = tok().Decode(
      std::vector<int32_t>(submit.prompt_ids().begin(), submit.prompt_ids().end()));
  EXPECT_THAT(prompt, HasSubstr("user\nHi"));
}

// Readiness follows the workers: a model with no live decode worker (and no
// colocated one) cannot be served, so /health/ready and /health answer 503
// naming it and the missing role, and grpc.health.v1 says NOT_SERVING; once
// a decode worker is back both recover. Liveness stays 200 throughout.
TEST_F(RouterServiceTest, ReadinessFollowsWorkersAndLivenessStaysUp) {
  auto p = Worker(v1::WORKER_ROLE_PREFILL);
  auto d = Worker(v1::WORKER_ROLE_DECODE);
  const int decode_port = d->port();
  auto h = Router({p->address(), d->address()}, [](RouterConfig& c) {
    c.mode = RoutingMode::kDisaggregated;
    c.discovery.heartbeat_timeout = absl::Milliseconds(500);
  });
  ASSERT_TRUE(h->WaitForLive(2));
  httplib::Client cli("127.0.0.1", h->http_port());
  const std::string grpc_address = absl::StrCat("127.0.0.1:", h->grpc_port());
  const absl::Duration kPoll = absl::Milliseconds(20);
  auto status_of = [&cli](const char* path) {
    auto res = cli.Get(path);
    return res ? res->status : -1;
  };

  EXPECT_TRUE(Eventually([&] { return status_of("/health/ready") == 200; }, "ready with a live pair",
                         absl::Seconds(2), kPoll));
  EXPECT_EQ(status_of("/health"), 200);
  EXPECT_EQ(status_of("/health/live"), 200);
  EXPECT_OK(cli::CheckHealth(grpc_address, absl::Seconds(5)));

  d->Shutdown();
  d.reset();
  const absl::Time killed = absl::Now();
  EXPECT_TRUE(Eventually([&] { return status_of("/health/ready") == 503; },
                         "not ready once the only decode worker died", absl::Seconds(2), kPoll));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  auto ready = cli.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  json body = json::parse(ready->body);
  EXPECT_EQ(body["status"], "unavailable");
  ASSERT_EQ(body["models"].size(), 1u) << ready->body;
  EXPECT_EQ(body["models"][0]["model"], "stories260K");
  EXPECT_EQ(body["models"][0]["ready"], false);
  EXPECT_THAT(body["models"][0]["reason"].get<std::string>(), HasSubstr("no live decode worker"));
  EXPECT_EQ(body["workers"]["prefill"], 1);
  EXPECT_EQ(body["workers"]["decode"], 0);
  auto legacy = cli.Get("/health");
  ASSERT_TRUE(legacy);
  EXPECT_EQ(legacy->status, 503) << "/health is readiness";
  EXPECT_THAT(legacy->body, HasSubstr("no live decode worker"));
  EXPECT_EQ(status_of("/health/live"), 200);
  EXPECT_TRUE(Eventually([&] { return !cli::CheckHealth(grpc_address, absl::Seconds(1)).ok(); },
                         "grpc.health.v1 NOT_SERVING", absl::Seconds(2), kPoll));
  EXPECT_THAT(cli::CheckHealth(grpc_address, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("status 2")))
      << "grpc.health.v1 NOT_SERVING";

  FakeWorker::Options o;
  o.role = v1::WORKER_ROLE_DECODE;
  o.port = decode_port;
  std::unique_ptr<FakeWorker> back = FakeWorker::Start(o);
  ASSERT_NE(back, nullptr);
  back->SetScript(Ids("Hello world. The end."));
  EXPECT_TRUE(Eventually([&] { return status_of("/health/ready") == 200; },
                         "ready again with the decode worker back", absl::Seconds(5), kPoll));
  EXPECT_EQ(status_of("/health"), 200);
  EXPECT_EQ(status_of("/health/live"), 200);
  EXPECT_TRUE(Eventually([&] { return cli::CheckHealth(grpc_address, absl::Seconds(1)).ok(); },
                         "grpc.health.v1 SERVING again", absl::Seconds(5), kPoll));
  EXPECT_TRUE(Generate(h->stub(), TextRequest("Once")).status.ok());
}

TEST_F(RouterServiceTest, ModelsTokenizeHealthAndMetrics) {
  auto w = Worker(v1::WORKER_ROLE_COLOCATED);
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  ASSERT_TRUE(Generate(h->stub(), TextRequest("Once")).status.ok());
  grpc::ClientContext c1;
  v1::ListModelsResponse models;
  ASSERT_TRUE(h->stub().ListModels(&c1, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "stories260K");
  grpc::ClientContext c2;
  v1::TokenizeRequest treq;
  treq.set_text("Once upon");
  v1::TokenizeResponse tresp;
  ASSERT_TRUE(h->stub().Tokenize(&c2, treq, &tresp).ok());
  EXPECT_EQ(tresp.ids_size(), tresp.pieces_size());
  EXPECT_GT(tresp.ids_size(), 0);

  httplib::Client cli("127.0.0.1", h->http_port());
  auto m = cli.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "stories260K");
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["workers"]["colocated"], 1);
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body,
              HasSubstr("tandem_router_requests_total{model=\"stories260K\",code=\"ok\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("tandem_router_workers_up{role=\"colocated\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("tandem_router_time_to_first_token_seconds_bucket"));
  EXPECT_THAT(metrics->body, HasSubstr("tandem_router_time_per_output_token_seconds_count"));
  EXPECT_THAT(metrics->body, HasSubstr("tandem_router_request_duration_seconds_count"));
  EXPECT_THAT(metrics->body, HasSubstr("tandem_router_route_decisions_total"));
}

TEST_F(RouterServiceTest, LeastLoadedColocatedWorkerIsPicked) {
  auto busy = Worker(v1::WORKER_ROLE_COLOCATED, 10);
  auto idle = Worker(v1::WORKER_ROLE_COLOCATED, 90);
  auto h = Router({busy->address(), idle->address()});
  ASSERT_TRUE(h->WaitForLive(2));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Generate(h->stub(), TextRequest("Once")).status.ok());
  }
  EXPECT_EQ(idle->requests(), 3);
  EXPECT_EQ(busy->requests(), 0);
}

TEST_F(RouterServiceTest, ConcurrentRequestsAllComplete) {
  auto a = Worker(v1::WORKER_ROLE_COLOCATED);
  auto b = Worker(v1::WORKER_ROLE_COLOCATED);
  a->SetTokenDelay(absl::Milliseconds(2));
  b->SetTokenDelay(absl::Milliseconds(2));
  auto h = Router({a->address(), b->address()});
  ASSERT_TRUE(h->WaitForLive(2));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      if (i % 2 == 0) {
        GrpcResult r = Generate(h->stub(), TextRequest("Once"));
        ok += r.status.ok() && r.text == " Hello world. The end." ? 1 : 0;
      } else {
        httplib::Client cli("127.0.0.1", h->http_port());
        auto res = cli.Post("/v1/completions", R"({"prompt":"Once","stream":true,"max_tokens":40})",
                            "application/json");
        ok += (res && res->status == 200 && SseData(res->body).back() == "[DONE]") ? 1 : 0;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(ok.load(), 16);
  // Both workers were used (local in-flight counts spread the load).
  EXPECT_GT(a->requests(), 0);
  EXPECT_GT(b->requests(), 0);
  EXPECT_TRUE(Eventually([&] { return h->router().inflight() == 0; }, "all requests to end"));
}


// A router-made worker key: 128 random bits in hex.
bool IsRouterId(const std::string& id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The client's X-Request-Id is echoed, never a key: two requests sharing it
// both run (a worker sees two distinct router ids, neither the client's).
TEST_F(RouterServiceTest, SameXRequestIdTwiceConcurrentlyBothSucceedOverHttp) {
  auto w = SlowWorker(8, absl::Milliseconds(25));
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  struct Reply {
    int status = 0;
    std::string header;
    std::string body;
  };
  std::vector<Reply> replies(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client cli("127.0.0.1", h->http_port());
      auto res = cli.Post("/v1/completions", {{"X-Request-Id", "client-42"}},
                          R"({"prompt":"Once","max_tokens":8})", "application/json");
      if (res) {
        replies[i] = {res->status, res->get_header_value("X-Request-Id"), res->body};
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (const Reply& r : replies) {
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header, "client-42");
    EXPECT_THAT(r.body, Not(HasSubstr("127.0.0.1")));
    EXPECT_EQ(json::parse(r.body)["id"], "cmpl-client-42") << r.body;
  }
  const std::vector<std::string> ids = w->request_ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
  for (const std::string& id : ids) {
    EXPECT_TRUE(IsRouterId(id)) << id;
    EXPECT_THAT(id, Not(HasSubstr("client-42")));
  }
}

TEST_F(RouterServiceTest, SameGrpcRequestIdTwiceConcurrentlyBothSucceedDisaggregated) {
  auto p = Worker(v1::WORKER_ROLE_PREFILL);
  auto d = Worker(v1::WORKER_ROLE_DECODE);
  d->SetScript(std::vector<int32_t>(8, 100));
  d->SetTokenDelay(absl::Milliseconds(25));  // the two streams overlap
  auto h = Router({p->address(), d->address()});
  ASSERT_TRUE(h->WaitForLive(2));
  std::vector<GrpcResult> results(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest req = TextRequest("Once", 8);
      req.set_request_id("client-42");
      results[i] = Generate(h->stub(), req);
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (const GrpcResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_FALSE(r.messages.empty());
    for (const v1::GenerateResponse& m : r.messages) {
      EXPECT_EQ(m.request_id(), "client-42");
    }
    EXPECT_FALSE(r.messages.back().route().colocated());
  }
  // The decode worker (Reserve) and the prefill worker saw the router's ids.
  const std::vector<std::string> ids = d->request_ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
  for (const std::string& id : ids) {
    EXPECT_TRUE(IsRouterId(id)) << id;
  }
  EXPECT_EQ(p->requests(), 2);
}

// Tokenize replies carry each token's text and id: several times the text.
// One over limits.max_grpc_message_bytes is refused by name, whatever the
// client could receive; a raised limit gives the complete answer.
TEST_F(RouterServiceTest, TokenizeReplyOverTheGrpcMessageLimitIsResourceExhausted) {
  std::string text;
  while (text.size() < (3u << 20)) {
    text += "Once upon a time there was a little girl. ";
  }
  v1::TokenizeRequest req;
  req.set_text(text);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  {
    auto h = Router({});
    auto stub = v1::Generation::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", h->grpc_port()), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    v1::TokenizeResponse resp;
    grpc::Status s = stub->Tokenize(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("limits.max_grpc_message_bytes of 4194304"));
    // A default client gets the same answer, not a transport error.
    grpc::ClientContext ctx2;
    s = h->stub().Tokenize(&ctx2, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("limits.max_grpc_message_bytes"));
  }
  {
    auto h = Router({}, [](RouterConfig& c) { c.limits.max_grpc_message_bytes = 32 << 20; });
    auto stub = v1::Generation::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", h->grpc_port()), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    v1::TokenizeResponse resp;
    grpc::Status s = stub->Tokenize(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.ids_size(), resp.pieces_size());
    EXPECT_GT(resp.ByteSizeLong(), size_t{4} << 20);
  }
}

}  // namespace
}  // namespace tandem::router
