#include "kvtransfer/ucx_transport.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kvtransfer/internal/cancelled_tags.h"
#include "kvtransfer/internal/ucx_util.h"
#include "kvtransfer/internal/write_checks.h"
#include "ucp/api/ucp.h"

namespace tandem::kvtransfer {
namespace {

using internal::DecodePeerAddress;
using internal::LaneInfo;
using internal::PeerAddress;
using internal::UcsError;

// Active message id of every transport's handler (UCP keeps handlers in an
// array indexed by id, so it stays small).
constexpr unsigned kAmId = 17;
constexpr uint32_t kAmMagic = 0x4b565431;  // "KVT1"
// Requests in flight per write: enough to keep a link busy with 2 MiB ops,
// few enough that Cancel takes effect within a window.
constexpr int kMaxInflightPerWrite = 64;
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
constexpr size_t kMaxCancelledTags = 4096;
// Refused tags remembered by a receiver (8 bytes and a deque slot each): a
// decode worker refuses one per reservation that ends before its import.
constexpr size_t kMaxRefusedTags = 65536;
// ucp_worker_progress calls between two looks at the task queue.
constexpr int kProgressBatch = 64;

enum class AmKind : uint32_t {
  kData = 1,    // payload = bytes for region_base + offset
  kLanded = 2,  // no payload: `bytes` of `tag` landed by put (after a flush)
};

// Sent as the active message header; both ends are this code on one ABI.
struct AmHeader {
  uint32_t magic = kAmMagic;
  AmKind kind = AmKind::kData;
  uint64_t tag = 0;
  uint64_t region_base = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// --- deleters for UCX handles ------------------------------------------------
struct ConfigDeleter {
  void operator()(ucp_config_t* c) const { ucp_config_release(c); }
};
struct ContextDeleter {
  void operator()(ucp_context* c) const { ucp_cleanup(c); }
};
struct WorkerDeleter {
  void operator()(ucp_worker* w) const { ucp_worker_destroy(w); }
};
struct AddressDeleter {
  ucp_worker_h worker = nullptr;
  void operator()(ucp_address_t* a) const { ucp_worker_release_address(worker, a); }
};
struct MemDeleter {
  ucp_context_h context = nullptr;
  void operator()(ucp_mem* m) const {
    const ucs_status_t s = ucp_mem_unmap(context, m);
    if (s != UCS_OK) {
      LOG(WARNING) << "ucp_mem_unmap: " << ucs_status_string(s);
    }
  }
};
struct RkeyDeleter {
  void operator()(ucp_rkey* r) const { ucp_rkey_destroy(r); }
};
struct RkeyBufferDeleter {
  void operator()(void* b) const { ucp_rkey_buffer_release(b); }
};
struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};
struct FreeDeleter {
  void operator()(char* p) const { free(p); }
};

using ConfigPtr = std::unique_ptr<ucp_config_t, ConfigDeleter>;
using ContextPtr = std::unique_ptr<ucp_context, ContextDeleter>;
using WorkerPtr = std::unique_ptr<ucp_worker, WorkerDeleter>;
using AddressPtr = std::unique_ptr<ucp_address_t, AddressDeleter>;
using MemPtr = std::unique_ptr<ucp_mem, MemDeleter>;
using RkeyPtr = std::unique_ptr<ucp_rkey, RkeyDeleter>;
using RkeyBufferPtr = std::unique_ptr<void, RkeyBufferDeleter>;

// An owned file descriptor.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { reset(); }
  void reset(int fd = -1) {
    if (fd_ >= 0) {
      close(fd_);
    }
    fd_ = fd;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// What a UCX print function writes to a FILE*, as a string.
std::string Capture(absl::FunctionRef<void(FILE*)> print) {
  char* raw = nullptr;
  size_t len = 0;
  std::unique_ptr<char, FreeDeleter> buf;
  {
    std::unique_ptr<FILE, FileCloser> f(open_memstream(&raw, &len));
    if (f == nullptr) {
      return "";
    }
    print(f.get());
  }  // fclose sets raw/len
  buf.reset(raw);
  return std::string(raw, len);
}

bool Contains(uint64_t base, uint64_t bytes, const void* p, uint64_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= base && n <= bytes && a - base <= bytes - n;
}

}  // namespace

class UcxTransport::Impl {
 public:
  explicit Impl(TransportConfig config) : config_(std::move(config)) {}
  ~Impl() { Shutdown(); }

  // Starts the thread and creates the UCX objects on it.
  absl::Status Start() {
    thread_ = std::thread([this] { Run(); });
    // Read by other threads only after tasks passed through mu_.
    thread_id_ = thread_.get_id();
    init_done_.WaitForNotification();
    if (!init_status_.ok()) {
      thread_.join();
    }
    return init_status_;
  }

