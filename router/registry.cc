#include "router/registry.h"

#include <set>

namespace tandem::router {

absl::string_view WorkerRoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kColocated:
      return "colocated";
    case WorkerRole::kUnknown:
      break;
  }
  return "unknown";
}

bool RegistrySnapshot::IsLive(const WorkerInfo& w, absl::Time now) const {
  return w.connected && now - w.last_heard <= heartbeat_timeout;
}

const WorkerInfo* RegistrySnapshot::Find(absl::string_view address) const {
  for (const WorkerInfo& w : workers) {
    if (w.address == address) {
      return &w;
    }
  }
  return nullptr;
}

int RegistrySnapshot::CountLive(WorkerRole role, absl::Time now) const {
  int n = 0;
  for (const WorkerInfo& w : workers) {
    n += (w.desc.role == role && IsLive(w, now)) ? 1 : 0;
  }
  return n;
}

std::vector<std::string> WorkerRegistry::SetTargets(const std::vector<std::string>& addresses) {
  std::set<std::string> wanted(addresses.begin(), addresses.end());
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (wanted.count(it->first) == 0) {
      prefixes_->Drop(it->first);
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::string> added;
  for (const std::string& a : wanted) {
    if (workers_.count(a) == 0) {
      WorkerInfo w;
      w.address = a;
      workers_.emplace(a, std::move(w));
      added.push_back(a);
    }
  }
  return added;
}

void WorkerRegistry::SetChannel(absl::string_view address, std::shared_ptr<grpc::Channel> channel) {
  auto it = workers_.find(std::string(address));
  if (it != workers_.end()) {
    it->second.channel = std::move(channel);
  }
}

void WorkerRegistry::OnSnapshot(absl::string_view address, const WorkerDescription& desc,
                                absl::Span<const uint64_t> cached_blocks) {
  auto it = workers_.find(std::string(address));
  if (it == workers_.end()) {
    return;
  }
  it->second.desc = desc;
  it->second.connected = true;
  it->second.last_heard = clock_.Now();
  it->second.last_error = absl::OkStatus();
  prefixes_->Reset(it->first, PrefixIndex::Naming{desc.kv_model_id, desc.kv_block_size},
                   cached_blocks);
}

void WorkerRegistry::OnBlocks(absl::string_view address, bool resync,
                              absl::Span<const uint64_t> added,
                              absl::Span<const uint64_t> removed) {
  auto it = workers_.find(std::string(address));
  if (it == workers_.end() || !it->second.connected) {
    return;
  }
  it->second.last_heard = clock_.Now();
  if (resync) {
    prefixes_->Resync(it->first, added);
  } else {
    prefixes_->Apply(it->first, added, removed);
  }
}

void WorkerRegistry::OnLoad(absl::string_view address, const WorkerLoadInfo& load) {
  auto it = workers_.find(std::string(address));
  if (it == workers_.end() || !it->second.connected) {
    return;
  }
  it->second.desc.load = load;
  it->second.last_heard = clock_.Now();
}

void WorkerRegistry::OnHeartbeat(absl::string_view address) {
  auto it = workers_.find(std::string(address));
  if (it == workers_.end() || !it->second.connected) {
    return;
  }
  it->second.last_heard = clock_.Now();
}

void WorkerRegistry::OnStreamEnded(absl::string_view address, const absl::Status& status) {
  auto it = workers_.find(std::string(address));
  if (it == workers_.end()) {
    return;
  }
  it->second.connected = false;
  it->second.last_error = status;
  prefixes_->Drop(it->first);
}

std::vector<std::string> WorkerRegistry::TakeDeparted() {
  const absl::Time now = clock_.Now();
  std::vector<std::string> departed;
  RegistrySnapshot probe;
  probe.heartbeat_timeout = heartbeat_timeout_;
  std::map<std::string, bool> live_now;
  for (const auto& [address, w] : workers_) {
    const bool live = probe.IsLive(w, now);
    live_now[address] = live;
    auto prev = was_live_.find(address);
    if (prev != was_live_.end() && prev->second && !live) {
      departed.push_back(address);
      prefixes_->Drop(address);
    }
  }
  // Removed targets that were live have left as well.
  for (const auto& [address, live] : was_live_) {
    if (live && live_now.count(address) == 0) {
      departed.push_back(address);
    }
  }
  was_live_ = std::move(live_now);
  return departed;
}

std::shared_ptr<const RegistrySnapshot> WorkerRegistry::Snapshot() const {
  auto snap = std::make_shared<RegistrySnapshot>();
  snap->heartbeat_timeout = heartbeat_timeout_;
  snap->prefixes = prefixes_;
  snap->workers.reserve(workers_.size());
  for (const auto& [address, w] : workers_) {
    snap->workers.push_back(w);
  }
  return snap;
}

}  // namespace tandem::router
