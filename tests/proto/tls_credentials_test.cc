// proto/tls_credentials: the PEM files are checked before gRPC sees them
// (errors name the file), the credentials build from files made by
// scripts/make_dev_ca.sh, and the address rules of internal listeners.

#include "proto/tls_credentials.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"
#include "tests/testing/tls_test_util.h"

namespace tandem::proto {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class TlsCredentialsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TlsFiles> a = testing::MakeDevCa(testing::TempDir() + "/ca-a");
    ASSERT_TRUE(a.ok()) << a.status();
    cluster_ = *a;
    absl::StatusOr<TlsFiles> b = testing::MakeDevCa(testing::TempDir() + "/ca-b");
    ASSERT_TRUE(b.ok()) << b.status();
    other_ = *b;
  }

  static std::string Write(const std::string& name, const std::string& text) {
    const std::string path = testing::TempDir() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  static inline TlsFiles cluster_;
  static inline TlsFiles other_;
};

TEST_F(TlsCredentialsTest, FilesFromTheScriptLoad) {
  absl::StatusOr<TlsMaterial> m = LoadTlsMaterial(cluster_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->ca_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(m->key_pem, HasSubstr("PRIVATE KEY"));
  EXPECT_TRUE(MakeServerCredentials(cluster_).ok());
  EXPECT_TRUE(MakeChannelCredentials(cluster_).ok());
}

TEST_F(TlsCredentialsTest, ScriptKeepsExistingFilesAndKeysArePrivate) {
  const std::string before = LoadTlsMaterial(cluster_)->cert_pem;
  absl::StatusOr<TlsFiles> again =
      testing::MakeDevCa(std::filesystem::path(cluster_.ca_file).parent_path().string());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(LoadTlsMaterial(*again)->cert_pem, before);
  for (const std::string& key : {cluster_.key_file,
                                 std::filesystem::path(cluster_.ca_file).parent_path().string() +
                                     "/ca.key"}) {
    const auto perms = std::filesystem::status(key).permissions();
    EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
              std::filesystem::perms::none)
        << key;
  }
}

TEST_F(TlsCredentialsTest, NotEnabledIsInsecure) {
  EXPECT_FALSE(TlsFiles{}.enabled());
  EXPECT_TRUE(MakeServerCredentials(TlsFiles{}).ok());
  EXPECT_TRUE(MakeChannelCredentials(TlsFiles{}).ok());
}

TEST_F(TlsCredentialsTest, MissingFileIsNotFoundNamingIt) {
  TlsFiles f = cluster_;
  f.cert_file = testing::TempDir() + "/no-such-cert.pem";
  EXPECT_THAT(MakeServerCredentials(f).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(f.cert_file)));
  f = cluster_;
  f.ca_file = testing::TempDir() + "/no-such-ca.pem";
  EXPECT_THAT(MakeChannelCredentials(f).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(f.ca_file)));
}

TEST_F(TlsCredentialsTest, NonPemIsInvalidArgumentNamingIt) {
  const std::string junk = Write("junk.pem", "this is not a certificate\n");
  for (int which = 0; which < 3; ++which) {
    TlsFiles f = cluster_;
    std::string* field = which == 0 ? &f.ca_file : which == 1 ? &f.cert_file : &f.key_file;
    *field = junk;
    EXPECT_THAT(MakeServerCredentials(f).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr(junk), HasSubstr("PEM"))))
        << which;
  }
}

TEST_F(TlsCredentialsTest, CorruptPemBlockIsInvalidArgument) {
  const std::string corrupt = Write(
      "corrupt.pem", "-----BEGIN CERTIFICATE-----\nAAAA!!!!\n-----END CERTIFICATE-----\n");
  TlsFiles f = cluster_;
  f.ca_file = corrupt;
  EXPECT_THAT(LoadTlsMaterial(f).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(corrupt)));
}

TEST_F(TlsCredentialsTest, CertificateAsKeyIsInvalidArgument) {
  TlsFiles f = cluster_;
  f.key_file = cluster_.cert_file;
  EXPECT_THAT(LoadTlsMaterial(f).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(f.key_file), HasSubstr("private key"))));
}

TEST_F(TlsCredentialsTest, KeyOfAnotherCertificateIsInvalidArgument) {
  TlsFiles f = cluster_;
  f.key_file = other_.key_file;
  EXPECT_THAT(LoadTlsMaterial(f).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not match")));
}

TEST_F(TlsCredentialsTest, SomeButNotAllFilesIsInvalidArgumentNamingTheKey) {
  TlsFiles f = cluster_;
  f.key_file.clear();
  EXPECT_THAT(f.Validate("tls_ca", "tls_cert", "tls_key"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls_key")));
  EXPECT_FALSE(MakeChannelCredentials(f).ok());
}

TEST(TlsAddressTest, Loopback) {
  for (const char* a : {"127.0.0.1:50051", "127.1.2.3:0", "[::1]:7001", "localhost:80",
                        "LOCALHOST:1"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:7001",
                        "decode.svc:7001", "128.0.0.1:1", "[::ffff:10.0.0.1]:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(TlsAddressTest, HostPort) {
  for (const char* a : {"127.0.0.1:50051", "[::1]:7001", "decode-0.decode.svc:7001",
                        "localhost:1", "my_host:65535"}) {
    EXPECT_TRUE(CheckHostPort(a).ok()) << a;
  }
  for (const char* a : {"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "host:port",
                        "unix:/tmp/sock", "unix:///tmp/sock:1", "dns:///decode:7001",
                        "ipv4:127.0.0.1:7001", "a b:1", "[nope]:1", ":7001"}) {
    EXPECT_THAT(CheckHostPort(a), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(a)))
        << a;
  }
}

TEST(TlsAddressTest, InternalAddressNeedsTlsUnlessLoopbackOrAllowed) {
  EXPECT_TRUE(CheckInternalAddress("listen", "127.0.0.1:0", false, false).ok());
  EXPECT_TRUE(CheckInternalAddress("listen", "0.0.0.0:0", true, false).ok());
  EXPECT_TRUE(CheckInternalAddress("listen", "0.0.0.0:0", false, true).ok());
  EXPECT_THAT(CheckInternalAddress("listen", "0.0.0.0:50051", false, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("0.0.0.0:50051"), HasSubstr("allow_insecure_internal"))));
}

}  // namespace
}  // namespace tandem::proto
