#pragma once
// CommitClient: the gRPC Committer: sends Decode.Commit to the decode worker
// named in the reservation over a cached channel per address, with the
// reservation's deadline. Thread-safe; `done` runs on a gRPC callback thread.
//
// The address comes from the Prefill request. With internal mutual TLS that
// request can only come from an authenticated cluster member, and the channel
// verifies the decode worker's certificate against the cluster CA, so a
// forged address cannot make this worker talk to (or push to) a stranger.
// An address that is not plain host:port is refused without dialing. At
// most kMaxChannels channels are cached: past that, an arbitrary idle one is
// dropped (a caller naming many addresses cannot grow the cache without
// bound; a call in flight keeps its own stub alive).

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "prefill_worker/prefill_engine.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::prefill_worker {

class CommitClient final : public Committer {
 public:
  // `credentials`: proto::MakeChannelCredentials of the worker's TLS files.
  explicit CommitClient(std::shared_ptr<grpc::ChannelCredentials> credentials)
      : credentials_(std::move(credentials)) {}
  ~CommitClient() override;  // Shutdown()

  // After Shutdown, commits fail with UNAVAILABLE at once.
  void Commit(CommitArgs args, absl::AnyInvocable<void(absl::Status) &&> done) override;

  static constexpr size_t kMaxChannels = 64;

  // Channels cached now (tests).
  size_t cached_channels() const;

  // Cancels the calls in flight and waits (up to 5 s) until their `done`
  // callbacks have returned. Idempotent.
  void Shutdown();

 private:
  struct Call;
  std::shared_ptr<tandem::v1::Decode::Stub> StubFor(const std::string& address);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<Call*> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<tandem::v1::Decode::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::prefill_worker
