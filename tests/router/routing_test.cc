// Complexity routing end to end in one process (router/complexity.h): the
// real fronts and router over two served models ("small-model",
// "large-model": stories260K under two worker model ids) and FakeWorkers
// announcing them. The alias routes by score (features only here: no
// embedding model), an explicit model always wins, a pool with no live
// worker is skipped, none left is UNAVAILABLE naming both pools; the
// decision comes back in RouteInfo / HTTP headers and the metrics.

#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/router_server.h"
#include "tests/router/router_harness.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_worker.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

namespace v1 = ::tandem::v1;
using json = nlohmann::json;
using testing::FakeWorker;
using testing::RouterHarness;
using ::tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kEasy[] = "Tell me a joke about cats.";
constexpr char kHard[] =
    "Implement a lock-free queue in C++ and prove it is linearizable, step by step.";

struct Result {
  grpc::Status status;
  std::string model;
  float score = -1;
};

Result Generate(v1::Generation::Stub& stub, const std::string& model, const std::string& text) {
  v1::GenerateRequest req;
  req.set_model(model);
  req.set_text(text);
  req.set_max_tokens(4);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&ctx, req);
  Result r;
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    if (m.has_route()) {
      r.model = m.route().model();
      r.score = m.route().complexity_score();
    }
  }
  r.status = reader->Finish();
  return r;
}

RouterConfig TwoPoolConfig(std::vector<std::string> workers) {
  RouterConfig c;
  c.models.push_back({"small-model", testing::StoriesPath(), "", "w-small"});
  c.models.push_back({"large-model", testing::StoriesPath(), "", "w-large"});
  c.routing.pools.push_back({"small", "small-model", 0, {}, ""});
  c.routing.pools.push_back({"large", "large-model", 0.35, {}, ""});
  c.discovery.static_workers = std::move(workers);
  c.discovery.backoff_initial = absl::Milliseconds(20);
  c.discovery.backoff_max = absl::Milliseconds(200);
  return c;
}

class RoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    small_ = Worker("w-small");
    large_ = Worker("w-large");
    h_ = std::make_unique<RouterHarness>(TwoPoolConfig({small_->address(), large_->address()}));
    ASSERT_TRUE(h_->WaitForLive(2));
  }

  static std::unique_ptr<FakeWorker> Worker(const std::string& model) {
    FakeWorker::Options o;
    o.model = model;
    std::unique_ptr<FakeWorker> w = FakeWorker::Start(o);
    w->SetScript({100, 101, 102});
    return w;
  }

  std::string Metrics() { return h_->metrics().RenderText(); }

  std::unique_ptr<FakeWorker> small_;
  std::unique_ptr<FakeWorker> large_;
  std::unique_ptr<RouterHarness> h_;
};

TEST_F(RoutingTest, AliasAndNoModelRouteByScore) {
  Result easy = Generate(h_->stub(), "auto", kEasy);
  ASSERT_TRUE(easy.status.ok()) << easy.status.error_message();
  EXPECT_EQ(easy.model, "small-model");
  EXPECT_GE(easy.score, 0);
  EXPECT_LT(easy.score, 0.35);
  EXPECT_EQ(small_->requests(), 1);

  Result hard = Generate(h_->stub(), "", kHard);  // no model: routed too
  ASSERT_TRUE(hard.status.ok()) << hard.status.error_message();
  EXPECT_EQ(hard.model, "large-model");
  EXPECT_GE(hard.score, 0.35);
  EXPECT_EQ(large_->requests(), 1);

  EXPECT_THAT(Metrics(), AllOf(HasSubstr("tandem_route_decisions_total{pool=\"small\"} 1"),
                               HasSubstr("tandem_route_decisions_total{pool=\"large\"} 1"),
                               HasSubstr("tandem_route_decisions_total{pool=\"none\"} 0")));
}

TEST_F(RoutingTest, AnExplicitModelAlwaysWins) {
  Result r = Generate(h_->stub(), "small-model", kHard);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.model, "small-model");
  EXPECT_EQ(r.score, 0);  // not routed: no score
  EXPECT_EQ(small_->requests(), 1);
  EXPECT_EQ(large_->requests(), 0);
  r = Generate(h_->stub(), "large-model", kEasy);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.model, "large-model");
  EXPECT_THAT(Metrics(), HasSubstr("tandem_route_decisions_total{pool=\"small\"} 0"));
  // Even with its pool down: no rerouting to the other model.
  small_->Shutdown();
  ASSERT_TRUE(h_->WaitForLive(1));
  r = Generate(h_->stub(), "small-model", kEasy);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  EXPECT_EQ(large_->requests(), 1);
}

