#pragma once
// KvTransport: moves KV bytes from a prefill worker's memory into a decode
// worker's registered KV pool. UcxTransport is the real one (UCX picks RDMA
// verbs, shared memory or TCP); LoopbackTransport copies in process for unit
// tests of callers; FaultInjectingTransport wraps any to fail, drop or delay.
//
// Contract (every implementation):
//  - Thread-safe: any method may be called from any thread.
//  - Write(): `done` runs exactly once, on the transport's progress thread
//    (never inline in Write), also after Cancel() and at shutdown (with
//    kCancelled / kUnavailable). OK means the bytes are in the peer's memory
//    as far as the transport can tell the sender; the receiver learns of them
//    through ReceivedBytes() (see below), which a commit must wait for.
//  - Cancel() is best effort: writes already handed to the network may land.
//  - The receiving side counts bytes that arrived per transfer tag so a
//    decode worker can tell a commit whose data is still in flight from one
//    that is complete (emulated puts and active messages are processed by
//    the receiver's progress thread, asynchronously to gRPC).
//  - Write() returning an error (InvalidArgument for bad ops or peer,
//    Unavailable after Shutdown) means nothing was sent and `done` is
//    destroyed without running: the error is reported exactly once, by the
//    return value.
//  - `done` may call back into its transport (Write, Cancel, ...) but must
//    not destroy it; Shutdown() from a callback only asks the progress
//    thread to stop, and the owner's later Shutdown() or destructor joins it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::kvtransfer {

struct Capabilities {
  std::string name;         // "ucx", "loopback", ...
  bool native_put = false;  // RMA puts without emulation (shm, RDMA); else tagged/AM sends
  std::string transports;   // what the library picked, e.g. "sysv,cma" or "tcp"
};

// What a receiver hands out (inside a reservation) so senders can write into
// its registered region.
struct RegionDescriptor {
  std::string worker_address;  // opaque, transport-specific (UCX worker address)
  std::string rkey;            // opaque packed remote key
  uint64_t base = 0;           // remote virtual address of the region
  uint64_t bytes = 0;
};

// Memory a transport allocated and registered (AllocateRegion).
struct AllocatedRegion {
  void* base = nullptr;  // `descriptor.bytes` bytes, contents unspecified
  RegionDescriptor descriptor;
};

// One contiguous copy: `bytes` from local address `src` to offset
// `remote_offset` of the peer's region.
struct WriteOp {
  const void* src = nullptr;
  uint64_t remote_offset = 0;
  uint64_t bytes = 0;
};

using TransferTag = uint64_t;  // names a transfer on both sides (e.g. a reservation)

class KvTransport {
 public:
  virtual ~KvTransport() = default;

  virtual Capabilities capabilities() const = 0;

  // Registers [base, base+bytes) as the region peers write into (the decode
  // worker's KV pool, once). Returns the descriptor to hand to peers.
  virtual absl::StatusOr<RegionDescriptor> RegisterRegion(void* base, uint64_t bytes) = 0;

  // Allocates `bytes` and registers them as RegisterRegion() does. Prefer it
  // for the receiver's KV pool: UCX then places the region in shared memory
  // where it can, so a sender on the same host puts straight into it (a
  // memcpy: ~20 GB/s here, against ~2 GB/s for active messages and far less
  // for emulated puts into memory UCX did not allocate). The memory belongs
  // to the transport and stays valid until Shutdown(). InvalidArgument for 0
  // bytes; ResourceExhausted when the allocation fails.
  virtual absl::StatusOr<AllocatedRegion> AllocateRegion(uint64_t bytes) = 0;

  // Registers local source memory (the prefill worker's KV pool) so writes
  // from it can be zero-copy where the transport supports that. Optional:
  // Write() accepts unregistered sources too.
  virtual absl::Status RegisterSource(void* base, uint64_t bytes) = 0;

  // Writes `ops` into `peer`'s region, tagged `tag`. Ops out of the peer's
  // region bounds fail with InvalidArgument before anything is sent.
  virtual absl::Status Write(const RegionDescriptor& peer, TransferTag tag,
                             std::vector<WriteOp> ops,
                             absl::AnyInvocable<void(absl::Status) &&> done) = 0;

  // Best-effort cancel of every write with `tag`.
  virtual void Cancel(TransferTag tag) = 0;

  // Receiver side: bytes received so far for `tag` into this transport's
  // registered region; Forget(tag) drops the counter.
  virtual uint64_t ReceivedBytes(TransferTag tag) const = 0;
  virtual void Forget(TransferTag tag) = 0;

  // Receiver side: drops the counter of `tag` (as Forget) and refuses data
  // arriving for it from now on: message-mode writes for a refused tag are
  // never copied into the region (a bounded record of the most recently
  // refused tags is kept). RMA puts (native, or emulated inside UCX) cannot
  // be refused by the receiver, so memory they may still reach must stay
  // unused until the sender says it stopped (see DecodeEngine's fences).
  virtual void Refuse(TransferTag tag) = 0;
  // Receiver side: whether data for `tag` that was accepted before
  // Refuse(tag) is still being copied into the region.
  virtual bool Receiving(TransferTag tag) const = 0;

  // Stops the progress thread; pending writes complete with kUnavailable.
  // Idempotent; also run by the destructor.
  virtual void Shutdown() = 0;
};

struct TransportConfig {
  std::string kind = "ucx";  // "ucx" or "loopback"
  // UCX: "auto" (put where native, else active messages), "put" or "am".
  std::string mode = "auto";
  // UCX: the transports UCX may use, in UCX_TLS syntax ("sm", "tcp",
  // "rc,sm", ...), applied with ucp_config_modify. Empty: UCX's own default
  // (all transports, or the UCX_TLS environment variable if set).
  std::string ucx_tls;
  // UCX: the devices UCX may use, in UCX_NET_DEVICES syntax ("lo",
  // "mlx5_0:1", ...). Empty: UCX's own default.
  std::string ucx_net_devices;

  // InvalidArgument naming the field (unknown kind, unknown mode).
  absl::Status Validate() const;
};

// InvalidArgument for an unknown kind (listing valid ones).
absl::StatusOr<std::unique_ptr<KvTransport>> MakeTransport(const TransportConfig& config);

}  // namespace tandem::kvtransfer
