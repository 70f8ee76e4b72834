#pragma once
// UcxTransport's implementation, shared by the files that define it:
//  - kvtransfer/ucx_transport.cc: the public forwarding, the progress
//    thread (task queue, polling and sleeping), Init and Teardown;
//  - internal/ucx_endpoints.cc: endpoints to peers, their rkeys, closing
//    them, and peer failure (UCX error callback, pid watch);
//  - internal/ucx_sender.cc: writes (put and am modes), sources, Cancel;
//  - internal/ucx_receiver.cc: regions, the active message handler and the
//    receive-side accounting (ReceivedBytes, Refuse, Receiving).
// Every member belongs to the progress thread except those guarded by mu_,
// caps_mu_ and received_mu_ and the thread's own handle. Include only from
// those files.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/fd.h"
#include "kvtransfer/internal/cancelled_tags.h"
#include "kvtransfer/internal/ucx_handles.h"
#include "kvtransfer/internal/ucx_util.h"
#include "kvtransfer/transport.h"
#include "kvtransfer/ucx_transport.h"
#include "ucp/api/ucp.h"

namespace tandem::kvtransfer {
namespace internal {

// Active message id of every transport's handler (UCP keeps handlers in an
// array indexed by id, so it stays small).
inline constexpr unsigned kAmId = 17;
inline constexpr uint32_t kAmMagic = 0x4b565431;  // "KVT1"
inline constexpr size_t kMaxCancelledTags = 4096;
// Refused tags remembered by a receiver (8 bytes and a deque slot each): a
// decode worker refuses one per reservation that ends before its import.
inline constexpr size_t kMaxRefusedTags = 65536;

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

}  // namespace internal

class UcxTransport::Impl {
 public:
  explicit Impl(TransportConfig config) : config_(std::move(config)) {}
  ~Impl() { Shutdown(); }

  // Starts the thread and creates the UCX objects on it.
  absl::Status Start();

  // UcxTransport's methods of the same names (see kvtransfer/ucx_transport.h).
  Capabilities capabilities() const;
  absl::StatusOr<RegionDescriptor> RegisterRegion(void* base, uint64_t bytes);
  absl::StatusOr<AllocatedRegion> AllocateRegion(uint64_t bytes);
  absl::Status RegisterSource(void* base, uint64_t bytes);
  absl::Status Write(const RegionDescriptor& peer, TransferTag tag, std::vector<WriteOp> ops,
                     absl::AnyInvocable<void(absl::Status) &&> done);
  void Cancel(TransferTag tag);
  uint64_t ReceivedBytes(TransferTag tag) const;
  void Forget(TransferTag tag);
  void Refuse(TransferTag tag);
  bool Receiving(TransferTag tag) const;
  void Shutdown();

 private:
  struct Region {
    uint64_t bytes = 0;
    internal::MemPtr memh;
  };

  // A RegisterSource() mapping: ops whose source lies inside pass its memh.
  struct Source {
    uint64_t base = 0;
    uint64_t bytes = 0;
    internal::MemPtr memh;
  };

  struct Endpoint;

  struct RemoteKey {
    internal::RkeyPtr rkey;
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
    internal::AmHeader header;
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
    internal::PeerAddress address;
    std::string name;         // "host:pid"
    bool native_rma = false;  // an "rma" lane (RDMA): puts are native for any region
    bool watch_pid = false;   // MODE_NONE: the progress thread watches the peer's pid
    int active_writes = 0;
    EpPtr ep;  // declared before rkeys: members die in reverse, rkeys first
    absl::flat_hash_map<std::string, RemoteKey> rkeys;  // by packed rkey
  };

  // --- any thread (ucx_transport.cc) ---

  // False (and the task dropped) once the transport stops accepting work.
  bool Post(absl::AnyInvocable<void() &&> task);

  // Runs `fn` on the progress thread and waits for it (inline on it).
  absl::Status RunOnThread(absl::AnyInvocable<void() &&> fn);

  // --- progress thread: lifecycle (ucx_transport.cc) ---

  void Run();

  // Runs queued tasks; sets *stop when Shutdown was asked (the queue is then
  // closed, and the tasks still in it are run by Teardown).
  bool RunTasks(bool* stop);

  absl::Status Init();