TEST_F(RoutingTest, APoolWithoutLiveWorkersIsSkippedThenNoneLeftIsUnavailable) {
  small_->Shutdown();
  ASSERT_TRUE(h_->WaitForLive(1));
  Result r = Generate(h_->stub(), "auto", kEasy);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.model, "large-model");
  EXPECT_LT(r.score, 0.35);  // the score still says small
  EXPECT_THAT(Metrics(), AllOf(HasSubstr("tandem_route_pool_skipped_total{pool=\"small\"} 1"),
                               HasSubstr("tandem_route_decisions_total{pool=\"large\"} 1")));

  large_->Shutdown();
  ASSERT_TRUE(h_->WaitForLive(0));
  r = Generate(h_->stub(), "auto", kHard);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(),
              AllOf(HasSubstr("no model pool has a live worker"), HasSubstr("small (small-model"),
                    HasSubstr("large (large-model")));
  EXPECT_THAT(Metrics(), HasSubstr("tandem_route_decisions_total{pool=\"none\"} 1"));
}

TEST_F(RoutingTest, HttpHeadersAndModelLists) {
  httplib::Client cli("127.0.0.1", h_->http_port());
  cli.set_read_timeout(20);
  auto chat = [&](const std::string& model, const std::string& text) {
    json body = {{"model", model},
                 {"max_tokens", 4},
                 {"messages",
                  {{{"role", "system"}, {"content", "Design and optimize step by step."}},
                   {{"role", "user"}, {"content", text}}}}};
    return cli.Post("/v1/chat/completions", body.dump(), "application/json");
  };
  // The last user message is scored, not the system prompt.
  auto res = chat("auto", kEasy);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("X-Tandem-Route-Pool"), "small");
  double score = -1;
  ASSERT_TRUE(absl::SimpleAtod(res->get_header_value("X-Tandem-Complexity"), &score));
  EXPECT_LT(score, 0.35);
  EXPECT_EQ(json::parse(res->body)["model"], "small-model");

  res = chat("auto", kHard);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("X-Tandem-Route-Pool"), "large");
  EXPECT_EQ(json::parse(res->body)["model"], "large-model");

  res = chat("small-model", kHard);  // explicit: no routing headers
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(res->has_header("X-Tandem-Route-Pool"));
  EXPECT_EQ(json::parse(res->body)["model"], "small-model");

  res = cli.Get("/v1/models");
  ASSERT_TRUE(res);
  const json models = json::parse(res->body)["data"];
  ASSERT_EQ(models.size(), 3u) << res->body;
  EXPECT_EQ(models[0]["id"], "small-model");
  EXPECT_EQ(models[1]["id"], "large-model");
  EXPECT_EQ(models[2]["id"], "auto");
  EXPECT_EQ(models[2]["routes_to"], json({"small-model", "large-model"}));
  EXPECT_EQ(models[2]["context_length"], models[0]["context_length"]);

  grpc::ClientContext ctx;
  v1::ListModelsResponse list;
  ASSERT_TRUE(h_->stub().ListModels(&ctx, v1::ListModelsRequest(), &list).ok());
  ASSERT_EQ(list.models_size(), 3);
  EXPECT_EQ(list.models(2).id(), "auto");
  EXPECT_EQ(list.models(2).architecture(), "router");
}

TEST_F(RoutingTest, TokenIdsCannotBeRouted) {
  v1::GenerateRequest req;
  req.set_model("auto");
  req.mutable_token_ids()->add_ids(1);
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      h_->stub().Generate(&ctx, req);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
  }
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("model 'auto' routes on the prompt's text"));
}

TEST(RoutingServerTest, APoolNamingNoServedModelStopsTheStart) {
  RouterConfig c = TwoPoolConfig({});
  c.routing.pools[1].model = "missing";
  c.grpc_address = "127.0.0.1:0";
  c.http_address = "127.0.0.1:0";
  EXPECT_THAT(RouterServer::Create(c, ApiKeys()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("routing.pools[1].model: 'missing' is not a served model"),
                             HasSubstr("small-model"))));
  c = TwoPoolConfig({});
  c.routing.pools[0].exemplars_file = "/nonexistent/easy.txt";
  c.grpc_address = "127.0.0.1:0";
  c.http_address = "127.0.0.1:0";
  EXPECT_THAT(RouterServer::Create(c, ApiKeys()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("routing.pools[0].exemplars_file: cannot read "
                                 "/nonexistent/easy.txt")));
}

}  // namespace
}  // namespace tandem::router
