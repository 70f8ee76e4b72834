#pragma once
// The harness of worker_e2e_test: the real tandem-prefill and tandem-decode
// binaries as child processes on 127.0.0.1 (ports picked by the workers, read
// from their READY line), with the test acting as the router (Decode.Reserve ->
// Prefill.Prefill -> read the token stream) over real gRPC and real UCX, and
// the reference: common/engine/generation.h Generate() run in the test process
// on the same model.
//
// The tests: worker_e2e_serving_test.cc (the suite's cluster serves, cancels
// and refuses), worker_e2e_failure_test.cc (workers started per test and
// killed, squeezed or drained) and worker_e2e_hostile_test.cc (forged
// reservations sent to a prefill worker).
//
// Known gaps: no RDMA NIC here, so native UCX puts are not exercised (UCX
// 1.13 uses active messages over sm and tcp); a prefill worker killed in the
// middle of its writes (rather than before them) is not staged.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine/engine.h"
#include "common/engine/model.h"
#include "gtest/gtest.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/testing/worker_process.h"

namespace tandem::integration {

namespace v1 = ::tandem::v1;
using ::tandem::testing::WorkerProcess;

inline constexpr int kClients = 4;
inline constexpr int kKvBlocks = 1024;
inline constexpr int kBlockSize = 16;

std::string ModelPath();
std::string Bin(const std::string& name);
// The flags every worker here runs with, then `extra`.
std::vector<std::string> Flags(std::vector<std::string> extra);
std::vector<std::string> UcxFlags(const std::string& tls);

// --- the reference -----------------------------------------------------------

struct Request {
  v1::DecodeSubmit submit;
  std::vector<int32_t> want_tokens;
  std::string want_text;
  // The first sampled token, also when it is a stop token (which
  // want_tokens leaves out): what the prefill worker returns.
  int32_t want_first_token = -1;
};

class Reference {
 public:
  static Reference& Get() {
    static Reference* r = new Reference();
    return *r;
  }
  const engine::Model& model() const { return *model_; }
  const engine::Tokenizer& tokenizer() const { return *model_->tokenizer(); }

  // Runs Generate() for `submit` and stores the expected output.
  Request Make(v1::DecodeSubmit submit);

 private:
  Reference();

  absl::Mutex mu_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Engine> engine_ ABSL_GUARDED_BY(mu_);
  engine::SequenceId next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

// 20 requests: varied lengths (several blocks, several chunks), shared
// prefixes, greedy and seeded temperature 0.8, some with a stop string.
std::vector<Request> MakeRequests(const std::string& id_prefix);

// --- the router's side -------------------------------------------------------

struct Outcome {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  bool got_reservation = false;
  v1::KvReservation reservation;
  bool prefilled = false;
  v1::PrefillResponse prefill;
};

void Absorb(const v1::GenerateResponse& r, Outcome* out);

std::chrono::system_clock::time_point In(absl::Duration d);

// `alter`, when set, edits the Prefill request (the reservation, as a hostile
// client would) before it is sent.
Outcome RunDisaggregated(v1::Decode::Stub& decode, v1::Prefill::Stub& prefill,
                         const v1::DecodeSubmit& submit,
                         const std::function<void(v1::PrefillRequest&)>& alter = nullptr);

Outcome RunColocated(v1::Decode::Stub& decode, const v1::DecodeSubmit& submit);

// Runs `fn(i)` for i in [0, n) from kClients threads.
void FromClients(int n, const std::function<void(int)>& fn);

std::shared_ptr<grpc::Channel> Dial(const WorkerProcess& w);

// A disaggregated request under way: opens Decode.Reserve (deadline 60 s,
// on `ctx`), runs the prefill with its reservation and reads until at least
// `min_tokens` tokens streamed. Null (with a test failure) otherwise.
std::unique_ptr<grpc::ClientReader<v1::DecodeEvent>> StartStreaming(v1::Decode::Stub& decode,
                                                                    v1::Prefill::Stub& prefill,
                                                                    const v1::DecodeSubmit& submit,
                                                                    int min_tokens,
                                                                    grpc::ClientContext* ctx);

// Watches `w`'s load until `done(used blocks, load)` holds.
::testing::AssertionResult WatchLoadUntil(
    const WorkerProcess& w, const std::function<bool(int, const v1::WorkerLoad&)>& done,
    const std::string& what, absl::Duration timeout);

// Watches `w` until its pool has no used blocks (total - free == 0) and no requests.
::testing::AssertionResult UsedBlocksReachZero(const WorkerProcess& w,
                                               absl::Duration timeout = absl::Seconds(5));

// /metrics of `w` as name{labels} -> value.
std::map<std::string, double> Metrics(const WorkerProcess& w);

// grpc.health.v1.Health/Check for the server as a whole, through the generic
// stub (the health protos are not installed): the response's field 1 is the
// status enum (1 SERVING, 2 NOT_SERVING); -1 on a failed call. The
// channel form for a worker that speaks mutual TLS.
int HealthStatus(const WorkerProcess& w);
int HealthStatus(const std::shared_ptr<grpc::Channel>& channel);

// `method` ("/pkg.Service/Method") called as unary with an empty request
// message, deadline 5 s; the reply's bytes in `response_bytes` when OK.
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     std::string* response_bytes = nullptr);

// KV bytes of a prompt by the KvLayout formula.
uint64_t KvBytes(int prompt_tokens);

// SIGTERM `w` and expect a drained exit 0.
::testing::AssertionResult ExitsCleanlyOnSigterm(WorkerProcess& w);

// A request that runs to `max_tokens` ("Once upon a time", ignore_eos).
v1::DecodeSubmit LongRequest(const std::string& id, int max_tokens = 1500);

// --- the cluster ---------------------------------------------------------------

struct Pair {
  std::unique_ptr<WorkerProcess> prefill;
  std::unique_ptr<WorkerProcess> decode;
};

class WorkerE2eTest : public ::testing::Test {
 protected:
  // Starts a prefill/decode pair per UCX transport (sm, tcp) and a colocated
  // decode worker, once for the suite.
  static void SetUpTestSuite();
  // SIGTERM, not SIGKILL: every worker that served this suite must drain and
  // exit 0 (under ASan this is also where leaks and shutdown races show).
  static void TearDownTestSuite();

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << "cluster did not start:\n" << setup_error_;
  }

  // Runs MakeRequests() through the `tls` pair from kClients clients and
  // checks tokens, text, KV bytes and that every pool is back to zero.
  void CheckDisaggregated(const std::string& tls);

  static inline std::string setup_error_;
  static inline std::map<std::string, Pair> pairs_;
  static inline std::unique_ptr<WorkerProcess> colocated_;
};

}  // namespace tandem::integration
