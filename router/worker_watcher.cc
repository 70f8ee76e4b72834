#include "router/worker_watcher.h"

#include <netdb.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include <algorithm>
#include <set>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "proto/grpc_status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::router {
namespace {

WorkerRole FromProto(tandem::v1::WorkerRole r) {
  switch (r) {
    case tandem::v1::WORKER_ROLE_PREFILL:
      return WorkerRole::kPrefill;
    case tandem::v1::WORKER_ROLE_DECODE:
      return WorkerRole::kDecode;
    case tandem::v1::WORKER_ROLE_COLOCATED:
      return WorkerRole::kColocated;
    default:
      return WorkerRole::kUnknown;
  }
}

WorkerLoadInfo FromProto(const tandem::v1::WorkerLoad& l) {
  WorkerLoadInfo out;
  out.running_requests = l.running_requests();
  out.waiting_requests = l.waiting_requests();
  out.queued_prefill_tokens = l.queued_prefill_tokens();
  out.free_kv_blocks = l.free_kv_blocks();
  out.total_kv_blocks = l.total_kv_blocks();
  out.cached_kv_blocks = l.cached_kv_blocks();
  out.max_running_requests = l.max_running_requests();
  return out;
}

std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  // Reconnect to a restarted worker quickly; the watcher has its own backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A channel per worker: never share a subchannel with another router channel.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Mutual TLS when internal_tls is configured: the worker's certificate is
  // checked against the cluster CA and the router presents its own.
  return grpc::CreateCustomChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(), args);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveWithGetaddrinfo(const std::string& name_port) {
  const size_t colon = name_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == name_port.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name_port, "' is not name:port"));
  }
  std::string host = name_port.substr(0, colon);
  const std::string port = name_port.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolving '", name_port, "': ", gai_strerror(rc)));
  }
  std::set<std::string> out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET) {
      auto* sa = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      inet_ntop(AF_INET, &sa->sin_addr, buf, sizeof(buf));
      out.insert(absl::StrCat(buf, ":", port));
    } else if (ai->ai_family == AF_INET6) {
      auto* sa = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      inet_ntop(AF_INET6, &sa->sin6_addr, buf, sizeof(buf));
      out.insert(absl::StrCat("[", buf, "]:", port));
    }
  }
  freeaddrinfo(res);
  return std::vector<std::string>(out.begin(), out.end());
}

// One Control.Watch call. Reactions post to the watcher's queue and never
// block; the watcher deletes the stream on its thread after OnDone posted.
class WorkerWatcher::WatchStream : public grpc::ClientReadReactor<tandem::v1::WorkerEvent> {
 public:
  WatchStream(WorkerWatcher* watcher, std::string address, uint64_t generation,
              const std::shared_ptr<grpc::Channel>& channel)
      : watcher_(watcher),
        address_(std::move(address)),
        generation_(generation),
        stub_(tandem::v1::Control::NewStub(channel)) {}

  void Start() {
    stub_->async()->Watch(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      return;  // OnDone follows with the status
    }
    watcher_->queue_.Post([w = watcher_, a = address_, g = generation_, e = event_]() {
      w->HandleEvent(a, g, e);
    });
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& s) override {
    // Last touch of `this` is the Post: the closure deletes the stream.
    watcher_->queue_.Post([w = watcher_, self = this, a = address_, g = generation_,
                           st = proto::FromGrpcStatus(s)]() { w->HandleStreamDone(self, a, g, st); });
  }

 private:
  WorkerWatcher* const watcher_;
  const std::string address_;
  const uint64_t generation_;
  std::unique_ptr<tandem::v1::Control::Stub> stub_;
  grpc::ClientContext context_;
  tandem::v1::WatchRequest request_;
  tandem::v1::WorkerEvent event_;
};

WorkerWatcher::WorkerWatcher(Options options)
    : options_(std::move(options)),
      registry_(*options_.clock, options_.discovery.heartbeat_timeout) {
  absl::MutexLock lock(&mu_);
  snapshot_ = registry_.Snapshot();
}

