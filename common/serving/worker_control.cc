#include "common/serving/worker_control.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/serving/queued_write_reactor.h"

namespace tandem::serving {

using tandem::v1::KvBlockEvent;
using tandem::v1::WorkerEvent;

namespace {

// Folds `next` into `last` (not yet written) as if both were applied in turn.
void MergeBlockEvents(KvBlockEvent& last, const KvBlockEvent& next) {
  if (next.resync()) {
    last = next;
    return;
  }
  absl::flat_hash_set<uint64_t> added(last.added().begin(), last.added().end());
  absl::flat_hash_set<uint64_t> removed(last.removed().begin(), last.removed().end());
  for (uint64_t h : next.removed()) {
    added.erase(h);
    if (!last.resync()) {
      removed.insert(h);
    }
  }
  for (uint64_t h : next.added()) {
    removed.erase(h);
    added.insert(h);
  }
  std::vector<uint64_t> a(added.begin(), added.end()), r(removed.begin(), removed.end());
  std::sort(a.begin(), a.end());
  std::sort(r.begin(), r.end());
  last.mutable_added()->Assign(a.begin(), a.end());
  last.mutable_removed()->Assign(r.begin(), r.end());
}

}  // namespace

class WorkerControlService::Watcher final : public QueuedWriteReactor<WorkerEvent> {
 public:
  explicit Watcher(WorkerControlService* service)
      : QueuedWriteReactor<WorkerEvent>([](WorkerEvent& last, const WorkerEvent& next) {
          // A newer load replaces one not yet written; block events merge;
          // heartbeats do not pile up.
          if (last.has_load() && next.has_load()) {
            last = next;
            return true;
          }
          if (last.has_blocks() && next.has_blocks()) {
            MergeBlockEvents(*last.mutable_blocks(), next.blocks());
            return true;
          }
          return last.has_heartbeat_unix_seconds() && next.has_heartbeat_unix_seconds();
        }),
        service_(service) {}

 private:
  void OnCancelled() override { Close(grpc::Status::CANCELLED); }
  void OnStreamDone() override { service_->Remove(this); }

  WorkerControlService* const service_;
};

WorkerControlService::WorkerControlService(tandem::v1::WorkerSnapshot snapshot,
                                           absl::Duration heartbeat_interval)
    : heartbeat_interval_(heartbeat_interval), snapshot_(std::move(snapshot)) {
  absl::MutexLock lock(&join_mu_);
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

WorkerControlService::~WorkerControlService() { Shutdown(); }

void WorkerControlService::set_worker_id(const std::string& id) {
  absl::MutexLock lock(&mu_);
  snapshot_.set_worker_id(id);
}

void WorkerControlService::PublishLoad(const tandem::v1::WorkerLoad& load) {
  absl::MutexLock lock(&mu_);
  if (google::protobuf::util::MessageDifferencer::Equals(snapshot_.load(), load)) {
    return;
  }
  *snapshot_.mutable_load() = load;
  if (shut_down_) {
    return;
  }
  WorkerEvent ev;
  *ev.mutable_load() = load;
  for (Watcher* w : watchers_) {
    w->Send(ev);
  }
}

tandem::v1::WorkerLoad WorkerControlService::load() const {
  absl::MutexLock lock(&mu_);
  return snapshot_.load();
}

void WorkerControlService::PublishBlocks(const engine::KvBlockEvents& events) {
  WorkerEvent ev;
  KvBlockEvent* b = ev.mutable_blocks();
  b->set_resync(events.resync);
  b->mutable_added()->Assign(events.added.begin(), events.added.end());
  b->mutable_removed()->Assign(events.removed.begin(), events.removed.end());
  absl::MutexLock lock(&mu_);
  if (events.resync) {
    blocks_.clear();
  }
  for (uint64_t h : events.removed) {
    blocks_.erase(h);
  }
  blocks_.insert(events.added.begin(), events.added.end());
  if (shut_down_) {
    return;
  }
  for (Watcher* w : watchers_) {
    w->Send(ev);
  }
}

std::vector<uint64_t> WorkerControlService::cached_block_hashes() const {
  absl::MutexLock lock(&mu_);
  return SortedBlocksLocked();
}

std::vector<uint64_t> WorkerControlService::SortedBlocksLocked() const {
  std::vector<uint64_t> out(blocks_.begin(), blocks_.end());
  std::sort(out.begin(), out.end());
  return out;
}

void WorkerControlService::SetLiveness(const absl::Status& live) {
  absl::MutexLock lock(&mu_);
  live_ = live;
  if (live.ok()) {
    return;
  }
  for (Watcher* w : watchers_) {
    w->Close(NotLive());
  }
}

int WorkerControlService::num_watchers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(watchers_.size());
}

void WorkerControlService::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (!shut_down_) {
      shut_down_ = true;
      for (Watcher* w : watchers_) {
        w->Close(grpc::Status::OK);
      }
    }
  }
  absl::MutexLock lock(&join_mu_);
  if (!stop_.HasBeenNotified()) {
    stop_.Notify();
  }
  if (heartbeat_thread_.joinable()) {
    heartbeat_thread_.join();
  }
}

grpc::ServerWriteReactor<WorkerEvent>* WorkerControlService::Watch(
    grpc::CallbackServerContext* /*context*/, const tandem::v1::WatchRequest* /*request*/) {
  auto* w = new Watcher(this);
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    w->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker shutting down"));
    // Not entered in watchers_; Remove() tolerates that.
    return w;
  }
  if (!live_.ok()) {
    w->Close(NotLive());
    return w;
  }
  watchers_.insert(w);
  WorkerEvent ev;
  *ev.mutable_snapshot() = snapshot_;
  const std::vector<uint64_t> hashes = SortedBlocksLocked();
  ev.mutable_snapshot()->mutable_cached_block_hashes()->Assign(hashes.begin(), hashes.end());
  w->Send(std::move(ev));
  return w;
}

grpc::Status WorkerControlService::NotLive() const {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      std::string(absl::StrCat("worker not live: ", live_.message())));
}

void WorkerControlService::Remove(Watcher* w) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(w);
}

void WorkerControlService::HeartbeatLoop() {
  while (!stop_.WaitForNotificationWithTimeout(heartbeat_interval_)) {
    WorkerEvent ev;
    ev.set_heartbeat_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
    absl::MutexLock lock(&mu_);
    for (Watcher* w : watchers_) {
      w->Send(ev);
    }
  }
}

}  // namespace tandem::serving
