#include "tests/testing/tls_test_util.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/test_paths.h"

namespace tandem::testing {

absl::StatusOr<proto::TlsFiles> MakeDevCa(const std::string& dir) {
  ChildOptions options;
  options.argv = {"/bin/bash", SourceDir() + "/scripts/make_dev_ca.sh", dir};
  options.log_dir = TempDir();
  ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> p, ChildProcess::Start(std::move(options)));
  ASSIGN_OR_RETURN(const int code, p->Wait(absl::Seconds(60)));
  if (code != 0) {
    return absl::InternalError(
        absl::StrCat("make_dev_ca.sh ", dir, " exited ", code, ":\n", p->Tail()));
  }
  return proto::TlsFiles{dir + "/ca.pem", dir + "/cluster.pem", dir + "/cluster.key"};
}

std::vector<std::string> TlsFlags(const proto::TlsFiles& files) {
  return {"--tls_ca=" + files.ca_file, "--tls_cert=" + files.cert_file,
          "--tls_key=" + files.key_file};
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const proto::TlsFiles& files) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> c =
      proto::MakeChannelCredentials(files);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : grpc::InsecureChannelCredentials();
}

std::shared_ptr<grpc::ChannelCredentials> NoClientCertCredentials(const std::string& ca_file) {
  std::ifstream in(ca_file);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem.str();
  return grpc::SslCredentials(options);
}

}  // namespace tandem::testing
