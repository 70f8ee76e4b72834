#pragma once
// LoopbackTransport: a KvTransport inside one process, for unit tests of its
// callers. RegisterRegion() enters the region in a process-wide registry
// under a generated address ("loopback:<n>", one per transport); Write()
// looks the peer up there and memcpys on this transport's own progress
// thread, so writes between two LoopbackTransports behave as between two
// workers: asynchronous, counted by the receiver's ReceivedBytes(), failing
// with kUnavailable once the receiver has shut down.
//
// Thread-safe; `done` runs on the sender's progress thread. Writes of one
// transport run one at a time, in Write() order.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer {

namespace internal {
class CancelledTags;
struct LoopbackSink;
class TaskThread;
}  // namespace internal

class LoopbackTransport final : public KvTransport {
 public:
  LoopbackTransport();
  ~LoopbackTransport() override;  // Shutdown()
  LoopbackTransport(const LoopbackTransport&) = delete;
  LoopbackTransport& operator=(const LoopbackTransport&) = delete;

  // name "loopback", native_put true (a direct copy), transports "memcpy".
  Capabilities capabilities() const override;
  // InvalidArgument for a null or empty region or one overlapping another.
  absl::StatusOr<RegionDescriptor> RegisterRegion(void* base, uint64_t bytes) override;
  // Zeroed heap memory owned by the transport, freed at destruction.
  absl::StatusOr<AllocatedRegion> AllocateRegion(uint64_t bytes) override;
  absl::Status RegisterSource(void* base, uint64_t bytes) override;  // nothing to do
  // InvalidArgument for a peer that is no loopback address or bad ops. done:
  // OK, kCancelled, kUnavailable (the receiver is gone or this transport shut
  // down), kInvalidArgument (no registered region of the receiver holds the
  // target range).
  absl::Status Write(const RegionDescriptor& peer, TransferTag tag, std::vector<WriteOp> ops,
                     absl::AnyInvocable<void(absl::Status) &&> done) override;
  // Queued writes with `tag` (and later ones, until Forget) end kCancelled.
  void Cancel(TransferTag tag) override;
  uint64_t ReceivedBytes(TransferTag tag) const override;
  void Forget(TransferTag tag) override;
  void Refuse(TransferTag tag) override;
  // Copies run under the sink's lock, so nothing is ever in flight once
  // Refuse() returned.
  bool Receiving(TransferTag /*tag*/) const override { return false; }
  // Leaves the registry (writers get kUnavailable; a copy into this
  // transport's region finishes first), then completes queued writes with
  // kUnavailable and joins the thread.
  void Shutdown() override;

 private:
  const std::shared_ptr<internal::LoopbackSink> sink_;  // co-owned by the registry
  absl::Mutex mu_;
  const std::unique_ptr<internal::CancelledTags> cancelled_ ABSL_PT_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<uint8_t[]>> allocated_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<internal::TaskThread> thread_;  // last: stopped before the fields above go
};

}  // namespace tandem::kvtransfer
