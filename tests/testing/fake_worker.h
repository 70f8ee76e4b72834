#pragma once
// FakeWorker: a small real gRPC server in the test process that plays a
// prefill, decode or colocated worker for the router tests: Control.Watch
// (snapshot, heartbeats), Decode.Reserve / Commit / Cancel / Generate and
// Prefill.Prefill, streaming a scripted list of token ids. Knobs make it fail
// the way real workers do: refuse a reservation, fail a prefill, die or hang
// mid-stream, stop heartbeating. Thread-safe.
//
// The integration tests (tests/integration/router_*) use the real workers.

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::router::testing {

class FakeWorker {
 public:
  struct Options {
    tandem::v1::WorkerRole role = tandem::v1::WORKER_ROLE_COLOCATED;
    std::string model = "llama";          // what stories260K workers announce
    int32_t context_length = 512;
    int32_t block_size = 16;
    int32_t free_blocks = 100;
    int32_t total_blocks = 100;
    absl::Duration heartbeat_interval = absl::Milliseconds(100);
    int port = 0;                          // 0 = pick
  };
  enum class Failure {
    kNone,
    kReserveUnavailable,   // Reserve / Generate fail with UNAVAILABLE at once
    kPrefillUnavailable,   // Prefill fails with UNAVAILABLE
    kDieMidStream,         // after `after_tokens` tokens the stream ends UNAVAILABLE
    kHangMidStream,        // after `after_tokens` tokens nothing more is sent
  };

  static std::unique_ptr<FakeWorker> Start(Options options);
  ~FakeWorker();  // Shutdown()

  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // Behaviour.
  void SetScript(std::vector<int32_t> tokens,
                 tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_STOP);
  void SetTokenDelay(absl::Duration d);
  void SetFailure(Failure f, int after_tokens = 0);
  void PauseHeartbeats(bool paused);
  // Stops serving: open streams end (the router sees them break).
  void Shutdown();

  // Observations.
  int requests() const;
  int cancelled() const;          // streams that ended because the router cancelled
  int commits() const;
  int active_streams() const;
  std::vector<absl::Time> deadlines() const;  // of Reserve / Generate calls
  tandem::v1::DecodeSubmit last_submit() const;
  // The request id of every Reserve / Generate call, in arrival order. A
  // call whose id is live already fails ALREADY_EXISTS, as on a real worker.
  std::vector<std::string> request_ids() const;

  // Internal (the gRPC services).
  class Impl;

 private:
  FakeWorker() = default;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
};

}  // namespace tandem::router::testing
