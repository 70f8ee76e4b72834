// Router config: YAML parsing (every section, durations, relative model
// paths) and validation errors naming the key.

#include "router/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RouterConfigTest, ParsesEverySection) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
grpc_address: 127.0.0.1:0
http_address: 127.0.0.1:0
mode: colocated
max_route_attempts: 3
models:
  - name: tiny
    path: models/tiny.gguf
    chat_template: llama3
    worker_model: llama
workers:
  static: [10.0.0.1:7001, 10.0.0.2:7001]
  dns: decode.default.svc.cluster.local:7001
  dns_refresh: 2s
  heartbeat_timeout: 1500ms
internal_tls:
  ca: certs/ca.pem
  cert: /abs/cluster.pem
  key: certs/cluster.key
limits:
  max_inflight: 4
  prepare_threads: 3
  retry_after: 2s
  max_n: 2
  default_timeout: 1m
)",
                                                         "/etc/tandem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->grpc_address, "127.0.0.1:0");
  EXPECT_EQ(c->mode, RoutingMode::kColocated);
  EXPECT_EQ(c->max_route_attempts, 3);
  ASSERT_EQ(c->models.size(), 1u);
  EXPECT_EQ(c->models[0].name, "tiny");
  EXPECT_EQ(c->models[0].path, "/etc/tandem/models/tiny.gguf");
  EXPECT_EQ(c->models[0].chat_template, "llama3");
  EXPECT_EQ(c->models[0].worker_model, "llama");
  EXPECT_THAT(c->discovery.static_workers, ElementsAre("10.0.0.1:7001", "10.0.0.2:7001"));
  EXPECT_THAT(c->discovery.dns_workers, ElementsAre("decode.default.svc.cluster.local:7001"));
  EXPECT_EQ(c->discovery.dns_refresh, absl::Seconds(2));
  EXPECT_EQ(c->discovery.heartbeat_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(c->limits.max_inflight, 4);
  EXPECT_EQ(c->limits.prepare_threads, 3);
  EXPECT_EQ(c->limits.default_timeout, absl::Minutes(1));
  EXPECT_EQ(c->internal_tls.ca_file, "/etc/tandem/certs/ca.pem");
  EXPECT_EQ(c->internal_tls.cert_file, "/abs/cluster.pem");
  EXPECT_EQ(c->internal_tls.key_file, "/etc/tandem/certs/cluster.key");
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
}

// Issue 8: the router talks to workers beyond loopback only over mutual TLS,
// unless told otherwise.
TEST(RouterConfigTest, NonLoopbackWorkersNeedInternalTls) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
models: [{path: m.gguf}]
workers:
  static: [127.0.0.1:7001, 10.0.0.1:7001]
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->Validate(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                      ::testing::AllOf(HasSubstr("workers.static"),
                                                       HasSubstr("10.0.0.1:7001"))));
  c->discovery.static_workers = {"127.0.0.1:7001", "[::1]:7002", "localhost:7003"};
  EXPECT_OK(c->Validate());
  c->discovery.dns_workers = {"decode.svc:7001"};
  EXPECT_THAT(c->Validate(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("workers.dns")));
  absl::StatusOr<RouterConfig> allowed = ParseRouterConfigYaml(R"(
models: [{path: m.gguf}]
allow_insecure_internal: true
workers: {dns: [decode.svc:7001]}
)");
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_OK(allowed->Validate());
}

TEST(RouterConfigTest, InternalTlsNeedsAllThreeFiles) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
models: [{path: m.gguf}]
internal_tls: {ca: ca.pem, key: k.pem}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("internal_tls.cert")));
  EXPECT_THAT(ParseRouterConfigYaml("internal_tls: {ca: a, crt: b}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("crt")));
}

TEST(RouterConfigTest, Defaults) {
  RouterConfig c;
  EXPECT_EQ(c.discovery.heartbeat_timeout, absl::Seconds(3));
  EXPECT_EQ(c.mode, RoutingMode::kAuto);
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("models")));
}

