// API keys on the router's public fronts, in one process: the real HTTP and
// gRPC fronts (RouterServer) with ApiKeys, against a FakeWorker.
//  - HTTP: no key / a wrong key -> 401 + OpenAI body + WWW-Authenticate on
//    every route (unknown ones too); the right key -> 200; health and
//    metrics public by default, closed when configured so.
//  - gRPC: Generate, ListModels, Tokenize without / with a wrong
//    `authorization` metadata -> UNAUTHENTICATED; the right one -> OK.
//  - Two tenants sending the same X-Request-Id at once: both complete, the
//    first one's stream is not cut, the worker sees two different router ids.
//  - RouteInfo names no worker unless expose_route_workers.
//  - `tandem up` hands the router its key file as an absolute path.

#include <httplib.h>

#include <filesystem>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/auth.h"
#include "router/cli/launcher.h"
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
using ::testing::Not;
using testing::RouterHarness;

constexpr char kAliceKey[] = "sk-alice-0123456789abcdef";
constexpr char kBobKey[] = "sk-bob-0123456789abcdef00";

class RouterAuthTest : public ::testing::Test {
 protected:
  // A colocated worker streaming `tokens` tokens, one every `delay`.
  void StartWorker(int tokens = 8, absl::Duration delay = absl::ZeroDuration()) {
    worker_ = FakeWorker::Start(FakeWorker::Options());
    ASSERT_NE(worker_, nullptr);
    worker_->SetScript(std::vector<int32_t>(tokens, 100));
    worker_->SetTokenDelay(delay);
  }

  // The router with alice's and bob's keys (or none).
  void StartRouter(bool keys, void (*tweak)(RouterConfig&) = nullptr) {
    RouterConfig c;
    c.discovery.static_workers = {worker_->address()};
    c.discovery.backoff_initial = absl::Milliseconds(20);
    if (tweak != nullptr) {
      tweak(c);
    }
    ApiKeys api_keys;
    if (keys) {
      AuthConfig auth = c.auth;
      absl::StatusOr<ApiKeys> loaded =
          ApiKeys::Load(auth, absl::StrCat("alice=", kAliceKey, ",bob=", kBobKey));
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      api_keys = *std::move(loaded);
    }
    router_ = std::make_unique<RouterHarness>(c, std::move(api_keys));
    ASSERT_TRUE(router_->WaitForLive(1));
  }

  httplib::Client Http() {
    httplib::Client cli("127.0.0.1", router_->http_port());
    cli.set_read_timeout(30, 0);
    return cli;
  }

  static httplib::Headers Bearer(const std::string& key) {
    return {{"Authorization", absl::StrCat("Bearer ", key)}};
  }

  std::unique_ptr<FakeWorker> worker_;
  std::unique_ptr<RouterHarness> router_;
};

void ExpectUnauthorized(const httplib::Result& res, const std::string& what) {
  ASSERT_TRUE(res) << what;
  EXPECT_EQ(res->status, 401) << what << ": " << res->body;
  EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer") << what;
  json body = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << what << ": " << res->body;
  EXPECT_EQ(body["error"]["type"], "invalid_request_error") << what;
  EXPECT_EQ(body["error"]["code"], "invalid_api_key") << what;
  EXPECT_TRUE(body["error"]["param"].is_null()) << what;
  EXPECT_TRUE(body["error"]["message"].is_string()) << what;
  EXPECT_THAT(res->body, Not(HasSubstr("sk-"))) << what;
}

constexpr char kCompletion[] = R"({"model":"stories260K","prompt":"Once","max_tokens":4})";
constexpr char kChat[] =
    R"({"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"max_tokens":4})";

