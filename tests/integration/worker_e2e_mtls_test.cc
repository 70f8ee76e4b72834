// Internal mutual TLS end to end (issue 8): a prefill and a decode worker run
// with certificates that scripts/make_dev_ca.sh made into a temp dir, and
// speak to each other (Decode.Commit) and to the test (acting as the router)
// over mTLS. Every internal service and method refuses an anonymous caller
// (plaintext, TLS without a client certificate, a certificate from another
// CA) with UNAVAILABLE (the handshake fails before any method runs), and the
// workers stay healthy and serve a genuine request afterwards. Health stays
// reachable for probes on the plaintext metrics port.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/integration/worker_e2e_fixture.h"
#include "tests/testing/test_paths.h"
#include "tests/testing/tls_test_util.h"
#include "tests/testing/watch_load.h"

namespace tandem::integration {
namespace {

using ::testing::HasSubstr;

// Every method of every internal service, with the worker that serves it.
struct Method {
  std::string path;
  bool on_decode;   // else on the prefill worker
};
std::vector<Method> InternalMethods() {
  std::vector<Method> m;
  for (const char* d : {"/tandem.v1.Decode/Reserve", "/tandem.v1.Decode/Commit",
                        "/tandem.v1.Decode/Cancel", "/tandem.v1.Decode/Generate"}) {
    m.push_back({d, true});
  }
  m.push_back({"/tandem.v1.Prefill/Prefill", false});
  for (bool on_decode : {true, false}) {
    m.push_back({"/tandem.v1.Control/Watch", on_decode});
    m.push_back({"/grpc.health.v1.Health/Check", on_decode});
  }
  return m;
}

class WorkerMtlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Reference::Get();
    absl::StatusOr<proto::TlsFiles> cluster = testing::MakeDevCa(testing::TempDir() + "/cluster");
    absl::StatusOr<proto::TlsFiles> stranger =
        testing::MakeDevCa(testing::TempDir() + "/stranger");
    if (!cluster.ok() || !stranger.ok()) {
      setup_error_ = absl::StrCat(cluster.status().ToString(), " ", stranger.status().ToString());
      return;
    }
    cluster_ = *cluster;
    stranger_ = *stranger;
    for (const char* role : {"decode", "prefill"}) {
      std::vector<std::string> f = UcxFlags("sm");
      f.push_back(absl::StrCat("--role=", role));
      for (const std::string& t : testing::TlsFlags(cluster_)) f.push_back(t);
      auto p = WorkerProcess::Start(Bin(absl::StrCat("tandem-", role)), Flags(f));
      if (!p.ok()) {
        setup_error_ += p.status().ToString();
        return;
      }
      (std::string(role) == "decode" ? decode_ : prefill_) = *std::move(p);
    }
  }

  static void TearDownTestSuite() {
    for (auto* w : {&prefill_, &decode_}) {
      if (*w != nullptr) {
        EXPECT_TRUE(ExitsCleanlyOnSigterm(**w));
      }
      w->reset();
    }
  }

  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  static std::shared_ptr<grpc::Channel> Channel(
      const WorkerProcess& w, const std::shared_ptr<grpc::ChannelCredentials>& creds) {
    // A channel of its own: no connection shared with another credential.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(w.address(), creds, args);
  }

  // Every internal method through `creds` is refused at the handshake.
  static void ExpectAllRefused(const std::shared_ptr<grpc::ChannelCredentials>& creds) {
    for (const Method& m : InternalMethods()) {
      const WorkerProcess& w = m.on_decode ? *decode_ : *prefill_;
      const grpc::Status s = CallRaw(Channel(w, creds), m.path);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
          << m.path << " on " << w.name() << ": " << s.error_code() << " " << s.error_message();
    }
  }

