#pragma once
// CancelledTags: a bounded set of transfer tags remembering the most recent
// ones. Transports keep the tags cancelled on the sender side (so writes
// posted after Cancel(tag) fail with kCancelled too) and the tags refused on
// the receiver side in one.

#include <cstddef>
#include <deque>

#include "absl/container/flat_hash_set.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer::internal {

// The most recently added tags (at most `capacity`; the oldest is evicted
// first). Not thread-safe.
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
