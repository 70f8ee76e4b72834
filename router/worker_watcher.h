#pragma once
// Worker discovery and liveness: the router's control thread. It resolves the
// configured workers (static addresses, and DNS names re-resolved
// periodically as a Kubernetes headless Service gives), keeps one
// Control.Watch stream per worker (reconnecting with exponential backoff),
// feeds the events into a WorkerRegistry, and publishes immutable
// RegistrySnapshots for request threads. A worker whose stream breaks or
// whose stream is silent past the heartbeat timeout leaves rotation and is
// reported to `on_departed` (which fails its in-flight requests).
//
// Owns: the control thread, the registry, every Watch stream. Thread safety:
// Start/Stop from one thread; snapshot() from any thread.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/work_queue.h"
#include "router/config.h"
#include "router/registry.h"

namespace tandem::v1 {
class WorkerEvent;
}

namespace tandem::router {

// Resolves "name:port" to "ip:port" strings (IPv6 in brackets).
using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>;
// getaddrinfo (AF_UNSPEC, SOCK_STREAM); results sorted and deduplicated.
absl::StatusOr<std::vector<std::string>> ResolveWithGetaddrinfo(const std::string& name_port);

class WorkerWatcher {
 public:
  struct Options {
    DiscoveryConfig discovery;
    // Of every channel to a worker (proto::MakeChannelCredentials of
    // RouterConfig::internal_tls); null: insecure.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    base::Clock* clock = &base::RealClock::Get();
    Resolver resolver = ResolveWithGetaddrinfo;
    // How often the loop checks liveness and due reconnects.
    absl::Duration tick = absl::Milliseconds(50);
    // Control thread; must not block. A worker left rotation; `why` says how
    // ("sent no heartbeat for 3s", "left rotation") without naming the
    // address, so callers may show it to clients.
    std::function<void(const std::string& address, const absl::Status& why)> on_departed;
    // Control thread; must not block. A new snapshot was published.
    std::function<void(const RegistrySnapshot&)> on_publish;
  };

  explicit WorkerWatcher(Options options);
  ~WorkerWatcher();  // Stop()s
  WorkerWatcher(const WorkerWatcher&) = delete;
  WorkerWatcher& operator=(const WorkerWatcher&) = delete;

  void Start();
  // Cancels every stream, waits for them to finish and joins the thread.
  // Idempotent.
  void Stop();

  // Any thread. The latest snapshot (never null).
  std::shared_ptr<const RegistrySnapshot> snapshot() const;
  // Any thread. When the control loop last went round (Start() counts as
  // one; it goes round every `tick`): long ago means the loop is wedged.
  absl::Time last_loop() const;

 private:
  class WatchStream;
  struct Target {
    std::shared_ptr<grpc::Channel> channel;
    WatchStream* stream = nullptr;      // active stream, owned here until its OnDone
    uint64_t generation = 0;            // of the active stream
    absl::Time next_attempt = absl::InfinitePast();
    absl::Duration backoff;
  };

  void Loop();
  void RefreshTargets(absl::Time now);
  void StartStream(const std::string& address, Target& t);
  // Control thread, via posted closures from the stream's reactions.
  void HandleEvent(const std::string& address, uint64_t generation,
                   const tandem::v1::WorkerEvent& event);
  void HandleStreamDone(WatchStream* stream, const std::string& address, uint64_t generation,
                        const absl::Status& status);
  void Publish();

  Options options_;
  base::WorkQueue queue_;
  std::thread thread_;
  bool started_ = false;

  // Control thread only.
  WorkerRegistry registry_;
  std::map<std::string, Target> targets_;
  std::vector<std::string> dns_resolved_;
  absl::Time next_dns_ = absl::InfinitePast();
  uint64_t next_generation_ = 1;
  int active_streams_ = 0;
  bool dirty_ = true;
  bool targets_set_ = false;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const RegistrySnapshot> snapshot_ ABSL_GUARDED_BY(mu_);
  absl::Time last_loop_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace tandem::router
