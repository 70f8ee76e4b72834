// ApiKeys: the key file and the key list (env var) parse, errors name the
// line / entry and field but never the key, Bearer parsing, the public-path
// predicate, the HTTP 401 body and the loopback check.

#include "router/auth.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::router {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAcmeKey[] = "sk-acme-0123456789abcdef";
constexpr char kGlobexKey[] = "sk-globex-0123456789abcdef";
// SHA-256 of kGlobexKey (`printf %s sk-globex-0123456789abcdef | sha256sum`).
constexpr char kGlobexSha256[] = "0519ceec55ef996a972333ea3dfbd5fc13bd28faef8220430f88a94334f1d172";

ApiKeys AcmeAndGlobex() {
  ApiKeys keys;
  EXPECT_TRUE(keys.Add("acme", kAcmeKey).ok());
  EXPECT_TRUE(keys.Add("globex", kGlobexKey).ok());
  return keys;
}

TEST(ApiKeysTest, NoKeysIsDisabledAndEverythingIsPublic) {
  ApiKeys keys;
  EXPECT_FALSE(keys.enabled());
  EXPECT_FALSE(keys.RequiresKey("/v1/completions"));
  absl::StatusOr<Tenant> t = keys.Authenticate("");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "");
  EXPECT_TRUE(AuthorizeHttp(keys, "/v1/models", "").allowed);
}

TEST(ApiKeysTest, BearerKeyNamesItsTenant) {
  ApiKeys keys = AcmeAndGlobex();
  EXPECT_TRUE(keys.enabled());
  EXPECT_THAT(keys.tenants(), ElementsAre("acme", "globex"));
  absl::StatusOr<Tenant> t = keys.Authenticate(absl::StrCat("Bearer ", kAcmeKey));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "acme");
  t = keys.Authenticate(absl::StrCat("  bearer   ", kGlobexKey, " "));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "globex");
}

TEST(ApiKeysTest, RefusalsAreUnauthenticatedAndNeverEchoTheKey) {
  ApiKeys keys = AcmeAndGlobex();
  const std::string wrong = "sk-acme-0123456789abcdeX";  // one byte off
  for (const std::string& value :
       {std::string(""), std::string("Bearer"), std::string("Bearer "),
        absl::StrCat("Basic ", kAcmeKey), std::string(kAcmeKey), absl::StrCat("Bearer ", wrong),
        absl::StrCat("Bearer ", kAcmeKey, "x"),
        absl::StrCat("Bearer ", std::string(kAcmeKey).substr(0, 10))}) {
    absl::StatusOr<Tenant> t = keys.Authenticate(value);
    EXPECT_THAT(t, StatusIs(absl::StatusCode::kUnauthenticated, Not(HasSubstr("sk-"))))
        << "'" << value << "'";
  }
  EXPECT_THAT(keys.Authenticate(""),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Authorization: Bearer")));
  EXPECT_THAT(keys.Authenticate(absl::StrCat("Bearer ", wrong)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("invalid API key")));
}

TEST(ApiKeysTest, PublicPathsFollowTheConfig) {
  ApiKeys open_health = AcmeAndGlobex();  // Add() keeps the defaults: both public
  for (const char* path : {"/health", "/health/ready", "/health/live", "/metrics"}) {
    EXPECT_FALSE(open_health.RequiresKey(path)) << path;
  }
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/nope",
                           "/health/", "/healthz", "/metrics/x", "/"}) {
    EXPECT_TRUE(open_health.RequiresKey(path)) << path;
  }
  AuthConfig closed;
  closed.public_health = false;
  closed.public_metrics = false;
  closed.keys_env = "TANDEM_API_KEYS";
  absl::StatusOr<ApiKeys> keys = ApiKeys::Load(closed, absl::StrCat("acme=", kAcmeKey));
  ASSERT_TRUE(keys.ok()) << keys.status();
  for (const char* path : {"/health", "/health/ready", "/health/live", "/metrics"}) {
    EXPECT_TRUE(keys->RequiresKey(path)) << path;
  }
}

TEST(ApiKeysTest, HttpDecisionIs401WithTheOpenAiBody) {
  ApiKeys keys = AcmeAndGlobex();
  HttpAuthDecision d = AuthorizeHttp(keys, "/v1/completions", "Bearer sk-nobody-0123456789abcdef");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.http_status, 401);
  nlohmann::json body = nlohmann::json::parse(d.body);
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["code"], "invalid_api_key");
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr("invalid API key"));
  EXPECT_THAT(d.body, Not(HasSubstr("sk-nobody")));

  d = AuthorizeHttp(keys, "/v1/completions", absl::StrCat("Bearer ", kGlobexKey));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.tenant, "globex");
  d = AuthorizeHttp(keys, "/health", "");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.tenant, "");
}

TEST(ApiKeysTest, KeyFileWithKeysAndDigests) {
  ApiKeys keys;
  ASSERT_TRUE(keys.AddKeyFile(absl::StrCat(R"(
tenants:
  - name: acme
    key: )",
                                           kAcmeKey, R"(
  - name: globex
    key_sha256: ")",
                                           kGlobexSha256, R"("
  - name: acme            # a second key for acme (rotation)
    key: sk-acme-rotated-0123456789
)"),
                              "keys.yaml")
                  .ok());
  EXPECT_THAT(keys.tenants(), ElementsAre("acme", "globex"));
  EXPECT_EQ(keys.Authenticate(absl::StrCat("Bearer ", kAcmeKey))->name, "acme");
  EXPECT_EQ(keys.Authenticate("Bearer sk-acme-rotated-0123456789")->name, "acme");
  EXPECT_EQ(keys.Authenticate(absl::StrCat("Bearer ", kGlobexKey))->name, "globex");
}

