#pragma once
// WorkerControlService: tandem.v1.Control/Watch for a prefill or decode
// worker. Each Watch stream starts with a WorkerSnapshot (worker id, role,
// model, KV layout, current load), then carries a WorkerLoad whenever the
// load changes (PublishLoad) and a heartbeat every `heartbeat_interval`.
// Load updates a slow watcher has not received yet are coalesced (only the
// newest is sent). Workers with a prefix cache also publish block events
// (PublishBlocks): the service keeps the whole set of block names, puts it in
// each new stream's snapshot and sends every change after it, so a router
// that joins late starts from the full set; block events a slow watcher has
// not received yet are merged into one. While the worker is not live (SetLiveness: an engine loop
// is wedged) every stream is ended and new ones are refused, both with
// UNAVAILABLE and the reason, so routers take the worker out of rotation at
// once rather than after a heartbeat timeout (heartbeats come from a thread
// of their own and would go on).
//
// Thread-safe. Owns one heartbeat thread (joined by Shutdown()). The service
// must outlive the grpc::Server it is registered with (shut the server down
// first), since stream reactors call back into it until they are done.

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/engine/kv_cache.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::serving {

class WorkerControlService final : public tandem::v1::Control::CallbackService {
 public:
  // `snapshot` holds everything but the load (taken from PublishLoad).
  WorkerControlService(tandem::v1::WorkerSnapshot snapshot, absl::Duration heartbeat_interval);
  ~WorkerControlService() override;

  // Any thread. Sets the snapshot's worker id (known once the port is bound,
  // which is after the service is registered).
  void set_worker_id(const std::string& id);
  // Any thread. Makes `load` current and sends it to every watcher when it
  // differs from the previous one.
  void PublishLoad(const tandem::v1::WorkerLoad& load);
  tandem::v1::WorkerLoad load() const;
  // Any thread. Applies a change of the prefix cache's block names (a resync
  // replaces the set) and sends it to every watcher as a KvBlockEvent.
  void PublishBlocks(const engine::KvBlockEvents& events);
  // The block names new streams' snapshots carry now, sorted.
  std::vector<uint64_t> cached_block_hashes() const;
  // Any thread. `live` not OK: ends every stream and refuses new ones with
  // UNAVAILABLE and its message; OK again: accepts streams again.
  void SetLiveness(const absl::Status& live);
  int num_watchers() const;

  // Any thread. Ends every stream with OK, refuses new ones (UNAVAILABLE) and
  // joins the heartbeat thread. Idempotent, also when called from several
  // threads at once (each returns once the heartbeat thread has ended).
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_, join_mu_);

  grpc::ServerWriteReactor<tandem::v1::WorkerEvent>* Watch(
      grpc::CallbackServerContext* context, const tandem::v1::WatchRequest* request) override;

 private:
  class Watcher;
  void Remove(Watcher* w);
  grpc::Status NotLive() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<uint64_t> SortedBlocksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HeartbeatLoop();

  const absl::Duration heartbeat_interval_;
  mutable absl::Mutex mu_;
  tandem::v1::WorkerSnapshot snapshot_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> blocks_ ABSL_GUARDED_BY(mu_);  // PublishBlocks' set
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status live_ ABSL_GUARDED_BY(mu_);
  // Serializes Shutdown's notify-and-join: a second concurrent Shutdown must
  // neither notify twice (absl::Notification forbids it) nor join twice.
  absl::Mutex join_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::Notification stop_;
  std::thread heartbeat_thread_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace tandem::serving
