#pragma once
// UcxTransport: the KvTransport over UCX (libucp). UCX picks the wire: RDMA
// verbs, shared memory (sysv/posix + cma) or TCP; this class picks how to use
// it, per write:
//
//  - put mode: ucp_put_nbx per op, then ucp_ep_flush_nbx (remote
//    completion), then a small active message telling the receiver how many
//    bytes of the tag landed. The receiver cannot observe an RMA write, so
//    in put mode ReceivedBytes(tag) advances once per Write, by the Write's
//    total, only after the flush confirmed the bytes are in its memory.
//  - am mode: ucp_am_send_nbx per op with a header {tag, region, offset,
//    bytes}; the receiver's handler copies eager data into the region, or for
//    rendezvous receives it straight into region base + offset
//    (ucp_am_recv_data_nbx, zero-copy), and counts the bytes when they are
//    there. ReceivedBytes(tag) advances per op.
//  - auto: put where UCX does RMA natively: the endpoint has an "rma" lane
//    (RDMA verbs; read from ucp_ep_print_info's lane table, as UCX 1.13 has
//    no ucp_ep_query for transports), or the peer's region is mapped here
//    (ucp_rkey_ptr succeeds: the receiver got it from AllocateRegion, in
//    shared memory, so a put is a memcpy). Otherwise am: over tcp, and over
//    shared memory into a region UCX did not allocate, UCX 1.13 emulates
//    puts with active messages of its own (sysv/posix/cma have no put).
//    Emulated puts are slower than am and, worse, their receiver aborts
//    ("Fatal: unexpected error" in ucp_put_handler) if a sender dies
//    mid-put: mode "put" without a native path is for tests and benchmarks.
//
// Peer failure. UCX 1.13's shared-memory transports do not support
// UCP_ERR_HANDLING_MODE_PEER (an endpoint asking for it falls back to tcp, or
// is unreachable when only sm is allowed), so: a peer on another host, or when
// this context has no shared-memory transport, gets MODE_PEER and an
// endpoint error handler (a dead peer fails its writes with kUnavailable as
// soon as UCX notices: at once for tcp); a peer on this host (same boot id and
// pid namespace) gets MODE_NONE, and the progress thread watches its process
// (pid plus start time, from the peer's address) every 100 ms while writes to
// it are pending, failing them with kUnavailable when it is gone. Requests to
// a dead MODE_NONE peer cannot be reclaimed: they stay with UCX (which warns
// at shutdown) and their sources are never read again.
// Known gap (UCX 1.13): a sender killed while writing an active message into
// a receiver's shared-memory FIFO can leave the FIFO stalled for every later
// sender on that host; the receiver's deadlines see it, nothing here repairs
// it. Puts into an AllocateRegion region send only small notices that way.
//
// Threads: one progress thread owns the ucp_context, the ucp_worker, every
// endpoint, rkey and memory registration; public methods post closures to it
// (waking it with ucp_worker_signal) and, for RegisterRegion, AllocateRegion
// and RegisterSource, wait for the answer. It polls while requests are in
// flight (UCX does not signal a sender waiting for FIFO room or a
// rendezvous reply) and for 2 ms after the last activity, yielding the CPU
// between polls, then sleeps in epoll on the worker's event fd
// (ucp_worker_arm). All methods are thread-safe; `done` callbacks run on the
// progress thread.
//
// Owned by its creator (one per process is the intended use, though tests run
// two side by side); the destructor runs Shutdown().

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer {

class UcxTransport final : public KvTransport {
 public:
  // Creates the UCX context (UCP_FEATURE_RMA | AM | WAKEUP, with
  // config.ucx_tls / ucx_net_devices applied) and worker, and starts the
  // progress thread. InvalidArgument for a bad mode; Unavailable when UCX
  // cannot start (no usable transport, e.g. a misspelt ucx_tls).
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(const TransportConfig& config);

  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  // name "ucx"; native_put: mode "put" -> true, "am" -> false, "auto" -> the
  // decision for the most recent write, or before any, whether this context
  // has a native-RMA transport (rc/dc verbs); transports: the
  // lanes of the most recently connected peer (e.g. "sysv,posix,cma" or
  // "tcp"), or before any, every transport the context may use.
  Capabilities capabilities() const override;

  // ucp_mem_map + ucp_rkey_pack. May be called more than once (several
  // regions); an op header names its region by base. InvalidArgument for a
  // null or empty region, Internal when UCX refuses to map it.
  absl::StatusOr<RegionDescriptor> RegisterRegion(void* base, uint64_t bytes) override;
  // ucp_mem_map(UCP_MEM_MAP_ALLOCATE): in shared memory (sysv/posix) when
  // the context has it, so same-host senders put with a memcpy (see auto).
  // Unmapped, and so freed, at Shutdown().
  absl::StatusOr<AllocatedRegion> AllocateRegion(uint64_t bytes) override;
  absl::Status RegisterSource(void* base, uint64_t bytes) override;

  // Any thread. Validates `peer` and the ops (InvalidArgument) before
  // posting; on the progress thread the endpoint is created (or found in the
  // cache) and the ops are issued, at most 64 in flight per write.
  // done: OK; kUnavailable (peer gone, network error, shutdown; the message
  // names the peer, the op and the UCX error); kCancelled; kInvalidArgument
  // when the receiver rejects an op (its region does not match `peer`).
  absl::Status Write(const RegionDescriptor& peer, TransferTag tag, std::vector<WriteOp> ops,
                     absl::AnyInvocable<void(absl::Status) &&> done) override;

  // Pending writes with `tag` stop issuing ops, in-flight UCX requests are
  // cancelled where UCX can (ucp_request_cancel), and done(kCancelled) runs
  // once UCX no longer uses their sources. Later writes with `tag` complete
  // with kCancelled too, until Forget(tag) (the most recent 4096 cancelled
  // tags are remembered).
  void Cancel(TransferTag tag) override;

  // See the class comment for what a put-mode write counts.
  uint64_t ReceivedBytes(TransferTag tag) const override;
  void Forget(TransferTag tag) override;
  // Refused data: eager active messages are dropped in the handler,
  // rendezvous ones rejected (the sender's write fails), put-mode "landed"
  // notices ignored; puts still land (see KvTransport::Refuse).
  void Refuse(TransferTag tag) override;
  bool Receiving(TransferTag tag) const override;

  // Stops accepting writes, waits up to 2 s for UCX requests in flight, then
  // completes every pending write with kUnavailable, closes the endpoints
  // (flush, then force after 1 s), unmaps memory, destroys the worker and
  // context and joins the thread. Idempotent.
  void Shutdown() override;

 private:
  class Impl;
  explicit UcxTransport(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::kvtransfer
