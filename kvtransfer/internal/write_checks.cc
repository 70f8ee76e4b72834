#include "kvtransfer/internal/write_checks.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::kvtransfer::internal {

absl::Status ValidateWrite(const RegionDescriptor& peer, absl::Span<const WriteOp> ops) {
  if (peer.base == 0 || peer.bytes == 0) {
    return absl::InvalidArgumentError("Write: the peer's region is null or empty");
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const WriteOp& op = ops[i];
    if (op.bytes > 0 && op.src == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("Write: op ", i, " has a null source"));
    }
    if (op.remote_offset > peer.bytes || op.bytes > peer.bytes - op.remote_offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("Write: op ", i, " [", op.remote_offset, ", ", op.remote_offset + op.bytes,
                       ") is outside the peer's region of ", peer.bytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::kvtransfer::internal
