// `tandem up`'s cluster YAML: internal_tls (dev by default, a map of files,
// or off on loopback only) and where the dev CA script is looked for.

#include "router/cli/launcher.h"

#include <stdlib.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::router::cli {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kWorkers[] = "model: m.gguf\ncolocated: {replicas: 1}\n";

TEST(LauncherTlsTest, DevCaByDefault) {
  absl::StatusOr<ClusterSpec> spec = ParseClusterYaml(kWorkers, "/etc/tandem");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->internal_tls, InternalTls::kDev);
  EXPECT_FALSE(spec->tls_files.enabled());
  EXPECT_OK(spec->Validate());
}

TEST(LauncherTlsTest, FilesResolveAgainstTheConfigDir) {
  absl::StatusOr<ClusterSpec> spec = ParseClusterYaml(
      absl::StrCat(kWorkers, "internal_tls: {ca: certs/ca.pem, cert: /c.pem, key: certs/c.key}\n"),
      "/etc/tandem");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->internal_tls, InternalTls::kFiles);
  EXPECT_EQ(spec->tls_files.ca_file, "/etc/tandem/certs/ca.pem");
  EXPECT_EQ(spec->tls_files.cert_file, "/c.pem");
  EXPECT_EQ(spec->tls_files.key_file, "/etc/tandem/certs/c.key");
  EXPECT_OK(spec->Validate());
  spec->tls_files.key_file.clear();
  EXPECT_THAT(spec->Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("internal_tls.key")));
}

TEST(LauncherTlsTest, OffOnlyOnLoopback) {
  absl::StatusOr<ClusterSpec> spec =
      ParseClusterYaml(absl::StrCat(kWorkers, "internal_tls: off\n"), "");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->internal_tls, InternalTls::kOff);
  EXPECT_OK(spec->Validate());
  spec->host = "10.0.0.5";
  EXPECT_THAT(spec->Validate(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("10.0.0.5")));
}

TEST(LauncherTlsTest, BadValuesNameTheKey) {
  EXPECT_THAT(ParseClusterYaml(absl::StrCat(kWorkers, "internal_tls: maybe\n"), ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("internal_tls")));
  EXPECT_THAT(ParseClusterYaml(absl::StrCat(kWorkers, "internal_tls: {ca: a, pem: b}\n"), ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pem")));
  EXPECT_THAT(ParseClusterYaml(absl::StrCat(kWorkers, "router: {internal_tls: {ca: a}}\n"), ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("router.internal_tls")));
}

TEST(LauncherTlsTest, MissingDevCaScriptIsAClearError) {
  absl::StatusOr<ClusterSpec> spec = ParseClusterYaml(kWorkers, "");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->model = testing::RequireSharedFile("models/stories260K/stories260K.gguf");
  spec->log_dir = testing::TempDir() + "/up";
  const std::string scripts = testing::TempDir() + "/no-scripts-here";
  ASSERT_EQ(setenv("TANDEM_SCRIPTS", scripts.c_str(), 1), 0);
  Cluster cluster(*std::move(spec));
  std::ostringstream log;
  EXPECT_THAT(cluster.Start(log),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(scripts + "/make_dev_ca.sh")));
  unsetenv("TANDEM_SCRIPTS");
}

// pools: several models, each with its own workers (deploy/local/two-pool.yaml).
TEST(LauncherPoolsTest, ParsesPoolsAndNamesTheKeyOnErrors) {
  absl::StatusOr<ClusterSpec> spec = ParseClusterYaml(R"(
pools:
  - name: small
    model: m1.gguf
    prefill: {replicas: 1}
    decode: {replicas: 1, config: {threads: 1}}
  - name: large
    model: qwen2.5-coder-1.5b-instruct
    colocated: {replicas: 2}
)",
                                                      "/etc/tandem");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_OK(spec->Validate());
  const std::vector<ModelPoolSpec> pools = spec->EffectivePools();
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].model, "/etc/tandem/m1.gguf");
  EXPECT_EQ(pools[0].prefill.replicas, 1);
  EXPECT_EQ(pools[0].decode.config["threads"].as<int>(), 1);
  EXPECT_EQ(pools[1].model, "qwen2.5-coder-1.5b-instruct");  // a name stays a name
  EXPECT_EQ(pools[1].colocated.replicas, 2);
  // Without pools: one unnamed pool of the top-level model and roles.
  absl::StatusOr<ClusterSpec> single = ParseClusterYaml(kWorkers, "/etc/tandem");
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ(single->EffectivePools().size(), 1u);
  EXPECT_EQ(single->EffectivePools()[0].name, "");
  EXPECT_EQ(single->EffectivePools()[0].colocated.replicas, 1);

  EXPECT_THAT(ParseClusterYaml("model: m.gguf\npools: [{name: a, model: b}]\n", ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pools: give either pools or the top-level model")));
  EXPECT_THAT(ParseClusterYaml("pools: [{name: a, model: b, replicas: 1}]\n", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pools[0]")));
  spec->pools[1].name = "small";
  EXPECT_THAT(spec->Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("pools[1].name 'small' is used twice")));
  spec->pools[1].name = "large";
  spec->pools[0].decode.replicas = 0;
  EXPECT_THAT(spec->Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pools[0].prefill.replicas and pools[0].decode.replicas")));
  spec->pools[0].decode.replicas = 1;
  spec->pools[1].model = "";
  EXPECT_THAT(spec->Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pools[1].model")));
}

}  // namespace
}  // namespace tandem::router::cli
