// The response cache in the real router (RouterServer: gRPC and HTTP fronts,
// the all-MiniLM embedder) against a FakeWorker on loopback:
//  - gRPC: a repeated request is answered from the cache (RouteInfo.cache_hit
//    on the first and last message, the same text, tokens, usage and finish
//    reason) without a worker call; a paraphrase hits the vector tier; the
//    hit / miss counters move;
//  - HTTP streaming: the hit is an SSE stream with the same content chunks,
//    finish_reason and usage, and x-tandem-cache says miss / hit-exact /
//    hit-semantic;
//  - tenant A never receives tenant B's cached answer (API keys);
//  - a failed generation is not stored; Cache-Control: no-cache goes to the
//    worker; a sampled request without a policy bypasses the cache.

#include <httplib.h>

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/auth.h"
#include "tests/router/router_harness.h"
#include "tests/testing/fake_worker.h"
#include "tests/testing/sse.h"

namespace tandem::router {
namespace {

namespace v1 = ::tandem::v1;
using json = nlohmann::json;
using ::tandem::testing::SseData;
using testing::FakeWorker;
using ::testing::HasSubstr;
using testing::RouterHarness;

constexpr char kAliceKey[] = "sk-alice-0123456789abcdef";
constexpr char kBobKey[] = "sk-bob-0123456789abcdef00";
constexpr char kCarolKey[] = "sk-carol-0123456789abcdef";

struct GrpcResult {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<bool> route_cache_hit;  // of each message carrying a route
  v1::GenerateResponse last;
};

class RouterCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    worker_ = FakeWorker::Start(FakeWorker::Options());
    ASSERT_NE(worker_, nullptr);
    worker_->SetScript({300, 301, 302, 303});
  }

  void StartRouter(bool keys) {
    RouterConfig c;
    c.discovery.static_workers = {worker_->address()};
    c.discovery.backoff_initial = absl::Milliseconds(20);
    c.embedding.model = "all-minilm-l6-v2";
    c.semantic_cache.enabled = true;
    ApiKeys api_keys;
    if (keys) {
      absl::StatusOr<ApiKeys> loaded =
          ApiKeys::Load(c.auth, absl::StrCat("alice=", kAliceKey, ",bob=", kBobKey, ",carol=", kCarolKey));
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      api_keys = *std::move(loaded);
    }
    router_ = std::make_unique<RouterHarness>(c, std::move(api_keys));
    ASSERT_TRUE(router_->WaitForLive(1));
  }

  GrpcResult Generate(const std::string& text, const std::string& key = "",
                      const std::string& cache_control = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!key.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", key));
    if (!cache_control.empty()) ctx.AddMetadata("cache-control", cache_control);
    v1::GenerateRequest req;
    req.set_model("stories260K");
    req.set_text(text);
    req.set_max_tokens(8);
    auto reader = router_->stub().Generate(&ctx, req);
    GrpcResult out;
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
      out.text += m.text();
      for (const v1::TokenDelta& t : m.tokens()) out.tokens.push_back(t.token());
      if (m.has_route()) out.route_cache_hit.push_back(m.route().cache_hit());
      out.last = m;
    }
    out.status = reader->Finish();
    return out;
  }

  httplib::Result Chat(const std::string& content, bool stream, const std::string& key = "",
                       const std::string& cache_control = "", double temperature = 0) {
    httplib::Client cli("127.0.0.1", router_->http_port());
    cli.set_read_timeout(30, 0);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", absl::StrCat("Bearer ", key));
    if (!cache_control.empty()) h.emplace("Cache-Control", cache_control);
    json body = {{"model", "stories260K"},
                 {"messages", {{{"role", "user"}, {"content", content}}}},
                 {"max_tokens", 8},
                 {"temperature", temperature},
                 {"stream", stream}};
    if (stream) body["stream_options"] = {{"include_usage", true}};
    return cli.Post("/v1/chat/completions", h, body.dump(), "application/json");
  }

  std::string Metrics() { return router_->metrics().RenderText(); }

  std::unique_ptr<FakeWorker> worker_;
  std::unique_ptr<RouterHarness> router_;
};