  Capabilities capabilities() const {
    absl::MutexLock lock(&caps_mu_);
    return caps_;
  }

  absl::StatusOr<RegionDescriptor> RegisterRegion(void* base, uint64_t bytes) {
    if (base == nullptr || bytes == 0) {
      return absl::InvalidArgumentError("RegisterRegion: null or empty region");
    }
    absl::StatusOr<RegionDescriptor> result = absl::UnavailableError("transport shut down");
    RETURN_IF_ERROR(RunOnThread([&] { result = RegisterRegionOnThread(base, bytes); }));
    return result;
  }

  absl::StatusOr<AllocatedRegion> AllocateRegion(uint64_t bytes) {
    if (bytes == 0) {
      return absl::InvalidArgumentError("AllocateRegion: 0 bytes");
    }
    absl::StatusOr<AllocatedRegion> result = absl::UnavailableError("transport shut down");
    RETURN_IF_ERROR(RunOnThread([&] { result = AllocateRegionOnThread(bytes); }));
    return result;
  }

  absl::Status RegisterSource(void* base, uint64_t bytes) {
    if (base == nullptr || bytes == 0) {
      return absl::InvalidArgumentError("RegisterSource: null or empty region");
    }
    absl::Status result;
    RETURN_IF_ERROR(RunOnThread([&] { result = RegisterSourceOnThread(base, bytes); }));
    return result;
  }

  absl::Status Write(const RegionDescriptor& peer, TransferTag tag, std::vector<WriteOp> ops,
                     absl::AnyInvocable<void(absl::Status) &&> done) {
    absl::StatusOr<PeerAddress> address = DecodePeerAddress(peer.worker_address);
    if (!address.ok()) {
      return Annotate(address.status(), "Write: peer");
    }
    RETURN_IF_ERROR(internal::ValidateWrite(peer, ops));
    auto w = std::make_unique<PendingWrite>();
    w->tag = tag;
    w->peer = peer;
    w->peer_name = address->identity.ToString();
    w->ops = std::move(ops);
    w->done = std::move(done);
    for (const WriteOp& op : w->ops) {
      w->total_bytes += op.bytes;
    }
    const bool posted = Post([this, w = std::move(w)]() mutable { StartWrite(std::move(w)); });
    if (!posted) {
      return absl::UnavailableError("Write: transport shut down");
    }
    return absl::OkStatus();
  }

  void Cancel(TransferTag tag) {
    Post([this, tag] { CancelOnThread(tag); });
  }

  uint64_t ReceivedBytes(TransferTag tag) const {
    absl::MutexLock lock(&received_mu_);
    auto it = received_.find(tag);
    return it == received_.end() ? 0 : it->second;
  }

  void Forget(TransferTag tag) {
    {
      absl::MutexLock lock(&received_mu_);
      received_.erase(tag);
    }
    Post([this, tag] { cancelled_.Remove(tag); });
  }

  void Refuse(TransferTag tag) {
    absl::MutexLock lock(&received_mu_);
    refused_.Add(tag);
    received_.erase(tag);
  }

  bool Receiving(TransferTag tag) const {
    absl::MutexLock lock(&received_mu_);
    return receiving_.contains(tag);
  }

