#include "kvtransfer/ucx_transport.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "kvtransfer/internal/ucx_handles.h"
#include "kvtransfer/internal/ucx_transport_impl.h"
#include "kvtransfer/internal/ucx_util.h"
#include "ucp/api/ucp.h"

// UcxTransport's public methods, and its progress thread from start to
// teardown. Endpoints, the sender and the receiver side are in internal/
// (see internal/ucx_transport_impl.h).

namespace tandem::kvtransfer {
namespace {

using internal::AddressDeleter;
using internal::AddressPtr;
using internal::Capture;
using internal::ConfigPtr;
using internal::kAmId;
using internal::PeerAddress;
using internal::UcsError;

constexpr absl::Duration kPeerCheckInterval = absl::Milliseconds(100);
// Idle, the progress thread keeps polling (yielding the CPU between polls)
// this long before it sleeps in epoll. A transfer is a burst of messages, and
// a receiver that sleeps between two of them pays a wake-up per FIFO's worth
// of data (emulated puts over shared memory collapsed to <0.1 GB/s with 50 us
// on a loaded host).
constexpr absl::Duration kSpinBeforeSleep = absl::Milliseconds(2);
// Sleeping, the thread still wakes this often (a guard against a missed event).
constexpr int kMaxSleepMs = 1000;
constexpr absl::Duration kShutdownDrainTimeout = absl::Seconds(2);
constexpr absl::Duration kShutdownCloseTimeout = absl::Seconds(1);
// ucp_worker_progress calls between two looks at the task queue.
constexpr int kProgressBatch = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(const TransportConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  auto impl = std::make_unique<Impl>(config);
  RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UcxTransport::~UcxTransport() { Shutdown(); }

Capabilities UcxTransport::capabilities() const { return impl_->capabilities(); }

absl::StatusOr<RegionDescriptor> UcxTransport::RegisterRegion(void* base, uint64_t bytes) {
  return impl_->RegisterRegion(base, bytes);
}

absl::StatusOr<AllocatedRegion> UcxTransport::AllocateRegion(uint64_t bytes) {
  return impl_->AllocateRegion(bytes);
}

absl::Status UcxTransport::RegisterSource(void* base, uint64_t bytes) {
  return impl_->RegisterSource(base, bytes);
}

absl::Status UcxTransport::Write(const RegionDescriptor& peer, TransferTag tag,
                                 std::vector<WriteOp> ops,
                                 absl::AnyInvocable<void(absl::Status) &&> done) {
  return impl_->Write(peer, tag, std::move(ops), std::move(done));
}

void UcxTransport::Cancel(TransferTag tag) { impl_->Cancel(tag); }

uint64_t UcxTransport::ReceivedBytes(TransferTag tag) const { return impl_->ReceivedBytes(tag); }

void UcxTransport::Forget(TransferTag tag) { impl_->Forget(tag); }

void UcxTransport::Refuse(TransferTag tag) { impl_->Refuse(tag); }

bool UcxTransport::Receiving(TransferTag tag) const { return impl_->Receiving(tag); }

void UcxTransport::Shutdown() { impl_->Shutdown(); }

// --- Impl: any thread, and the progress thread's lifecycle -----------------

absl::Status UcxTransport::Impl::Start() {
  {
    absl::MutexLock lock(&join_mu_);
    thread_ = std::thread([this] { Run(); });
    // Read by other threads only after tasks passed through mu_.
    thread_id_ = thread_.get_id();
  }
  init_done_.WaitForNotification();
  if (!init_status_.ok()) {
    absl::MutexLock lock(&join_mu_);
    thread_.join();
  }
  return init_status_;
}

Capabilities UcxTransport::Impl::capabilities() const {
  absl::MutexLock lock(&caps_mu_);
  return caps_;
}

void UcxTransport::Impl::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (!stop_requested_) {
      stop_requested_ = true;
      accepting_ = false;
      if (signal_worker_ != nullptr) {
        ucp_worker_signal(signal_worker_);
      }
    }
  }
  if (std::this_thread::get_id() == thread_id_) {
    return;  // from a callback: the thread stops after it returns
  }
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool UcxTransport::Impl::Post(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  if (!accepting_) {
    return false;
  }
  tasks_.push_back(std::move(task));
  ucp_worker_signal(signal_worker_);
  return true;
}

absl::Status UcxTransport::Impl::RunOnThread(absl::AnyInvocable<void() &&> fn) {
  if (std::this_thread::get_id() == thread_id_) {
    std::move(fn)();
    return absl::OkStatus();
  }
  auto done = std::make_shared<absl::Notification>();
  auto ran = std::make_shared<bool>(false);
  // The task is destroyed without running only if the transport shuts down
  // first; the cleanup still wakes the caller then.
  const bool posted = Post(
      [fn = std::move(fn), done, ran, wake = absl::Cleanup([done] { done->Notify(); })]() mutable {
        std::move(fn)();
        *ran = true;
      });
  if (!posted) {
    return absl::UnavailableError("transport shut down");
  }
  done->WaitForNotification();
  if (!*ran) {
    return absl::UnavailableError("transport shut down");
  }
  return absl::OkStatus();
}

void UcxTransport::Impl::Run() {
  init_status_ = Init();
  const bool ok = init_status_.ok();
  if (ok) {
    absl::MutexLock lock(&mu_);
    signal_worker_ = worker_.get();
    accepting_ = !stop_requested_;
  }
  init_done_.Notify();
  if (!ok) {
    Teardown();
    return;
  }
  absl::Time last_activity = absl::Now();
  absl::Time next_peer_check = absl::Now() + kPeerCheckInterval;
  while (true) {
    bool stop = false;
    bool busy = RunTasks(&stop);
    if (stop) {
      break;
    }
    for (int i = 0; i < kProgressBatch && ucp_worker_progress(worker_.get()) != 0; ++i) {
      busy = true;
    }
    busy |= ProcessEvents();
    const absl::Time now = absl::Now();
    if (now >= next_peer_check) {
      CheckPeers();
      next_peer_check = now + kPeerCheckInterval;
    }
    if (busy) {
      last_activity = now;
      continue;
    }
    if (HasOutstanding() || inflight_receives_ > 0 || !closing_.empty()) {
      // Requests in flight need polling, not sleep: a sender waiting for
      // room in a shared-memory FIFO, or for a rendezvous reply, is not
      // woken by an event. Yield, so a peer on the same cores can run.
      std::this_thread::yield();
      continue;
    }
    if (now - last_activity < kSpinBeforeSleep) {
      std::this_thread::yield();
      continue;
    }
    const ucs_status_t armed = ucp_worker_arm(worker_.get());
    if (armed == UCS_ERR_BUSY) {
      continue;
    }
    int timeout_ms = kMaxSleepMs;
    if (WatchingPeers()) {
      timeout_ms = static_cast<int>(
          absl::ToInt64Milliseconds(std::max(next_peer_check - now, absl::Milliseconds(1))));
    }
    if (armed == UCS_OK) {
      epoll_event ev;
      epoll_wait(epoll_fd_.get(), &ev, 1, timeout_ms);
    }
    // A wake-up with nothing to do (the safety timeout) sleeps again at once.
  }
  Teardown();
}

bool UcxTransport::Impl::RunTasks(bool* stop) {
  std::deque<absl::AnyInvocable<void() &&>> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(tasks_);
    *stop = stop_requested_;
  }
  for (auto& t : tasks) {
    std::move(t)();
  }
  return !tasks.empty();
}

absl::Status UcxTransport::Impl::Init() {
  ucp_config_t* raw_config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &raw_config);
  if (s != UCS_OK) {
    return UcsError(s, "ucp_config_read", absl::StatusCode::kInternal);
  }
  ConfigPtr config(raw_config);
  if (!config_.ucx_tls.empty()) {
    s = ucp_config_modify(config.get(), "TLS", config_.ucx_tls.c_str());
    if (s != UCS_OK) {
      return absl::InvalidArgumentError(
          absl::StrCat("ucx_tls '", config_.ucx_tls, "' rejected by UCX: ", ucs_status_string(s)));
    }
  }
  if (!config_.ucx_net_devices.empty()) {
    s = ucp_config_modify(config.get(), "NET_DEVICES", config_.ucx_net_devices.c_str());
    if (s != UCS_OK) {
      return absl::InvalidArgumentError(absl::StrCat("ucx_net_devices '", config_.ucx_net_devices,
                                                     "' rejected by UCX: ", ucs_status_string(s)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config.get(), &context);
  if (s != UCS_OK) {
    return UcsError(s, absl::StrCat("ucp_init (ucx_tls='", config_.ucx_tls, "')"));
  }
  context_.reset(context);

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  s = ucp_worker_create(context_.get(), &wparams, &worker);
  if (s != UCS_OK) {
    return UcsError(s, "ucp_worker_create");
  }
  worker_.reset(worker);

  int efd = -1;
  s = ucp_worker_get_efd(worker_.get(), &efd);
  if (s != UCS_OK) {
    return UcsError(s, "ucp_worker_get_efd", absl::StatusCode::kInternal);
  }
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) {
    return absl::InternalError(absl::StrCat("epoll_create1: ", strerror(errno)));
  }
  epoll_fd_.reset(epfd);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = efd;
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", strerror(errno)));
  }

  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kAmId;
  am.cb = &Impl::AmRecvCallback;
  am.arg = this;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  s = ucp_worker_set_am_recv_handler(worker_.get(), &am);
  if (s != UCS_OK) {
    return UcsError(s, "ucp_worker_set_am_recv_handler", absl::StatusCode::kInternal);
  }

  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  s = ucp_worker_get_address(worker_.get(), &addr, &addr_len);
  if (s != UCS_OK) {
    return UcsError(s, "ucp_worker_get_address", absl::StatusCode::kInternal);
  }
  AddressPtr address(addr, AddressDeleter{worker_.get()});
  PeerAddress local;
  local.identity = internal::LocalIdentity();
  local.ucx_address.assign(reinterpret_cast<const char*>(addr), addr_len);
  local_address_ = internal::EncodePeerAddress(local);

  const std::vector<std::string> tls = internal::ParseContextTransports(
      Capture([&](FILE* f) { ucp_context_print_info(context_.get(), f); }));
  bool native_rma = false;
  for (const std::string& tl : tls) {
    context_has_shm_ |= internal::IsSharedMemoryTransport(tl);
    native_rma |= internal::IsNativeRmaTransport(tl);
  }
  absl::MutexLock lock(&caps_mu_);
  caps_.name = "ucx";
  caps_.transports = absl::StrJoin(tls, ",");
  caps_.native_put = config_.mode == "put" || (config_.mode == "auto" && native_rma);
  last_use_am_ = !caps_.native_put;
  return absl::OkStatus();
}

void UcxTransport::Impl::Teardown() {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
  }
  stopping_ = true;
  bool unused;
  RunTasks(&unused);  // writes posted before the stop fail with kUnavailable
  if (worker_ != nullptr) {
    for (auto& [id, w] : writes_) {
      if (w->status.ok()) {
        w->status = absl::UnavailableError(
            absl::StrCat("write tag=", w->tag, " to ", w->peer_name, ": transport shut down"));
      }
      CancelRequests(*w);  // stops issuing; waits for what is in flight
    }
    const absl::Time deadline = absl::Now() + kShutdownDrainTimeout;
    while (HasOutstanding() && absl::Now() < deadline) {
      ucp_worker_progress(worker_.get());
      ProcessEvents();
    }
    // UCX 1.13 aborts in ucp_worker_destroy ("got REP message" in
    // uct_tcp_ep_pending_purge) when a wireup reply is still queued on a
    // tcp lane of an endpoint a peer's connect created here. Let wireup
    // traffic settle while all our objects are alive: at least 20 ms, then
    // until 5 ms pass without progress, at most 200 ms.
    {
      const absl::Time start = absl::Now();
      absl::Time last_event = start;
      while (true) {
        const absl::Time now = absl::Now();
        if (ucp_worker_progress(worker_.get()) != 0) {
          last_event = now;
        }
        ProcessEvents();
        if (now - start >= absl::Milliseconds(200) ||
            (now - start >= absl::Milliseconds(20) && now - last_event >= absl::Milliseconds(5))) {
          break;
        }
      }
    }
    // Close every endpoint before the last dones run: a forced close makes
    // UCX drop what is still in flight, so no source is read after its
    // owner learned the write is over.
    for (auto& [id, w] : writes_) {
      if (w->outstanding > 0) {
        w->ep->ep.get_deleter().force = true;
      }
      --w->ep->active_writes;
      w->ep = nullptr;
    }
    for (auto& [key, ep] : endpoints_) {
      ep->rkeys.clear();
      if (ep->watch_pid &&
          !internal::ProcessAlive(ep->address.identity.pid, ep->address.identity.start_time)) {
        ep->ep.get_deleter().force = true;  // a flush would wait for the dead
      }
    }
    endpoint_by_handle_.clear();
    endpoints_.clear();
    const absl::Time close_deadline = absl::Now() + kShutdownCloseTimeout;
    while (!closing_.empty() && absl::Now() < close_deadline) {
      ucp_worker_progress(worker_.get());
      ReapClosing();
    }
    while (!writes_.empty()) {
      PendingWrite& w = *writes_.begin()->second;
      FinishWrite(w.id, w.cancelled
                            ? absl::CancelledError(absl::StrCat("write tag=", w.tag, " cancelled"))
                            : w.status);
    }
    RunTasks(&unused);  // anything the dones posted is refused or failed
    if (!closing_.empty()) {
      LOG(WARNING) << "UcxTransport: " << closing_.size()
                   << " endpoint(s) did not close in time; destroying the worker";
    }
    for (void* r : closing_) {
      ucp_request_free(r);
    }
    closing_.clear();
    {
      absl::MutexLock lock(&mu_);
      signal_worker_ = nullptr;
    }
    pending_recvs_.clear();
  }
  worker_.reset();
  // Requests UCX never completed (to a dead MODE_NONE peer) took their
  // contexts with them; the worker is gone, so no callback can run now.
  for (OpContext* ctx : live_sends_) {
    delete ctx;
  }
  live_sends_.clear();
  for (RecvContext* ctx : live_receives_) {
    delete ctx;
  }
  live_receives_.clear();
  regions_.clear();
  sources_.clear();
  epoll_fd_.reset();
  context_.reset();
}