TEST_F(RouterCacheTest, GrpcRepeatIsAnsweredFromTheCacheWithoutAWorkerCall) {
  StartRouter(/*keys=*/false);
  const GrpcResult first = Generate("How do I sort a list in Python?");
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(worker_->requests(), 1);
  EXPECT_THAT(first.route_cache_hit, ::testing::Each(false));
  ASSERT_FALSE(first.tokens.empty());

  const GrpcResult again = Generate("How do I sort a list in Python?");
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(worker_->requests(), 1);  // no worker call
  EXPECT_EQ(again.route_cache_hit, std::vector<bool>({true, true}));
  EXPECT_EQ(again.text, first.text);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.last.finish_reason(), first.last.finish_reason());
  EXPECT_EQ(again.last.usage().completion_tokens(), first.last.usage().completion_tokens());
  EXPECT_EQ(again.last.usage().prompt_tokens(), first.last.usage().prompt_tokens());

  // A paraphrase: the vector tier.
  const GrpcResult para = Generate("How can I sort a list in Python?");
  ASSERT_TRUE(para.status.ok());
  EXPECT_EQ(worker_->requests(), 1);
  EXPECT_EQ(para.route_cache_hit, std::vector<bool>({true, true}));
  EXPECT_EQ(para.text, first.text);
  // A changed number: to the worker.
  const GrpcResult other = Generate("How do I sort 2 lists in Python?");
  ASSERT_TRUE(other.status.ok());
  EXPECT_EQ(worker_->requests(), 2);
  EXPECT_THAT(other.route_cache_hit, ::testing::Each(false));

  const std::string metrics = Metrics();
  EXPECT_THAT(metrics,
              HasSubstr(R"(tandem_semantic_cache_hits_total{model="stories260K",tier="exact"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(
                           R"(tandem_semantic_cache_hits_total{model="stories260K",tier="semantic"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(
                           R"(tandem_semantic_cache_misses_total{model="stories260K",tier="semantic"} 2)"));
}

TEST_F(RouterCacheTest, HttpStreamingHitIsReplayedAsAStreamWithTheHeader) {
  StartRouter(/*keys=*/false);
  auto content_of = [](const std::string& body, std::string* finish, int* completion_tokens) {
    std::vector<std::string> chunks;
    for (const std::string& d : SseData(body)) {
      if (d == "[DONE]") continue;
      json j = json::parse(d);
      if (j.contains("usage") && j["usage"].is_object()) {
        *completion_tokens = j["usage"]["completion_tokens"].get<int>();
      }
      if (!j["choices"].empty()) {
        const json& c = j["choices"][0];
        if (c["delta"].contains("content")) chunks.push_back(c["delta"]["content"]);
        if (c["finish_reason"].is_string()) *finish = c["finish_reason"];
      }
    }
    return chunks;
  };
  auto first = Chat("Write a poem about the sea.", /*stream=*/true);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->get_header_value("x-tandem-cache"), "miss");
  std::string finish1, finish2;
  int tokens1 = -1, tokens2 = -2;
  const std::vector<std::string> chunks1 = content_of(first->body, &finish1, &tokens1);

  auto second = Chat("Write a poem about the sea.", /*stream=*/true);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(second->get_header_value("x-tandem-cache"), "hit-exact");
  EXPECT_THAT(second->get_header_value("Content-Type"), HasSubstr("text/event-stream"));
  const std::vector<std::string> chunks2 = content_of(second->body, &finish2, &tokens2);
  EXPECT_EQ(worker_->requests(), 1);
  EXPECT_EQ(chunks2, chunks1);  // the same stream of deltas
  EXPECT_FALSE(chunks2.empty());
  EXPECT_EQ(finish2, finish1);
  EXPECT_EQ(tokens2, tokens1);
  EXPECT_EQ(SseData(second->body).back(), "[DONE]");

  // Not streamed, paraphrased: the vector tier, the same message.
  auto para = Chat("Could you write a poem about the sea?", /*stream=*/false);
  ASSERT_TRUE(para);
  ASSERT_EQ(para->status, 200) << para->body;
  EXPECT_EQ(para->get_header_value("x-tandem-cache"), "hit-semantic");
  std::string joined;
  for (const std::string& c : chunks1) joined += c;
  EXPECT_EQ(json::parse(para->body)["choices"][0]["message"]["content"], joined);
  EXPECT_EQ(worker_->requests(), 1);

  // no-cache: to the worker (and stored again); sampled without a policy:
  // bypassed, no header.
  auto fresh = Chat("Write a poem about the sea.", /*stream=*/false, "", "no-cache");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->get_header_value("x-tandem-cache"), "miss");
  EXPECT_EQ(worker_->requests(), 2);
  auto sampled = Chat("Write a poem about the sea.", /*stream=*/false, "", "", 0.8);
  ASSERT_TRUE(sampled);
  EXPECT_FALSE(sampled->has_header("x-tandem-cache"));
  EXPECT_EQ(worker_->requests(), 3);
  auto bad = Chat("Write a poem about the sea.", /*stream=*/false, "", "private");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_THAT(bad->body, HasSubstr("Cache-Control"));
}