  // Both workers alive, SERVING over mTLS, /metrics on the plaintext port,
  // and a genuine disaggregated request matches the reference.
  static void ExpectServing(const std::string& id) {
    const auto creds = testing::ClientCredentials(cluster_);
    for (WorkerProcess* w : {decode_.get(), prefill_.get()}) {
      ASSERT_TRUE(w->running()) << w->name() << " died\n" << w->Tail();
      EXPECT_EQ(HealthStatus(Channel(*w, creds)), 1) << w->name();
      EXPECT_FALSE(Metrics(*w).empty()) << w->name() << ": no /metrics on the plaintext port";
    }
    auto decode = v1::Decode::NewStub(Channel(*decode_, creds));
    auto prefill = v1::Prefill::NewStub(Channel(*prefill_, creds));
    const Request req = Reference::Get().Make(LongRequest(id, 24));
    const Outcome out = RunDisaggregated(*decode, *prefill, req.submit);
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << decode_->Tail();
    EXPECT_TRUE(out.prefilled);
    EXPECT_EQ(out.tokens, req.want_tokens);
    EXPECT_TRUE(testing::WatchLoadUntil(decode_->address(), decode_->name(), testing::Idle,
                                        "back to zero used blocks", absl::Seconds(5), creds));
  }

  static inline std::string setup_error_;
  static inline proto::TlsFiles cluster_;
  static inline proto::TlsFiles stranger_;
  static inline std::unique_ptr<WorkerProcess> decode_;
  static inline std::unique_ptr<WorkerProcess> prefill_;
};

TEST_F(WorkerMtlsTest, ClusterMembersServeOverMutualTls) { ExpectServing("mtls-member"); }

TEST_F(WorkerMtlsTest, PlaintextCallersAreRefused) {
  ExpectAllRefused(grpc::InsecureChannelCredentials());
  ExpectServing("mtls-after-plaintext");
}

TEST_F(WorkerMtlsTest, TlsWithoutClientCertificateIsRefused) {
  ExpectAllRefused(testing::NoClientCertCredentials(cluster_.ca_file));
  ExpectServing("mtls-after-no-cert");
}

TEST_F(WorkerMtlsTest, ClientCertificateFromAnotherCaIsRefused) {
  // Trusts the cluster CA (so the worker's certificate checks out on this
  // side) but presents a certificate the cluster CA never issued.
  ExpectAllRefused(testing::ClientCredentials(
      proto::TlsFiles{cluster_.ca_file, stranger_.cert_file, stranger_.key_file}));
  ExpectServing("mtls-after-stranger");
}

TEST_F(WorkerMtlsTest, WorkerWithAnotherCasCertificateIsNotTrusted) {
  // The other direction, as the prefill worker's Commit channel and the
  // router see it: a server whose certificate the cluster CA did not issue.
  // The stranger dials our worker trusting only its own CA: refused too.
  ExpectAllRefused(testing::ClientCredentials(stranger_));
  ExpectServing("mtls-after-untrusted-server");
}

// Issue 8: nothing internal listens beyond loopback in plaintext by accident.
TEST(WorkerListenTest, NonLoopbackListenWithoutTlsRefusesToStart) {
  auto p = WorkerProcess::Start(Bin("tandem-decode"),
                                Flags({"--role=decode", "--listen=0.0.0.0:0"}), absl::Seconds(30));
  ASSERT_FALSE(p.ok()) << "tandem-decode started on 0.0.0.0 without TLS";
  EXPECT_THAT(p.status().message(), HasSubstr("allow_insecure_internal"));
}

TEST(WorkerListenTest, UnreadableCertificateRefusesToStartNamingTheFile) {
  absl::StatusOr<proto::TlsFiles> tls = testing::MakeDevCa(testing::TempDir() + "/bad-cert");
  ASSERT_TRUE(tls.ok()) << tls.status();
  tls->cert_file = testing::TempDir() + "/no-such-cluster.pem";
  std::vector<std::string> f = {"--role=decode"};
  for (const std::string& t : testing::TlsFlags(*tls)) f.push_back(t);
  auto p = WorkerProcess::Start(Bin("tandem-decode"), Flags(f), absl::Seconds(30));
  ASSERT_FALSE(p.ok()) << "tandem-decode started without its certificate";
  EXPECT_THAT(p.status().message(), HasSubstr(tls->cert_file));
}

}  // namespace
}  // namespace tandem::integration