WorkerWatcher::~WorkerWatcher() { Stop(); }

void WorkerWatcher::Start() {
  if (started_) {
    return;
  }
  started_ = true;
  {
    absl::MutexLock lock(&mu_);
    last_loop_ = options_.clock->Now();
  }
  thread_ = std::thread([this] { Loop(); });
}

void WorkerWatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

std::shared_ptr<const RegistrySnapshot> WorkerWatcher::snapshot() const {
  absl::MutexLock lock(&mu_);
  return snapshot_;
}

void WorkerWatcher::Loop() {
  bool cancelled_all = false;
  while (true) {
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
      last_loop_ = options_.clock->Now();
    }
    if (stopping) {
      if (!cancelled_all) {
        for (auto& [address, t] : targets_) {
          if (t.stream != nullptr) {
            t.stream->Cancel();
          }
        }
        cancelled_all = true;
      }
      if (active_streams_ == 0) {
        break;
      }
      queue_.WaitFor(options_.tick);
      queue_.RunPending();
      continue;
    }
    queue_.WaitFor(options_.tick);
    queue_.RunPending();
    const absl::Time now = options_.clock->Now();
    RefreshTargets(now);
    for (auto& [address, t] : targets_) {
      if (t.stream == nullptr && now >= t.next_attempt) {
        StartStream(address, t);
      }
    }
    for (const std::string& address : registry_.TakeDeparted()) {
      dirty_ = true;
      auto it = targets_.find(address);
      // `why` reaches clients (see Options::on_departed): it never names the address.
      absl::Status why = absl::UnavailableError("left rotation");
      if (it != targets_.end() && it->second.stream != nullptr) {
        // Silent past the heartbeat timeout: drop the stream and reconnect.
        why = absl::UnavailableError(absl::StrCat(
            "sent no heartbeat for ", absl::FormatDuration(options_.discovery.heartbeat_timeout)));
        it->second.stream->Cancel();
      }
      // The log (operators only) also says why the stream ended: a killed
      // worker's connection error, a wedged one's "worker not live: ...".
      std::string detail;
      if (it != targets_.end() && it->second.stream == nullptr) {
        std::shared_ptr<const RegistrySnapshot> snap = registry_.Snapshot();
        if (const WorkerInfo* w = snap->Find(address); w != nullptr && !w->last_error.ok()) {
          detail = absl::StrCat(" (its Watch stream ended: ", w->last_error.ToString(), ")");
        }
      }
      LOG(WARNING) << "router: worker " << address << " " << why.message() << detail;
      if (options_.on_departed) {
        options_.on_departed(address, why);
      }
    }
    if (dirty_) {
      Publish();
    }
  }
  // Drain anything the last OnDone posted.
  queue_.RunPending();
  targets_.clear();
}

void WorkerWatcher::RefreshTargets(absl::Time now) {
  const DiscoveryConfig& d = options_.discovery;
  bool changed = !targets_set_;
  targets_set_ = true;
  if (!d.dns_workers.empty() && now >= next_dns_) {
    next_dns_ = now + d.dns_refresh;
    std::set<std::string> resolved;
    for (const std::string& name : d.dns_workers) {
      absl::StatusOr<std::vector<std::string>> r = options_.resolver(name);
      if (!r.ok()) {
        // Keep what the name resolved to before: a DNS hiccup must not empty the pool.
        LOG_EVERY_N(WARNING, 20) << "router: " << r.status();
        for (const std::string& a : dns_resolved_) {
          resolved.insert(a);
        }
        continue;
      }
      resolved.insert(r->begin(), r->end());
    }
    std::vector<std::string> v(resolved.begin(), resolved.end());
    if (v != dns_resolved_) {
      dns_resolved_ = std::move(v);
      changed = true;
    }
  }
  if (!changed) {
    return;
  }
  std::vector<std::string> all = d.static_workers;
  all.insert(all.end(), dns_resolved_.begin(), dns_resolved_.end());
  std::vector<std::string> added = registry_.SetTargets(all);
  std::set<std::string> wanted(all.begin(), all.end());
  for (auto it = targets_.begin(); it != targets_.end();) {
    if (wanted.count(it->first) == 0) {
      LOG(INFO) << "router: worker " << it->first << " removed from discovery";
      if (it->second.stream != nullptr) {
        it->second.stream->Cancel();  // its OnDone still arrives; the stream finds no target
      }
      it = targets_.erase(it);
    } else {
      ++it;
    }
  }
  for (const std::string& a : added) {
    Target t;
    t.channel = MakeChannel(a, options_.credentials);
    t.backoff = d.backoff_initial;
    registry_.SetChannel(a, t.channel);
    targets_.emplace(a, std::move(t));
    LOG(INFO) << "router: watching worker " << a;
  }
  dirty_ = true;
}