TEST(RouterConfigTest, HttpFrontLimits) {
  RouterConfig d;
  EXPECT_EQ(d.http_threads, 2);
  EXPECT_EQ(d.http_backlog, 4096);
  EXPECT_EQ(d.limits.max_prompt_bytes, 0);
  EXPECT_EQ(d.limits.header_timeout, absl::Seconds(10));
  EXPECT_EQ(d.limits.body_timeout, absl::Seconds(30));
  EXPECT_EQ(d.limits.idle_timeout, absl::Seconds(60));
  EXPECT_EQ(d.limits.max_connections, 2048);
  EXPECT_EQ(d.limits.max_stream_buffer_bytes, 1 << 20);
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
http_threads: 3
http_backlog: 128
models: [ {path: a.gguf} ]
limits:
  max_body_bytes: 1048576
  max_prompt_bytes: 65536
  header_timeout: 2s
  body_timeout: 5s
  idle_timeout: 15s
  max_connections: 100
  max_stream_buffer_bytes: 65536
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->http_threads, 3);
  EXPECT_EQ(c->http_backlog, 128);
  EXPECT_EQ(c->limits.max_prompt_bytes, 65536);
  EXPECT_EQ(c->limits.header_timeout, absl::Seconds(2));
  EXPECT_EQ(c->limits.body_timeout, absl::Seconds(5));
  EXPECT_EQ(c->limits.idle_timeout, absl::Seconds(15));
  EXPECT_EQ(c->limits.max_connections, 100);
  EXPECT_EQ(c->limits.max_stream_buffer_bytes, 65536);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
  struct Bad {
    void (*set)(RouterConfig&);
    const char* key;
  };
  const Bad bad[] = {
      {[](RouterConfig& r) { r.http_backlog = 0; }, "http_backlog"},
      {[](RouterConfig& r) { r.limits.max_prompt_bytes = -1; }, "limits.max_prompt_bytes"},
      {[](RouterConfig& r) { r.limits.header_timeout = absl::ZeroDuration(); },
       "limits.header_timeout"},
      {[](RouterConfig& r) { r.limits.body_timeout = -absl::Seconds(1); }, "limits.body_timeout"},
      {[](RouterConfig& r) { r.limits.idle_timeout = absl::ZeroDuration(); },
       "limits.idle_timeout"},
      {[](RouterConfig& r) { r.limits.max_connections = 0; }, "limits.max_connections"},
      {[](RouterConfig& r) { r.limits.max_stream_buffer_bytes = 10; },
       "limits.max_stream_buffer_bytes"},
  };
  for (const Bad& b : bad) {
    RouterConfig r = *c;
    b.set(r);
    EXPECT_THAT(r.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(b.key)));
  }
  EXPECT_THAT(ParseRouterConfigYaml("limits: {header_timeout: soon}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limits.header_timeout")));
}

TEST(RouterConfigTest, ErrorsNameTheKey) {
  EXPECT_THAT(ParseRouterConfigYaml("limits: {max_n: lots}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limits.max_n")));
  EXPECT_THAT(ParseRouterConfigYaml("limitz: {}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown key 'limitz'")));
  EXPECT_THAT(ParseRouterConfigYaml("workers: {heartbeat_timeout: soon}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("workers.heartbeat_timeout")));
  EXPECT_THAT(ParseRouterConfigYaml("mode: sideways"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sideways")));
  EXPECT_THAT(ParseRouterConfigYaml("models: [ {path: a.gguf, colour: red} ]"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("models[0].colour")));
  EXPECT_THAT(ParseRouterConfigYaml("grpc_address: [unclosed"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 1")));
  RouterConfig c;
  c.models.push_back({"", "a.gguf", "", ""});
  c.limits.max_inflight = 0;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("limits.max_inflight")));
  c.limits.max_inflight = 1;
  c.limits.prepare_threads = 0;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("limits.prepare_threads")));
  c.limits.prepare_threads = 8;
  c.discovery.static_workers = {"no-port"};
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no-port")));
}

TEST(RouterConfigTest, AuthSectionAndRouteWorkers) {
  RouterConfig defaults;
  EXPECT_EQ(defaults.auth.keys_file, "");
  EXPECT_EQ(defaults.auth.keys_env, "TANDEM_API_KEYS");
  EXPECT_TRUE(defaults.auth.public_health);
  EXPECT_TRUE(defaults.auth.public_metrics);
  EXPECT_FALSE(defaults.expose_route_workers);

  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
models: [{path: a.gguf}]
expose_route_workers: true
auth:
  keys_file: keys/dev.yaml
  keys_env: ""
  public_health: false
  public_metrics: false
)",
                                                         "/etc/tandem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->auth.keys_file, "/etc/tandem/keys/dev.yaml");
  EXPECT_EQ(c->auth.keys_env, "");
  EXPECT_FALSE(c->auth.public_health);
  EXPECT_FALSE(c->auth.public_metrics);
  EXPECT_TRUE(c->expose_route_workers);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
}

