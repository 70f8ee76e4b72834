#pragma once
// What every KvTransport implementation checks the same way: Write()'s
// arguments, and which tags were cancelled.

#include <cstddef>
#include <deque>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer::internal {

// InvalidArgument naming the op: a null source with bytes > 0, or a range
// outside [0, peer.bytes); also for a peer region that is null or empty.
absl::Status ValidateWrite(const RegionDescriptor& peer, absl::Span<const WriteOp> ops);

// The most recently cancelled tags (at most `capacity`), so writes posted
// after Cancel(tag) fail with kCancelled too. Not thread-safe.
class CancelledTags {
 public:
  explicit CancelledTags(size_t capacity = 4096) : capacity_(capacity) {}

  void Add(TransferTag tag);
  void Remove(TransferTag tag);
  bool Contains(TransferTag tag) const { return tags_.contains(tag); }

 private:
  size_t capacity_;
  absl::flat_hash_set<TransferTag> tags_;
  std::deque<TransferTag> order_;  // tags_, oldest first
};

}  // namespace tandem::kvtransfer::internal