  void Shutdown() {
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

 private:
  struct Region {
    uint64_t bytes = 0;
    MemPtr memh;
  };

  struct Endpoint;

  struct RemoteKey {
    RkeyPtr rkey;
    // ucp_rkey_ptr works: the peer's region is mapped here (UCX allocated it
    // in shared memory), so a put is a plain memcpy.
    bool mapped = false;
  };

  enum class Phase { kSending, kFlushing, kLanding };

  struct PendingWrite {
    uint64_t id = 0;
    TransferTag tag = 0;
    RegionDescriptor peer;
    std::string peer_name;
    std::vector<WriteOp> ops;
    uint64_t total_bytes = 0;
    absl::AnyInvocable<void(absl::Status) &&> done;

    Endpoint* ep = nullptr;
    ucp_rkey_h rkey = nullptr;  // owned by ep->rkeys (put mode)
    bool use_am = false;
    Phase phase = Phase::kSending;
    size_t next_op = 0;
    int outstanding = 0;
    absl::flat_hash_set<void*> requests;  // in flight, for Cancel
    bool cancelled = false;
    absl::Status status;  // first error
  };

  // Argument of a send/flush callback; owns the header UCX may read until then.
  struct OpContext {
    Impl* impl = nullptr;
    uint64_t write_id = 0;
    size_t op_index = 0;  // ops.size() for the flush and the landed message
    AmHeader header;
  };

  struct RecvContext {
    Impl* impl = nullptr;
    TransferTag tag = 0;
  };

  struct PendingRecv {
    void* desc = nullptr;
    void* dest = nullptr;
    size_t bytes = 0;
    TransferTag tag = 0;
  };

  // Starts ucp_ep_close_nbx when the endpoint is released; the close
  // completes on the progress thread (Impl::closing_).
  // (No default member initializers: unique_ptr's default constructor needs
  // the deleter default-constructible inside this still-incomplete class; it
  // value-initializes it.)
  struct EpCloser {
    Impl* impl;
    bool force;
    void operator()(ucp_ep* ep) const { impl->StartClose(ep, force); }
  };
  using EpPtr = std::unique_ptr<ucp_ep, EpCloser>;

  struct Endpoint {
    std::string key;  // the peer's worker_address envelope
    PeerAddress address;
    std::string name;         // "host:pid"
    bool native_rma = false;  // an "rma" lane (RDMA): puts are native for any region
    bool watch_pid = false;   // MODE_NONE: the progress thread watches the peer's pid
    int active_writes = 0;
    EpPtr ep;  // declared before rkeys: members die in reverse, rkeys first
    absl::flat_hash_map<std::string, RemoteKey> rkeys;  // by packed rkey
  };

  // --- any thread ---------------------------------------------------------

  // False (and the task dropped) once the transport stops accepting work.
  bool Post(absl::AnyInvocable<void() &&> task) {
    absl::MutexLock lock(&mu_);
    if (!accepting_) {
      return false;
    }
    tasks_.push_back(std::move(task));
    ucp_worker_signal(signal_worker_);
    return true;
  }

  // Runs `fn` on the progress thread and waits for it (inline on it).
  absl::Status RunOnThread(absl::AnyInvocable<void() &&> fn) {
    if (std::this_thread::get_id() == thread_id_) {
      std::move(fn)();
      return absl::OkStatus();
    }
    auto done = std::make_shared<absl::Notification>();
    auto ran = std::make_shared<bool>(false);
    // The task is destroyed without running only if the transport shuts down
    // first; the cleanup still wakes the caller then.
    const bool posted = Post([fn = std::move(fn), done, ran,
                              wake = absl::Cleanup([done] { done->Notify(); })]() mutable {
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

  // --- progress thread ------------------------------------------------------

  void Run() {
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

  // Runs queued tasks; sets *stop when Shutdown was asked (the queue is then
  // closed, and the tasks still in it are run by Teardown).
  bool RunTasks(bool* stop) {
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

  absl::Status Init() {
    ucp_config_t* raw_config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &raw_config);
    if (s != UCS_OK) {
      return UcsError(s, "ucp_config_read", absl::StatusCode::kInternal);
    }
    ConfigPtr config(raw_config);
    if (!config_.ucx_tls.empty()) {
      s = ucp_config_modify(config.get(), "TLS", config_.ucx_tls.c_str());
      if (s != UCS_OK) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ucx_tls '", config_.ucx_tls, "' rejected by UCX: ", ucs_status_string(s)));
      }
    }
    if (!config_.ucx_net_devices.empty()) {
      s = ucp_config_modify(config.get(), "NET_DEVICES", config_.ucx_net_devices.c_str());
      if (s != UCS_OK) {
        return absl::InvalidArgumentError(
            absl::StrCat("ucx_net_devices '", config_.ucx_net_devices,
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

  // Pending writes end with kUnavailable; then endpoints, registrations, the
  // worker and the context go, in that order.
  void Teardown() {
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
              (now - start >= absl::Milliseconds(20) &&
               now - last_event >= absl::Milliseconds(5))) {
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
        FinishWrite(w.id, w.cancelled ? absl::CancelledError(
                                            absl::StrCat("write tag=", w.tag, " cancelled"))
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

  bool HasOutstanding() const {
    for (const auto& [id, w] : writes_) {
      if (w->outstanding > 0) {
        return true;
      }
    }
    return false;
  }

  bool WatchingPeers() const {
    for (const auto& [key, ep] : endpoints_) {
      if (ep->watch_pid && ep->active_writes > 0) {
        return true;
      }
    }
    return false;
  }

  absl::StatusOr<RegionDescriptor> RegisterRegionOnThread(void* base, uint64_t bytes) {
    const auto b = reinterpret_cast<uint64_t>(base);
    for (const auto& [rb, r] : regions_) {
      if (b < rb + r.bytes && rb < b + bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("RegisterRegion: [", b, ", +", bytes, ") overlaps a registered region"));
      }
    }
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = bytes;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(context_.get(), &mp, &memh);
    if (s != UCS_OK) {
      return UcsError(s, absl::StrCat("RegisterRegion: ucp_mem_map of ", bytes, " bytes"),
                      absl::StatusCode::kInternal);
    }
    return AddRegion(b, bytes, MemPtr(memh, MemDeleter{context_.get()}));
  }

  absl::StatusOr<AllocatedRegion> AllocateRegionOnThread(uint64_t bytes) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = nullptr;
    mp.length = bytes;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(context_.get(), &mp, &memh);
    if (s != UCS_OK) {
      return UcsError(s, absl::StrCat("AllocateRegion: ucp_mem_map of ", bytes, " bytes"),
                      absl::StatusCode::kResourceExhausted);
    }
    MemPtr mem(memh, MemDeleter{context_.get()});
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    s = ucp_mem_query(memh, &attr);
    if (s != UCS_OK || attr.address == nullptr || attr.length < bytes) {
      return UcsError(s == UCS_OK ? UCS_ERR_NO_MEMORY : s, "AllocateRegion: ucp_mem_query",
                      absl::StatusCode::kInternal);
    }
    const auto b = reinterpret_cast<uint64_t>(attr.address);
    ASSIGN_OR_RETURN(RegionDescriptor d, AddRegion(b, bytes, std::move(mem)));
    return AllocatedRegion{attr.address, std::move(d)};
  }

  // Packs the rkey of `mem` and records the region.
  absl::StatusOr<RegionDescriptor> AddRegion(uint64_t base, uint64_t bytes, MemPtr mem) {
    void* rkey_buf = nullptr;
    size_t rkey_size = 0;
    const ucs_status_t s = ucp_rkey_pack(context_.get(), mem.get(), &rkey_buf, &rkey_size);
    if (s != UCS_OK) {
      return UcsError(s, "ucp_rkey_pack", absl::StatusCode::kInternal);
    }
    RkeyBufferPtr packed(rkey_buf);
    RegionDescriptor d;
    d.worker_address = local_address_;
    d.rkey.assign(static_cast<const char*>(rkey_buf), rkey_size);
    d.base = base;
    d.bytes = bytes;
    regions_[base] = Region{bytes, std::move(mem)};
    return d;
  }

  absl::Status RegisterSourceOnThread(void* base, uint64_t bytes) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = bytes;
    ucp_mem_h memh = nullptr;
    const ucs_status_t s = ucp_mem_map(context_.get(), &mp, &memh);
    if (s != UCS_OK) {
      return UcsError(s, absl::StrCat("RegisterSource: ucp_mem_map of ", bytes, " bytes"),
                      absl::StatusCode::kInternal);
    }
    sources_.push_back(
        Source{reinterpret_cast<uint64_t>(base), bytes, MemPtr(memh, MemDeleter{context_.get()})});
    return absl::OkStatus();
  }

  ucp_mem_h SourceMemh(const void* p, uint64_t n) const {
    for (const Source& s : sources_) {
      if (Contains(s.base, s.bytes, p, n)) {
        return s.memh.get();
      }
    }
    return nullptr;
  }

  // The cached endpoint to the peer named by `key`, created on first use.
  absl::StatusOr<Endpoint*> GetEndpoint(const std::string& key) {
    auto it = endpoints_.find(key);
    if (it != endpoints_.end()) {
      return it->second.get();
    }
    ASSIGN_OR_RETURN(PeerAddress address, DecodePeerAddress(key));
    auto ep = std::make_unique<Endpoint>();
    ep->key = key;
    ep->name = address.identity.ToString();
    const bool same_host = internal::LocalIdentity().SameHostAs(address.identity);
    if (same_host && !internal::ProcessAlive(address.identity.pid, address.identity.start_time)) {
      return absl::UnavailableError(absl::StrCat("peer ", ep->name, " is not running"));
    }
    // UCX 1.13's shared-memory transports refuse MODE_PEER; on this host the
    // thread watches the peer's pid instead (see the header).
    ep->watch_pid = same_host && context_has_shm_;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(address.ucx_address.data());
    params.err_mode = ep->watch_pid ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &Impl::EpErrorCallback;
    params.err_handler.arg = this;
    ucp_ep_h handle = nullptr;
    const ucs_status_t s = ucp_ep_create(worker_.get(), &params, &handle);
    if (s != UCS_OK) {
      return UcsError(s, absl::StrCat("connect to peer ", ep->name));
    }
    ep->ep = EpPtr(handle, EpCloser{this, false});
    ep->address = std::move(address);
    const LaneInfo lanes =
        internal::ParseEndpointInfo(Capture([&](FILE* f) { ucp_ep_print_info(handle, f); }));
    ep->native_rma = lanes.native_rma;
    VLOG(1) << "UcxTransport: endpoint to " << ep->name << " over "
            << absl::StrJoin(lanes.transports, ",") << (lanes.native_rma ? " (rma lane)" : "")
            << (ep->watch_pid ? ", watching its pid" : "");
    {
      absl::MutexLock lock(&caps_mu_);
      caps_.transports = absl::StrJoin(lanes.transports, ",");
    }
    Endpoint* raw = ep.get();
    endpoint_by_handle_[handle] = raw;
    endpoints_[key] = std::move(ep);
    return raw;
  }

  absl::StatusOr<const RemoteKey*> GetRkey(Endpoint& ep, const RegionDescriptor& peer) {
    auto it = ep.rkeys.find(peer.rkey);
    if (it != ep.rkeys.end()) {
      return &it->second;
    }
    ucp_rkey_h rkey = nullptr;
    const ucs_status_t s = ucp_ep_rkey_unpack(ep.ep.get(), peer.rkey.data(), &rkey);
    if (s != UCS_OK) {
      return UcsError(s, absl::StrCat("unpack the rkey of peer ", ep.name),
                      absl::StatusCode::kInvalidArgument);
    }
    RemoteKey key;
    key.rkey.reset(rkey);
    void* local = nullptr;
    key.mapped = ucp_rkey_ptr(rkey, peer.base, &local) == UCS_OK;
    return &ep.rkeys.emplace(peer.rkey, std::move(key)).first->second;
  }

  void StartClose(ucp_ep_h ep, bool force) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
      closing_.push_back(r);
    } else if (UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) != UCS_ERR_CANCELED &&
               UCS_PTR_STATUS(r) != UCS_ERR_ENDPOINT_TIMEOUT &&
               UCS_PTR_STATUS(r) != UCS_ERR_CONNECTION_RESET) {
      VLOG(1) << "ucp_ep_close_nbx: " << ucs_status_string(UCS_PTR_STATUS(r));
    }
  }

  void ReapClosing() {
    std::vector<void*> still;
    for (void* r : closing_) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) {
        still.push_back(r);
      } else {
        ucp_request_free(r);
      }
    }
    closing_.swap(still);
  }

  void StartWrite(std::unique_ptr<PendingWrite> w) {
    if (stopping_) {
      std::move(w->done)(absl::UnavailableError(
          absl::StrCat("write tag=", w->tag, " to ", w->peer_name, ": transport shut down")));
      return;
    }
    if (cancelled_.Contains(w->tag)) {
      std::move(w->done)(absl::CancelledError(absl::StrCat("write tag=", w->tag, " cancelled")));
      return;
    }
    absl::StatusOr<Endpoint*> ep = GetEndpoint(w->peer.worker_address);
    if (!ep.ok()) {
      std::move(w->done)(Annotate(ep.status(), absl::StrCat("write tag=", w->tag)));
      return;
    }
    w->ep = *ep;
    if (config_.mode == "am") {
      w->use_am = true;
    } else {
      absl::StatusOr<const RemoteKey*> rkey = GetRkey(**ep, w->peer);
      if (!rkey.ok()) {
        std::move(w->done)(Annotate(rkey.status(), absl::StrCat("write tag=", w->tag)));
        return;
      }
      w->rkey = (*rkey)->rkey.get();
      // auto: put where it is native (an RDMA lane, or a region mapped here).
      w->use_am = config_.mode == "auto" && !(*ep)->native_rma && !(*rkey)->mapped;
    }
    if (w->use_am != last_use_am_) {
      last_use_am_ = w->use_am;
      absl::MutexLock lock(&caps_mu_);
      caps_.native_put = !w->use_am;
    }
    w->id = next_write_id_++;
    ++w->ep->active_writes;
    const uint64_t id = w->id;
    writes_[id] = std::move(w);
    Pump(id);
  }

  // Issues what the write can issue now; finishes it when nothing is left.
  void Pump(uint64_t id) {
    auto it = writes_.find(id);
    if (it == writes_.end()) {
      return;
    }
    PendingWrite& w = *it->second;
    while (true) {
      if (w.cancelled || !w.status.ok()) {
        if (w.outstanding == 0) {
          FinishWrite(id, w.cancelled ? absl::CancelledError(absl::StrCat(
                                            "write tag=", w.tag, " to ", w.peer_name, " cancelled"))
                                      : w.status);
        }
        return;
      }
      if (w.phase == Phase::kSending) {
        while (w.next_op < w.ops.size() && w.outstanding < kMaxInflightPerWrite && w.status.ok()) {
          IssueOp(w, w.next_op++);
        }
        if (!w.status.ok()) {
          continue;
        }
        if (w.next_op < w.ops.size() || w.outstanding > 0) {
          return;
        }
        if (w.total_bytes == 0) {
          FinishWrite(id, absl::OkStatus());
          return;
        }
        // Sent: flush for remote completion.
        w.phase = Phase::kFlushing;
        ucp_request_param_t p{};
        OpContext* ctx = NewContext(w, w.ops.size());
        SetSendCallback(p, ctx);
        Track(w, ctx, ucp_ep_flush_nbx(w.ep->ep.get(), &p), "flush");
        continue;
      }
      if (w.outstanding > 0) {
        return;
      }
      if (w.phase == Phase::kFlushing && !w.use_am) {
        // Puts are in the peer's memory: tell it how many bytes landed.
        w.phase = Phase::kLanding;
        OpContext* ctx = NewContext(w, w.ops.size());
        ctx->header.kind = AmKind::kLanded;
        ctx->header.tag = w.tag;
        ctx->header.region_base = w.peer.base;
        ctx->header.bytes = w.total_bytes;
        ucp_request_param_t p{};
        SetSendCallback(p, ctx);
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_AM_SEND_FLAG_EAGER;
        Track(
            w, ctx,
            ucp_am_send_nbx(w.ep->ep.get(), kAmId, &ctx->header, sizeof(AmHeader), nullptr, 0, &p),
            "landed notice");
        continue;
      }
      FinishWrite(id, absl::OkStatus());
      return;
    }
  }

  OpContext* NewContext(const PendingWrite& w, size_t op_index) {
    auto* ctx = new OpContext;
    ctx->impl = this;
    ctx->write_id = w.id;
    ctx->op_index = op_index;
    return ctx;
  }

  static void SetSendCallback(ucp_request_param_t& p, OpContext* ctx) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &Impl::SendCallback;
    p.user_data = ctx;
  }

  void IssueOp(PendingWrite& w, size_t i) {
    const WriteOp& op = w.ops[i];
    if (op.bytes == 0) {
      return;
    }
    OpContext* ctx = NewContext(w, i);
    ucp_request_param_t p{};
    SetSendCallback(p, ctx);
    if (ucp_mem_h memh = SourceMemh(op.src, op.bytes); memh != nullptr) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = memh;
    }
    void* r;
    if (w.use_am) {
      ctx->header.kind = AmKind::kData;
      ctx->header.tag = w.tag;
      ctx->header.region_base = w.peer.base;
      ctx->header.offset = op.remote_offset;
      ctx->header.bytes = op.bytes;
      r = ucp_am_send_nbx(w.ep->ep.get(), kAmId, &ctx->header, sizeof(AmHeader), op.src, op.bytes,
                          &p);
    } else {
      r = ucp_put_nbx(w.ep->ep.get(), op.src, op.bytes, w.peer.base + op.remote_offset, w.rkey, &p);
    }
    Track(w, ctx, r, w.use_am ? "am send" : "put");
  }

  // Accounts for a request UCX returned: in flight, done, or failed.
  void Track(PendingWrite& w, OpContext* ctx, void* r, const char* what) {
    if (UCS_PTR_IS_PTR(r)) {
      ++w.outstanding;
      w.requests.insert(r);
      live_sends_.insert(ctx);
      return;
    }
    const size_t i = ctx->op_index;
    delete ctx;
    if (UCS_PTR_IS_ERR(r) && w.status.ok()) {
      w.status = UcsError(UCS_PTR_STATUS(r), OpDescription(w, i, what));
    }
  }

  std::string OpDescription(const PendingWrite& w, size_t i, const char* what) const {
    if (i < w.ops.size()) {
      return absl::StrCat("write tag=", w.tag, " to ", w.peer_name, ": ", what, " op ", i, " of ",
                          w.ops.size(), " (", w.ops[i].bytes, " bytes at offset ",
                          w.ops[i].remote_offset, ")");
    }
    return absl::StrCat("write tag=", w.tag, " to ", w.peer_name, ": ", what);
  }

  static void SendCallback(void* request, ucs_status_t status, void* user_data) {
    auto* ctx = static_cast<OpContext*>(user_data);
    ctx->impl->OnSendDone(*ctx, request, status);
    ctx->impl->live_sends_.erase(ctx);
    delete ctx;
    ucp_request_free(request);
  }

  void OnSendDone(const OpContext& ctx, void* request, ucs_status_t status) {
    auto it = writes_.find(ctx.write_id);
    if (it == writes_.end()) {
      return;  // abandoned (peer failed or shutdown)
    }
    PendingWrite& w = *it->second;
    w.requests.erase(request);
    --w.outstanding;
    if (status != UCS_OK && w.status.ok() && !w.cancelled) {
      const char* what = ctx.op_index < w.ops.size()   ? (w.use_am ? "am send" : "put")
                         : w.phase == Phase::kFlushing ? "flush"
                                                       : "landed notice";
      w.status = UcsError(status, OpDescription(w, ctx.op_index, what));
    }
    dirty_writes_.push_back(ctx.write_id);
  }

  void FinishWrite(uint64_t id, absl::Status status) {
    auto it = writes_.find(id);
    if (it == writes_.end()) {
      return;
    }
    std::unique_ptr<PendingWrite> w = std::move(it->second);
    writes_.erase(it);
    if (w->ep != nullptr) {
      --w->ep->active_writes;
    }
    std::move(w->done)(std::move(status));
  }

  // Asks UCX to cancel the write's requests in flight (UCX 1.13 cancels
  // receives, not sends: mostly they just complete).
  void CancelRequests(PendingWrite& w) {
    const std::vector<void*> requests(w.requests.begin(), w.requests.end());
    for (void* r : requests) {
      ucp_request_cancel(worker_.get(), r);
    }
  }

  void CancelOnThread(TransferTag tag) {
    cancelled_.Add(tag);
    std::vector<uint64_t> ids;
    for (auto& [id, w] : writes_) {
      if (w->tag == tag) {
        w->cancelled = true;
        CancelRequests(*w);
        ids.push_back(id);
      }
    }
    for (uint64_t id : ids) {
      Pump(id);
    }
  }

  static void EpErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status) {
    static_cast<Impl*>(arg)->failed_endpoints_.emplace_back(ep, status);
  }