TEST(ApiKeysTest, BadKeyFileErrorsNameTheLineAndFieldNotTheKey) {
  struct Bad {
    std::string yaml;
    std::string want;
  };
  const std::vector<Bad> cases = {
      {"tenants: [", "keys.yaml: YAML syntax error at line"},
      {"tenant: []", "unknown key 'tenant'"},
      {"tenants: {acme: x}", "keys.yaml: tenants (line 1): want a list"},
      {"tenants:\n  - key: sk-missing-name-0123456789\n", "tenants[0] (line 2): name is missing"},
      {"tenants:\n  - name: a\n    key: sk-short\n",
       "tenants[0] (line 2): key: the key must be 16..256 bytes, got 8"},
      {"tenants:\n  - name: a\n  - name: b b\n    key: sk-0123456789abcdef0\n",
       "tenants[0] (line 2): give exactly one of key and key_sha256"},
      {"tenants:\n  - name: ok\n    key: sk-0123456789abcdef0\n  - name: b b\n    key: "
       "sk-0123456789abcdef1\n",
       "tenants[1] (line 4): name: tenant 'b b' may hold only"},
      {"tenants:\n  - name: a\n    key: \"sk-0123456789 abcdef\"\n",
       "tenants[0] (line 2): key: the key may hold only printable"},
      {"tenants:\n  - name: a\n    key_sha256: abc\n",
       "tenants[0] (line 2): key_sha256: want 64 hex digits"},
      {"tenants:\n  - name: a\n    key: sk-0123456789abcdef0\n    colour: red\n",
       "tenants[0].colour"},
      {"tenants:\n  - name: a\n    key: sk-0123456789abcdef0\n  - name: b\n    key: "
       "sk-0123456789abcdef0\n",
       "tenants[1] (line 4): this key is given twice (tenants a and b)"},
  };
  for (const Bad& c : cases) {
    ApiKeys keys;
    absl::Status s = keys.AddKeyFile(c.yaml, "keys.yaml");
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.want))) << c.yaml;
    EXPECT_THAT(s.message(), Not(HasSubstr("sk-0123"))) << c.yaml;
    EXPECT_THAT(s.message(), Not(HasSubstr("sk-short"))) << c.yaml;
  }
}

TEST(ApiKeysTest, KeyListFromTheEnvironmentVariable) {
  ApiKeys keys;
  ASSERT_TRUE(keys.AddKeyList(absl::StrCat(" acme=", kAcmeKey, " ,, globex=", kGlobexKey, ","),
                              "TANDEM_API_KEYS")
                  .ok());
  EXPECT_THAT(keys.tenants(), ElementsAre("acme", "globex"));
  for (const auto& [list, want] : std::vector<std::pair<std::string, std::string>>{
           {"acme", "TANDEM_API_KEYS: entry 0: want tenant=key"},
           {absl::StrCat("acme=", kAcmeKey, ",globex=sk-short"),
            "TANDEM_API_KEYS: entry 1 (tenant globex): key: the key must be 16..256 bytes"},
           {absl::StrCat("=", kAcmeKey), "TANDEM_API_KEYS: entry 0: tenant"},
           {absl::StrCat("a=", kAcmeKey, ",b=", kAcmeKey), "entry 1: this key is given twice"}}) {
    ApiKeys k;
    absl::Status s = k.AddKeyList(list, "TANDEM_API_KEYS");
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(want))) << list;
    EXPECT_THAT(s.message(), Not(HasSubstr("sk-"))) << list;
  }
}

TEST(ApiKeysTest, LoadReadsTheFileAndTheVariable) {
  const std::string path = absl::StrCat(tandem::testing::TempDir(), "/keys.yaml");
  std::ofstream(path) << "tenants:\n  - name: acme\n    key: " << kAcmeKey << "\n";
  AuthConfig config;
  config.keys_file = path;
  absl::StatusOr<ApiKeys> keys = ApiKeys::Load(config, absl::StrCat("globex=", kGlobexKey));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_THAT(keys->tenants(), ElementsAre("acme", "globex"));

  config.keys_file = absl::StrCat(path, ".missing");
  EXPECT_THAT(ApiKeys::Load(config, ""),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("auth.keys_file")));
  std::ofstream(path) << "tenants: []\n";
  config.keys_file = path;
  EXPECT_THAT(ApiKeys::Load(config, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lists no tenant")));
  // The committed development key file parses.
  config.keys_file = absl::StrCat(TANDEM_SOURCE_DIR, "/deploy/local/secure-keys.yaml");
  keys = ApiKeys::Load(config, "");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_THAT(keys->tenants(), ElementsAre("dev-alice", "dev-bob"));
}

TEST(ApiKeysTest, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:8080", "127.1.2.3:0", "localhost:50051", "[::1]:8080",
                        "unix:/tmp/router.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:8080", "[::]:50051", ":8080", "10.0.0.5:8080",
                        "router.example.com:443", "128.0.0.1:80"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

}  // namespace
}  // namespace tandem::router