TEST_F(RouterCacheTest, TenantANeverReceivesTenantBsCachedAnswer) {
  StartRouter(/*keys=*/true);
  const std::string q = "What is the capital of France?";
  worker_->SetScript({300, 301, 302, 303});
  const GrpcResult alice = Generate(q, kAliceKey);
  ASSERT_TRUE(alice.status.ok()) << alice.status.error_message();
  // Bob, the same prompt: not alice's answer, from either tier.
  worker_->SetScript({400, 401, 402});
  const GrpcResult bob = Generate(q, kBobKey);
  ASSERT_TRUE(bob.status.ok());
  EXPECT_THAT(bob.route_cache_hit, ::testing::Each(false));
  EXPECT_NE(bob.text, alice.text);
  // Carol, a paraphrase of both (the vector tier): neither's answer.
  worker_->SetScript({500, 501});
  const GrpcResult carol = Generate("What's the capital of France?", kCarolKey);
  ASSERT_TRUE(carol.status.ok());
  EXPECT_THAT(carol.route_cache_hit, ::testing::Each(false));
  EXPECT_NE(carol.text, alice.text);
  EXPECT_NE(carol.text, bob.text);
  EXPECT_EQ(worker_->requests(), 3);
  // Each tenant gets its own answer from the cache.
  const GrpcResult alice_again = Generate(q, kAliceKey);
  EXPECT_EQ(alice_again.route_cache_hit, std::vector<bool>({true, true}));
  EXPECT_EQ(alice_again.text, alice.text);
  const GrpcResult bob_again = Generate("What's the capital of France?", kBobKey);
  EXPECT_EQ(bob_again.route_cache_hit, std::vector<bool>({true, true}));
  EXPECT_EQ(bob_again.text, bob.text);
  EXPECT_EQ(worker_->requests(), 3);
  // HTTP likewise.
  auto a = Chat(q, /*stream=*/false, kAliceKey);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->get_header_value("x-tandem-cache"), "miss");
  auto b = Chat(q, /*stream=*/false, kBobKey);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->get_header_value("x-tandem-cache"), "miss");
  EXPECT_EQ(worker_->requests(), 5);
}

TEST_F(RouterCacheTest, FailedGenerationIsNotStored) {
  StartRouter(/*keys=*/false);
  worker_->SetFailure(FakeWorker::Failure::kDieMidStream, 2);
  const GrpcResult failed = Generate("Tell me a story.");
  EXPECT_FALSE(failed.status.ok());
  worker_->SetFailure(FakeWorker::Failure::kNone);
  const GrpcResult ok = Generate("Tell me a story.");
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_THAT(ok.route_cache_hit, ::testing::Each(false));
  EXPECT_EQ(worker_->requests(), 2);
}

}  // namespace
}  // namespace tandem::router