void WorkerWatcher::StartStream(const std::string& address, Target& t) {
  t.generation = next_generation_++;
  t.stream = new WatchStream(this, address, t.generation, t.channel);
  ++active_streams_;
  t.stream->Start();
}

void WorkerWatcher::HandleEvent(const std::string& address, uint64_t generation,
                                const tandem::v1::WorkerEvent& event) {
  auto it = targets_.find(address);
  if (it == targets_.end() || it->second.generation != generation) {
    return;  // from a stream we have since replaced
  }
  switch (event.event_case()) {
    case tandem::v1::WorkerEvent::kSnapshot: {
      const tandem::v1::WorkerSnapshot& s = event.snapshot();
      WorkerDescription d;
      d.worker_id = s.worker_id();
      d.role = FromProto(s.role());
      d.model = s.model().id();
      d.context_length = s.model().context_length();
      d.kv_block_size = s.layout().block_size();
      d.kv_model_id = s.layout().model_id();
      d.load = FromProto(s.load());
      registry_.OnSnapshot(address, d, s.cached_block_hashes());
      it->second.backoff = options_.discovery.backoff_initial;
      LOG(INFO) << "router: worker " << address << " (" << d.worker_id << ", "
                << WorkerRoleName(d.role) << ", model " << d.model << ") is up";
      break;
    }
    case tandem::v1::WorkerEvent::kLoad:
      registry_.OnLoad(address, FromProto(event.load()));
      break;
    case tandem::v1::WorkerEvent::kHeartbeatUnixSeconds:
      registry_.OnHeartbeat(address);
      break;
    case tandem::v1::WorkerEvent::kBlocks: {
      const tandem::v1::KvBlockEvent& b = event.blocks();
      registry_.OnBlocks(address, b.resync(), b.added(), b.removed());
      break;
    }
    default:
      registry_.OnHeartbeat(address);  // a newer worker's event kind: still alive
      break;
  }
  dirty_ = true;
}

void WorkerWatcher::HandleStreamDone(WatchStream* stream, const std::string& address,
                                     uint64_t generation, const absl::Status& status) {
  delete stream;
  --active_streams_;
  auto it = targets_.find(address);
  if (it == targets_.end() || it->second.generation != generation) {
    return;
  }
  Target& t = it->second;
  t.stream = nullptr;
  registry_.OnStreamEnded(address, status);
  const absl::Time now = options_.clock->Now();
  t.next_attempt = now + t.backoff;
  t.backoff = std::min(t.backoff * 2, options_.discovery.backoff_max);
  VLOG(1) << "router: watch stream to " << address << " ended: " << status;
  dirty_ = true;
}

absl::Time WorkerWatcher::last_loop() const {
  absl::MutexLock lock(&mu_);
  return last_loop_;
}

void WorkerWatcher::Publish() {
  dirty_ = false;
  std::shared_ptr<const RegistrySnapshot> snap = registry_.Snapshot();
  {
    absl::MutexLock lock(&mu_);
    snapshot_ = snap;
  }
  if (options_.on_publish) {
    options_.on_publish(*snap);
  }
}

}  // namespace tandem::router