TEST(RouterConfigTest, AuthErrorsNameTheKey) {
  EXPECT_THAT(ParseRouterConfigYaml("auth: {keys: a.yaml}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown key 'auth.keys'")));
  EXPECT_THAT(ParseRouterConfigYaml("auth: {public_health: maybe}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auth.public_health")));
  EXPECT_THAT(ParseRouterConfigYaml("expose_route_workers: sometimes"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expose_route_workers")));
  RouterConfig c;
  c.models.push_back({"", "a.gguf", "", ""});
  c.auth.keys_env = "1KEYS";
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auth.keys_env: '1KEYS'")));
  c.auth.keys_env = "MY_KEYS=";
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auth.keys_env")));
}

TEST(RouterConfigTest, EmbeddingSection) {
  RouterConfig defaults;
  EXPECT_EQ(defaults.embedding.model, "");
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
models: [{path: a.gguf}]
embedding: {model: all-minilm-l6-v2, threads: 2, max_seq_tokens: 128, max_batch: 8,
            precision: bf16}
)",
                                                         "/etc/tandem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->embedding.model, "all-minilm-l6-v2");  // a model name stays a name
  EXPECT_EQ(c->embedding.threads, 2);
  EXPECT_EQ(c->embedding.max_seq_tokens, 128);
  EXPECT_EQ(c->embedding.max_batch, 8);
  EXPECT_EQ(c->embedding.precision, "bf16");
  EXPECT_THAT(ParseRouterConfigYaml("embedding: {precision: fp8}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding.precision")));
  c = ParseRouterConfigYaml("embedding: {model: m/minilm.gguf}", "/etc/tandem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->embedding.model, "/etc/tandem/m/minilm.gguf");
  EXPECT_THAT(ParseRouterConfigYaml("embedding: {modle: x}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown key 'embedding.modle'")));
  EXPECT_THAT(ParseRouterConfigYaml("embedding: {threads: two}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding.threads")));
}

TEST(RouterConfigTest, SemanticCacheSection) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
models: [{name: small, path: /m/a.gguf}]
embedding: {model: all-minilm-l6-v2}
semantic_cache:
  enabled: true
  capacity: 500
  ttl: 10m
  threshold: 0.85
  thresholds: {small: 0.93}
  exact_only: false
)");
  ASSERT_TRUE(c.ok()) << c.status();
  const SemanticCacheConfig& s = c->semantic_cache;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.capacity, 500);
  EXPECT_EQ(s.ttl, absl::Minutes(10));
  EXPECT_FLOAT_EQ(s.threshold, 0.85f);
  EXPECT_FLOAT_EQ(s.thresholds.at("small"), 0.93f);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();

  EXPECT_THAT(ParseRouterConfigYaml("semantic_cache: {treshold: 0.9}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown key 'semantic_cache.treshold'")));
  EXPECT_THAT(ParseRouterConfigYaml("semantic_cache: {threshold: high}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("semantic_cache.threshold")));
  auto invalid = [&](void (*tweak)(RouterConfig&), const std::string& what) {
    RouterConfig bad = *c;
    tweak(bad);
    EXPECT_THAT(bad.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
  };
  invalid([](RouterConfig& r) { r.semantic_cache.threshold = 1.5f; }, "semantic_cache.threshold");
  invalid([](RouterConfig& r) { r.semantic_cache.thresholds["small"] = 0; },
          "semantic_cache.thresholds.small");
  invalid([](RouterConfig& r) { r.semantic_cache.thresholds["big"] = 0.9f; },
          "semantic_cache.thresholds.big: no served model");
  invalid([](RouterConfig& r) { r.semantic_cache.capacity = 0; }, "semantic_cache.capacity");
  invalid([](RouterConfig& r) { r.embedding.model = ""; }, "needs embedding.model");
  RouterConfig exact_only = *c;
  exact_only.embedding.model = "";
  exact_only.semantic_cache.exact_only = true;
  EXPECT_TRUE(exact_only.Validate().ok());
}

TEST(RouterConfigTest, PlacementDefaultsToKvAware) {
  ASSERT_OK_AND_ASSIGN(RouterConfig c, ParseRouterConfigYaml("models: [{path: m.gguf}]"));
  EXPECT_EQ(c.placement, Placement::kKvAware);
  ASSERT_OK_AND_ASSIGN(c, ParseRouterConfigYaml("placement: least_load"));
  EXPECT_EQ(c.placement, Placement::kLeastLoad);
  ASSERT_OK_AND_ASSIGN(c, ParseRouterConfigYaml("placement: kv_aware"));
  EXPECT_EQ(c.placement, Placement::kKvAware);
  EXPECT_THAT(ParseRouterConfigYaml("placement: random"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("placement"), HasSubstr("'random'"),
                             HasSubstr("kv_aware, least_load"))));
}

}  // namespace
}  // namespace tandem::router