bool UcxTransport::Impl::HasOutstanding() const {
  for (const auto& [id, w] : writes_) {
    if (w->outstanding > 0) {
      return true;
    }
  }
  return false;
}

bool UcxTransport::Impl::WatchingPeers() const {
  for (const auto& [key, ep] : endpoints_) {
    if (ep->watch_pid && ep->active_writes > 0) {
      return true;
    }
  }
  return false;
}

bool UcxTransport::Impl::ProcessEvents() {
  bool any = false;
  if (!pending_recvs_.empty()) {
    any = true;
    std::vector<PendingRecv> recvs;
    recvs.swap(pending_recvs_);
    for (const PendingRecv& r : recvs) {
      StartReceive(r);
    }
  }
  if (!failed_endpoints_.empty()) {
    any = true;
    std::vector<std::pair<ucp_ep_h, ucs_status_t>> failed;
    failed.swap(failed_endpoints_);
    for (const auto& [handle, status] : failed) {
      auto it = endpoint_by_handle_.find(handle);
      if (it == endpoint_by_handle_.end()) {
        continue;
      }
      Endpoint* ep = it->second;
      FailEndpoint(ep, UcsError(status, absl::StrCat("peer ", ep->name, " failed")));
    }
  }
  if (!dirty_writes_.empty()) {
    any = true;
    std::vector<uint64_t> dirty;
    dirty.swap(dirty_writes_);
    for (uint64_t id : dirty) {
      Pump(id);
    }
  }
  if (!closing_.empty()) {
    ReapClosing();
  }
  return any;
}

}  // namespace tandem::kvtransfer
