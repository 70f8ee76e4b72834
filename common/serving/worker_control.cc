#include "common/serving/worker_control.h"

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/serving/queued_write_reactor.h"

namespace tandem::serving {

using tandem::v1::WorkerEvent;

class WorkerControlService::Watcher final : public QueuedWriteReactor<WorkerEvent> {
 public:
  explicit Watcher(WorkerControlService* service)
      : QueuedWriteReactor<WorkerEvent>([](WorkerEvent& last, const WorkerEvent& next) {
          // A newer load replaces one not yet written; heartbeats do not pile up.
          if (last.has_load() && next.has_load()) {
            last = next;
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
