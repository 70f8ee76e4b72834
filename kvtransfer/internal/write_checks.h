#pragma once
// What every KvTransport implementation checks the same way before it
// accepts a Write().

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer::internal {

// InvalidArgument naming the op: a null source with bytes > 0, or a range
// outside [0, peer.bytes); also for a peer region that is null or empty.
absl::Status ValidateWrite(const RegionDescriptor& peer, absl::Span<const WriteOp> ops);

}  // namespace tandem::kvtransfer::internal