TEST_F(RouterAuthTest, HttpWantsAKeyOnEveryRouteButHealthAndMetrics) {
  StartWorker();
  StartRouter(/*keys=*/true);
  httplib::Client cli = Http();
  for (const httplib::Headers& h : {httplib::Headers{}, Bearer("sk-mallory-0123456789abcdef"),
                                    Bearer(""), httplib::Headers{{"Authorization", kAliceKey}}}) {
    const std::string what = h.empty() ? "no key" : h.begin()->second.substr(0, 9);
    ExpectUnauthorized(cli.Post("/v1/completions", h, kCompletion, "application/json"),
                       "completions, " + what);
    ExpectUnauthorized(cli.Post("/v1/chat/completions", h, kChat, "application/json"),
                       "chat, " + what);
    ExpectUnauthorized(cli.Get("/v1/models", h), "models, " + what);
    ExpectUnauthorized(cli.Get("/v1/no-such-route", h), "unknown route, " + what);
    ExpectUnauthorized(cli.Post("/v1/no-such-route", h, "{}", "application/json"),
                       "unknown POST route, " + what);
  }
  for (const char* key : {kAliceKey, kBobKey}) {
    auto res = cli.Post("/v1/completions", Bearer(key), kCompletion, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    res = cli.Post("/v1/chat/completions", Bearer(key), kChat, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    res = cli.Get("/v1/models", Bearer(key));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    res = cli.Get("/v1/no-such-route", Bearer(key));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << res->body;  // past the key, the route is unknown
  }
  for (const char* path : {"/health", "/health/ready", "/health/live", "/metrics"}) {
    auto res = cli.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path << ": " << res->body;
  }
}

TEST_F(RouterAuthTest, HealthAndMetricsCanBeClosedToo) {
  StartWorker();
  StartRouter(/*keys=*/true, [](RouterConfig& c) {
    c.auth.public_health = false;
    c.auth.public_metrics = false;
  });
  httplib::Client cli = Http();
  for (const char* path : {"/health", "/health/ready", "/health/live", "/metrics"}) {
    ExpectUnauthorized(cli.Get(path), path);
    auto res = cli.Get(path, Bearer(kBobKey));
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path << ": " << res->body;
  }
}

TEST_F(RouterAuthTest, WithoutKeysEverythingIsOpen) {
  StartWorker();
  StartRouter(/*keys=*/false);
  httplib::Client cli = Http();
  auto res = cli.Post("/v1/completions", kCompletion, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  grpc::ClientContext ctx;
  v1::ListModelsResponse models;
  EXPECT_TRUE(router_->stub().ListModels(&ctx, v1::ListModelsRequest(), &models).ok());
}

// Each unary / streaming call of tandem.v1.Generation with `key` ("" = no
// metadata): its status code.
struct GrpcCodes {
  grpc::StatusCode generate;
  grpc::StatusCode list_models;
  grpc::StatusCode tokenize;
  std::string messages;
};

GrpcCodes CallEach(v1::Generation::Stub& stub, const std::string& authorization) {
  GrpcCodes out;
  auto context = [&](grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!authorization.empty()) {
      ctx.AddMetadata("authorization", authorization);
    }
  };
  {
    grpc::ClientContext ctx;
    context(ctx);
    v1::GenerateRequest req;
    req.set_model("stories260K");
    req.set_text("Once");
    req.set_max_tokens(4);
    auto reader = stub.Generate(&ctx, req);
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    grpc::Status s = reader->Finish();
    out.generate = s.error_code();
    out.messages += s.error_message() + "\n";
  }
  {
    grpc::ClientContext ctx;
    context(ctx);
    v1::ListModelsResponse res;
    grpc::Status s = stub.ListModels(&ctx, v1::ListModelsRequest(), &res);
    out.list_models = s.error_code();
    out.messages += s.error_message() + "\n";
  }
  {
    grpc::ClientContext ctx;
    context(ctx);
    v1::TokenizeRequest req;
    req.set_model("stories260K");
    req.set_text("Once");
    v1::TokenizeResponse res;
    grpc::Status s = stub.Tokenize(&ctx, req, &res);
    out.tokenize = s.error_code();
    out.messages += s.error_message() + "\n";
  }
  return out;
}

TEST_F(RouterAuthTest, GrpcWantsTheAuthorizationMetadata) {
  StartWorker();
  StartRouter(/*keys=*/true);
  for (const std::string& authorization :
       {std::string(""), std::string("Bearer sk-mallory-0123456789abcdef"), std::string(kAliceKey),
        absl::StrCat("Basic ", kAliceKey)}) {
    GrpcCodes c = CallEach(router_->stub(), authorization);
    EXPECT_EQ(c.generate, grpc::StatusCode::UNAUTHENTICATED) << authorization;
    EXPECT_EQ(c.list_models, grpc::StatusCode::UNAUTHENTICATED) << authorization;
    EXPECT_EQ(c.tokenize, grpc::StatusCode::UNAUTHENTICATED) << authorization;
    EXPECT_THAT(c.messages, Not(HasSubstr("sk-"))) << authorization;
  }
  GrpcCodes c = CallEach(router_->stub(), absl::StrCat("Bearer ", kAliceKey));
  EXPECT_EQ(c.generate, grpc::StatusCode::OK) << c.messages;
  EXPECT_EQ(c.list_models, grpc::StatusCode::OK) << c.messages;
  EXPECT_EQ(c.tokenize, grpc::StatusCode::OK) << c.messages;
}

// The router's ids are 32 hex digits, or that plus ".<choice>.<attempt>".
bool IsRouterId(const std::string& id) {
  const std::string base = id.substr(0, id.find('.'));
  return base.size() == 32 && base.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Tenant A streams with X-Request-Id "same"; tenant B sends "same" while A's
// stream runs. Neither can name the other's request: both complete (no 409,
// A's stream not cut) and the worker saw two different router ids.
TEST_F(RouterAuthTest, TenantsSharingAnXRequestIdCannotTouchEachOther) {
  StartWorker(/*tokens=*/12, absl::Milliseconds(25));
  StartRouter(/*keys=*/true);
  std::string a_body;
  int a_status = 0;
  std::thread a([&] {
    httplib::Client cli = Http();
    httplib::Headers h = Bearer(kAliceKey);
    h.emplace("X-Request-Id", "same");
    auto res = cli.Post("/v1/completions", h,
                        R"({"model":"stories260K","prompt":"Once","max_tokens":32,"stream":true})",
                        "application/json");
    if (res) {
      a_status = res->status;
      a_body = res->body;
    }
  });
  // B starts once A's stream is running on the worker.
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10);
       worker_->active_streams() == 0 && absl::Now() < give_up;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(worker_->active_streams(), 1);
  httplib::Client cli = Http();
  httplib::Headers h = Bearer(kBobKey);
  h.emplace("X-Request-Id", "same");
  auto b = cli.Post("/v1/completions", h, kCompletion, "application/json");
  a.join();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200) << b->body;
  EXPECT_EQ(b->get_header_value("X-Request-Id"), "same");
  EXPECT_EQ(a_status, 200) << a_body;
  const std::vector<std::string> events = SseData(a_body);
  ASSERT_FALSE(events.empty()) << a_body;
  EXPECT_EQ(events.back(), "[DONE]") << a_body;
  EXPECT_THAT(a_body, Not(HasSubstr("\"error\""))) << a_body;
  EXPECT_THAT(a_body, HasSubstr("\"finish_reason\":\"stop\"")) << a_body;
  const std::vector<std::string> ids = worker_->request_ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
  for (const std::string& id : ids) {
    EXPECT_TRUE(IsRouterId(id)) << id;
  }
}

// RouteInfo would name the workers' ids (role@address by default): public
// clients see them only when the config says so.
TEST_F(RouterAuthTest, RouteInfoNamesNoWorkerUnlessExposed) {
  StartWorker();
  for (bool expose : {false, true}) {
    void (*expose_workers)(RouterConfig&) = [](RouterConfig& c) { c.expose_route_workers = true; };
    StartRouter(/*keys=*/false, expose ? expose_workers : nullptr);
    grpc::ClientContext ctx;
    v1::GenerateRequest req;
    req.set_model("stories260K");
    req.set_text("Once");
    req.set_max_tokens(4);
    auto reader = router_->stub().Generate(&ctx, req);
    v1::GenerateResponse m;
    std::vector<v1::GenerateResponse> messages;
    while (reader->Read(&m)) {
      messages.push_back(m);
    }
    ASSERT_TRUE(reader->Finish().ok());
    int with_route = 0;
    for (const v1::GenerateResponse& r : messages) {
      if (!r.has_route()) {
        continue;
      }
      ++with_route;
      EXPECT_TRUE(r.route().colocated());
      EXPECT_EQ(r.route().decode_worker(), expose ? worker_->address() : "") << expose;
      if (!expose) {
        EXPECT_THAT(r.DebugString(), Not(HasSubstr("127.0.0.1")));
      }
    }
    EXPECT_EQ(with_route, 2) << "the first and the last message";
    router_.reset();
  }
}

// The router reads the config tandem up writes into its run directory: a
// key file relative to the cluster file (itself given relative to the
// working directory, as `tandem up deploy/local/secure.yaml`) becomes absolute.
TEST(TandemUpAuthTest, KeyFileIsResolvedAgainstTheClusterFile) {
  absl::StatusOr<cli::ClusterSpec> spec = cli::ParseClusterYaml(
      "model: m.gguf\nrouter: {auth: {keys_file: keys.yaml}}\ncolocated: {replicas: 1}\n",
      "deploy/local");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string keys_file = spec->router["auth"]["keys_file"].as<std::string>();
  EXPECT_EQ(keys_file, std::filesystem::absolute("deploy/local/keys.yaml").string());
  EXPECT_TRUE(std::filesystem::path(keys_file).is_absolute());
}

}  // namespace
}  // namespace tandem::router