  // Pending writes end with kUnavailable; then endpoints, registrations, the
  // worker and the context go, in that order.
  void Teardown();

  bool HasOutstanding() const;

  bool WatchingPeers() const;

  // Work recorded by UCX callbacks during ucp_worker_progress. True if any.
  bool ProcessEvents();

  // --- progress thread: endpoints (ucx_endpoints.cc) ---

  // The cached endpoint to the peer named by `key`, created on first use.
  absl::StatusOr<Endpoint*> GetEndpoint(const std::string& key);

  absl::StatusOr<const RemoteKey*> GetRkey(Endpoint& ep, const RegionDescriptor& peer);

  void StartClose(ucp_ep_h ep, bool force);

  void ReapClosing();

  static void EpErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status);

  // Fails every write to `ep` with kUnavailable and drops the endpoint (a
  // later write reconnects). Requests still in flight are abandoned: their
  // callbacks find no write.
  void FailEndpoint(Endpoint* ep, const absl::Status& error);

  void CheckPeers();

  // --- sender side (ucx_sender.cc) ---

  absl::Status RegisterSourceOnThread(void* base, uint64_t bytes);

  ucp_mem_h SourceMemh(const void* p, uint64_t n) const;

  void StartWrite(std::unique_ptr<PendingWrite> w);

  // Issues what the write can issue now; finishes it when nothing is left.
  void Pump(uint64_t id);

  OpContext* NewContext(const PendingWrite& w, size_t op_index);

  static void SetSendCallback(ucp_request_param_t& p, OpContext* ctx);

  void IssueOp(PendingWrite& w, size_t i);

  // Accounts for a request UCX returned: in flight, done, or failed.
  void Track(PendingWrite& w, OpContext* ctx, void* r, const char* what);

  std::string OpDescription(const PendingWrite& w, size_t i, const char* what) const;

  static void SendCallback(void* request, ucs_status_t status, void* user_data);

  void OnSendDone(const OpContext& ctx, void* request, ucs_status_t status);

  void FinishWrite(uint64_t id, absl::Status status);

  // Asks UCX to cancel the write's requests in flight (UCX 1.13 cancels
  // receives, not sends: mostly they just complete).
  void CancelRequests(PendingWrite& w);

  void CancelOnThread(TransferTag tag);

  // --- receiver side (ucx_receiver.cc) ---

  absl::StatusOr<RegionDescriptor> RegisterRegionOnThread(void* base, uint64_t bytes);

  absl::StatusOr<AllocatedRegion> AllocateRegionOnThread(uint64_t bytes);

  // Packs the rkey of `mem` and records the region.
  absl::StatusOr<RegionDescriptor> AddRegion(uint64_t base, uint64_t bytes, internal::MemPtr mem);

  static ucs_status_t AmRecvCallback(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);

  ucs_status_t OnActiveMessage(const void* header, size_t header_length, void* data, size_t length,
                               uint64_t recv_attr);

  void StartReceive(const PendingRecv& r);

  static void RecvCallback(void* request, ucs_status_t status, size_t length, void* user_data);

  void AddReceived(TransferTag tag, uint64_t bytes);

  // A receive into the region starts (false: the tag is refused, drop the
  // data) and ends; Receiving(tag) is true in between.
  bool BeginReceive(TransferTag tag);

  void EndReceive(TransferTag tag, uint64_t bytes, bool ok);

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
  internal::CancelledTags refused_ ABSL_GUARDED_BY(received_mu_){internal::kMaxRefusedTags};

  absl::Mutex join_mu_;  // serializes joins of thread_
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);
  std::thread::id thread_id_;  // written by Start() before init_done_ is awaited
  absl::Notification init_done_;
  absl::Status init_status_;  // written by the thread before init_done_

  // Progress thread only (written during Init before any other thread reads).
  internal::ContextPtr context_;
  internal::WorkerPtr worker_;
  base::UniqueFd epoll_fd_;
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
  internal::CancelledTags cancelled_{internal::kMaxCancelledTags};
  std::vector<void*> closing_;  // ucp_ep_close_nbx requests in flight
  // Recorded by UCX callbacks, handled after ucp_worker_progress returns.
  std::vector<PendingRecv> pending_recvs_;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> failed_endpoints_;
  std::vector<uint64_t> dirty_writes_;
};

}  // namespace tandem::kvtransfer
