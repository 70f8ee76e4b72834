#pragma once
// The router's view of its workers, fed by one Control.Watch stream per
// worker (see worker_watcher.h), and the immutable snapshots request
// threads route from.
//
// WorkerRegistry is owned and used by the control thread only (not
// thread-safe). RegistrySnapshot is immutable and shared by any thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/clock.h"
#include "router/prefix_index.h"

namespace grpc {
class Channel;
}

namespace tandem::router {

enum class WorkerRole { kUnknown, kPrefill, kDecode, kColocated };
absl::string_view WorkerRoleName(WorkerRole role);

struct WorkerLoadInfo {
  int32_t running_requests = 0;
  int32_t waiting_requests = 0;
  int64_t queued_prefill_tokens = 0;
  int32_t free_kv_blocks = 0;
  int32_t total_kv_blocks = 0;
  int32_t cached_kv_blocks = 0;
  int32_t max_running_requests = 0;  // running slots; 0 = not reported
};

// What a worker says about itself at the start of its Watch stream.
struct WorkerDescription {
  std::string worker_id;
  WorkerRole role = WorkerRole::kUnknown;
  std::string model;            // ModelInfo.id; matched against the router's model names
  int32_t context_length = 0;
  int32_t kv_block_size = 0;    // tokens per KV block (0 = unknown)
  WorkerLoadInfo load;
  uint64_t kv_model_id = 0;     // KvLayout.model_id: seeds the worker's block names
};

struct WorkerInfo {
  std::string address;          // host:port the router dials; the worker's identity here
  WorkerDescription desc;
  bool connected = false;       // a snapshot arrived on the current stream
  absl::Time last_heard = absl::InfinitePast();   // any event on the current stream
  absl::Status last_error;      // why the last stream ended
  // The channel to the worker; shared by the watcher and in-flight requests.
  std::shared_ptr<grpc::Channel> channel;
};

struct RegistrySnapshot {
  std::vector<WorkerInfo> workers;   // sorted by address
  absl::Duration heartbeat_timeout = absl::Seconds(3);

  // In rotation at `now`: connected and heard from within heartbeat_timeout.
  bool IsLive(const WorkerInfo& w, absl::Time now) const;
  const WorkerInfo* Find(absl::string_view address) const;
  int CountLive(WorkerRole role, absl::Time now) const;

  // The workers' prefix caches (null when unknown, e.g. a hand-built
  // snapshot). Shared by the registry, which keeps writing it, and every
  // snapshot: unlike the rest of a snapshot it is live, not frozen.
  std::shared_ptr<const PrefixIndex> prefixes;
};

class WorkerRegistry {
 public:
  WorkerRegistry(base::Clock& clock, absl::Duration heartbeat_timeout)
      : clock_(clock), heartbeat_timeout_(heartbeat_timeout) {}

  // Replaces the set of addresses to watch. New ones start disconnected;
  // vanished ones are dropped. Returns the addresses that were added.
  std::vector<std::string> SetTargets(const std::vector<std::string>& addresses);
  bool Has(absl::string_view address) const { return workers_.count(std::string(address)) > 0; }
  void SetChannel(absl::string_view address, std::shared_ptr<grpc::Channel> channel);

  // Stream events, all stamped with clock.Now(). Events for unknown
  // addresses are ignored.
  // `cached_blocks`: the snapshot's block names (the worker's whole set).
  void OnSnapshot(absl::string_view address, const WorkerDescription& desc,
                  absl::Span<const uint64_t> cached_blocks = {});
  void OnLoad(absl::string_view address, const WorkerLoadInfo& load);
  void OnHeartbeat(absl::string_view address);
  // A KvBlockEvent: a change of the worker's block names, or with `resync`
  // the whole set (`added`). Ignored before the stream's snapshot.
  void OnBlocks(absl::string_view address, bool resync, absl::Span<const uint64_t> added,
                absl::Span<const uint64_t> removed);
  // The stream ended (or was cancelled): the worker leaves rotation until a
  // new stream delivers a snapshot; its prefix-index entry is dropped.
  void OnStreamEnded(absl::string_view address, const absl::Status& status);

  // Workers that were live and are not any more at clock.Now() (silent past
  // the heartbeat timeout, or their stream ended) since the previous call;
  // each such transition is reported once, and their prefix-index entries
  // are dropped.
  std::vector<std::string> TakeDeparted();

  std::shared_ptr<const RegistrySnapshot> Snapshot() const;
  absl::Duration heartbeat_timeout() const { return heartbeat_timeout_; }
  const PrefixIndex& prefixes() const { return *prefixes_; }

 private:
  base::Clock& clock_;
  const absl::Duration heartbeat_timeout_;
  std::map<std::string, WorkerInfo> workers_;
  std::map<std::string, bool> was_live_;   // liveness reported at the last TakeDeparted
  // Shared with every snapshot (RegistrySnapshot::prefixes), which read it.
  std::shared_ptr<PrefixIndex> prefixes_ = std::make_shared<PrefixIndex>();
};

}  // namespace tandem::router