  // Fails every write to `ep` with kUnavailable and drops the endpoint (a
  // later write reconnects). Requests still in flight are abandoned: their
  // callbacks find no write.
  void FailEndpoint(Endpoint* ep, const absl::Status& error) {
    std::vector<uint64_t> ids;
    for (auto& [id, w] : writes_) {
      if (w->ep == ep) {
        ids.push_back(id);
      }
    }
    for (uint64_t id : ids) {
      FinishWrite(id, error);
    }
    ep->rkeys.clear();
    ep->ep.get_deleter().force = true;
    endpoint_by_handle_.erase(ep->ep.get());
    const std::string key = ep->key;
    endpoints_.erase(key);  // closes it
  }

  void CheckPeers() {
    std::vector<Endpoint*> dead;
    for (auto& [key, ep] : endpoints_) {
      if (ep->watch_pid && ep->active_writes > 0 &&
          !internal::ProcessAlive(ep->address.identity.pid, ep->address.identity.start_time)) {
        dead.push_back(ep.get());
      }
    }
    for (Endpoint* ep : dead) {
      FailEndpoint(ep, absl::UnavailableError(absl::StrCat("peer ", ep->name, " exited")));
    }
  }

  // Work recorded by UCX callbacks during ucp_worker_progress. True if any.
  bool ProcessEvents() {
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

  // --- receiver side ----------------------------------------------------------

  static ucs_status_t AmRecvCallback(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param) {
    return static_cast<Impl*>(arg)->OnActiveMessage(header, header_length, data, length,
                                                    param->recv_attr);
  }

  ucs_status_t OnActiveMessage(const void* header, size_t header_length, void* data, size_t length,
                               uint64_t recv_attr) {
    const bool rndv = (recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    AmHeader h;
    if (header_length != sizeof(AmHeader)) {
      LOG_EVERY_N(WARNING, 100) << "UcxTransport: dropped a message with a " << header_length
                                << "-byte header";
      return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    std::memcpy(&h, header, sizeof(h));
    if (h.magic != kAmMagic) {
      LOG_EVERY_N(WARNING, 100) << "UcxTransport: dropped a message with a bad magic";
      return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    if (h.kind == AmKind::kLanded) {
      AddReceived(h.tag, h.bytes);  // ignored for a refused tag
      return UCS_OK;
    }
    auto it = regions_.find(h.region_base);
    if (h.kind != AmKind::kData || it == regions_.end() || h.bytes != length ||
        h.offset > it->second.bytes || h.bytes > it->second.bytes - h.offset) {
      LOG_EVERY_N(WARNING, 100) << "UcxTransport: rejected " << length << " bytes for tag " << h.tag
                                << " at offset " << h.offset << " (not inside a registered region)";
      return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    if (!BeginReceive(h.tag)) {
      VLOG(1) << "UcxTransport: refused " << length << " bytes for refused tag " << h.tag;
      return rndv ? UCS_ERR_CANCELED : UCS_OK;
    }
    void* dest = reinterpret_cast<uint8_t*>(h.region_base) + h.offset;
    if (rndv) {
      // Received after ucp_worker_progress returns (no UCX calls from inside
      // a callback).
      pending_recvs_.push_back(PendingRecv{data, dest, length, h.tag});
      return UCS_INPROGRESS;
    }
    std::memcpy(dest, data, length);
    EndReceive(h.tag, length, /*ok=*/true);
    return UCS_OK;
  }

  void StartReceive(const PendingRecv& r) {
    auto* ctx = new RecvContext{this, r.tag};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &Impl::RecvCallback;
    p.user_data = ctx;
    void* req = ucp_am_recv_data_nbx(worker_.get(), r.desc, r.dest, r.bytes, &p);
    if (UCS_PTR_IS_PTR(req)) {
      ++inflight_receives_;
      live_receives_.insert(ctx);
      return;  // RecvCallback counts it
    }
    delete ctx;
    if (UCS_PTR_IS_ERR(req)) {
      LOG_EVERY_N(WARNING, 100) << "UcxTransport: receive of " << r.bytes << " bytes for tag "
                                << r.tag << " failed: " << ucs_status_string(UCS_PTR_STATUS(req));
      EndReceive(r.tag, 0, /*ok=*/false);
      return;
    }
    EndReceive(r.tag, r.bytes, /*ok=*/true);
  }

  static void RecvCallback(void* request, ucs_status_t status, size_t length, void* user_data) {
    auto* ctx = static_cast<RecvContext*>(user_data);
    --ctx->impl->inflight_receives_;
    ctx->impl->live_receives_.erase(ctx);
    ctx->impl->EndReceive(ctx->tag, length, status == UCS_OK);
    if (status != UCS_OK) {
      VLOG(1) << "UcxTransport: receive for tag " << ctx->tag
              << " failed: " << ucs_status_string(status);
    }
    delete ctx;
    ucp_request_free(request);
  }

  void AddReceived(TransferTag tag, uint64_t bytes) {
    absl::MutexLock lock(&received_mu_);
    if (!refused_.Contains(tag)) {
      received_[tag] += bytes;
    }
  }

  // A receive into the region starts (false: the tag is refused, drop the
  // data) and ends; Receiving(tag) is true in between.
  bool BeginReceive(TransferTag tag) {
    absl::MutexLock lock(&received_mu_);
    if (refused_.Contains(tag)) {
      return false;
    }
    ++receiving_[tag];
    return true;
  }
  void EndReceive(TransferTag tag, uint64_t bytes, bool ok) {
    absl::MutexLock lock(&received_mu_);
    if (ok && !refused_.Contains(tag)) {
      received_[tag] += bytes;
    }
    auto it = receiving_.find(tag);
    if (it != receiving_.end() && --it->second == 0) {
      receiving_.erase(it);
    }
  }

  struct Source {
    uint64_t base = 0;
    uint64_t bytes = 0;
    MemPtr memh;
  };

  const TransportConfig config_;

  // Task queue: any thread posts, the progress thread runs.
  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool accepting_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  ucp_worker_h signal_worker_ ABSL_GUARDED_BY(mu_) = nullptr;  // set while the worker lives

  mutable absl::Mutex caps_mu_;
  Capabilities caps_ ABSL_GUARDED_BY(caps_mu_);

  mutable absl::Mutex received_mu_;
  absl::flat_hash_map<TransferTag, uint64_t> received_ ABSL_GUARDED_BY(received_mu_);
  absl::flat_hash_map<TransferTag, int> receiving_ ABSL_GUARDED_BY(received_mu_);
  internal::CancelledTags refused_ ABSL_GUARDED_BY(received_mu_){kMaxRefusedTags};

  absl::Mutex join_mu_;  // serializes joins of thread_
  std::thread thread_;
  std::thread::id thread_id_;  // written by Start() before init_done_ is awaited
  absl::Notification init_done_;
  absl::Status init_status_;  // written by the thread before init_done_

  // Progress thread only (written during Init before any other thread reads).
  ContextPtr context_;
  WorkerPtr worker_;
  ScopedFd epoll_fd_;
  std::string local_address_;
  bool context_has_shm_ = false;
  bool stopping_ = false;
  bool last_use_am_ = false;   // the mode of the latest write, as caps_.native_put says
  int inflight_receives_ = 0;  // ucp_am_recv_data_nbx requests in flight
  // Callback arguments of requests in flight (freed by their callbacks, or
  // at teardown for requests UCX never completes).
  absl::flat_hash_set<OpContext*> live_sends_;
  absl::flat_hash_set<RecvContext*> live_receives_;
  std::map<uint64_t, Region> regions_;  // by base
  std::vector<Source> sources_;
  absl::flat_hash_map<std::string, std::unique_ptr<Endpoint>> endpoints_;  // by address
  absl::flat_hash_map<ucp_ep_h, Endpoint*> endpoint_by_handle_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<PendingWrite>> writes_;
  uint64_t next_write_id_ = 1;
  internal::CancelledTags cancelled_{kMaxCancelledTags};
  std::vector<void*> closing_;  // ucp_ep_close_nbx requests in flight
  // Recorded by UCX callbacks, handled after ucp_worker_progress returns.
  std::vector<PendingRecv> pending_recvs_;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> failed_endpoints_;
  std::vector<uint64_t> dirty_writes_;
};

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

}  // namespace tandem::kvtransfer
