#include "kvtransfer/kv_layout.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/engine/format/ggml_type.h"

namespace tandem::kvtransfer {
namespace {

int64_t ElementBytes(engine::GgmlType dtype) {
  switch (dtype) {
    case engine::GgmlType::kF32:
      return 4;
    case engine::GgmlType::kF16:
      return 2;
    default:
      return 0;
  }
}

}  // namespace

int64_t KvLayout::block_bytes() const {
  return static_cast<int64_t>(block_size) * num_kv_heads * head_dim * ElementBytes(dtype);
}

std::string KvLayout::ToString() const {
  return absl::StrFormat("layers=%d kv_heads=%d head_dim=%d block=%d dtype=%s model=0x%x",
                         num_layers, num_kv_heads, head_dim, block_size,
                         std::string(engine::GgmlTypeName(dtype)), model_id);
}

absl::Status KvLayout::Validate() const {
  if (num_layers <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: num_layers must be > 0, got ", num_layers));
  }
  if (num_kv_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: num_kv_heads must be > 0, got ", num_kv_heads));
  }
  if (head_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: head_dim must be > 0, got ", head_dim));
  }
  if (block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: block_size must be > 0, got ", block_size));
  }
  if (ElementBytes(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: dtype must be F32 or F16, got ", engine::GgmlTypeName(dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckLayoutsMatch(const KvLayout& local, const KvLayout& remote) {
  if (local == remote) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("KV layout mismatch: local {", local.ToString(),
                                                    "} vs remote {", remote.ToString(), "}"));
}

int64_t PoolGeometry::pool_bytes() const {
  return static_cast<int64_t>(layout.num_layers) * 2 * num_blocks * layout.block_bytes();
}

int64_t PoolGeometry::Offset(int32_t layer, int kv, int32_t block) const {
  return ((static_cast<int64_t>(layer) * 2 + kv) * num_blocks + block) * layout.block_bytes();
}

absl::Status PoolGeometry::Validate() const {
  RETURN_IF_ERROR(layout.Validate());
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PoolGeometry: num_blocks must be > 0, got ", num_blocks));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WriteOp>> CoalesceRuns(const PoolGeometry& local, const void* local_base,
                                                  const PoolGeometry& remote, int32_t layer, int kv,
                                                  absl::Span<const int32_t> local_ids,
                                                  absl::Span<const int32_t> remote_ids) {
  RETURN_IF_ERROR(base::Annotate(local.Validate(), "local pool"));
  RETURN_IF_ERROR(base::Annotate(remote.Validate(), "remote pool"));
  RETURN_IF_ERROR(CheckLayoutsMatch(local.layout, remote.layout));
  if (local_ids.size() != remote_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CoalesceRuns: ", local_ids.size(),
                                                   " local block ids but ", remote_ids.size(),
                                                   " remote ones"));
  }
  if (layer < 0 || layer >= local.layout.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CoalesceRuns: layer ", layer, " out of range [0, ", local.layout.num_layers, ")"));
  }
  if (kv != 0 && kv != 1) {
    return absl::InvalidArgumentError(absl::StrCat("CoalesceRuns: kv must be 0 or 1, got ", kv));
  }
  for (size_t i = 0; i < local_ids.size(); ++i) {
    if (local_ids[i] < 0 || local_ids[i] >= local.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("CoalesceRuns: local block id ", local_ids[i],
                                                     " out of range [0, ", local.num_blocks, ")"));
    }
    if (remote_ids[i] < 0 || remote_ids[i] >= remote.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("CoalesceRuns: remote block id ",
                                                     remote_ids[i], " out of range [0, ",
                                                     remote.num_blocks, ")"));
    }
  }

  const int64_t block_bytes = local.layout.block_bytes();
  const auto* base = static_cast<const uint8_t*>(local_base);
  std::vector<WriteOp> ops;
  size_t i = 0;
  while (i < local_ids.size()) {
    size_t j = i + 1;
    while (j < local_ids.size() && local_ids[j] == local_ids[j - 1] + 1 &&
           remote_ids[j] == remote_ids[j - 1] + 1) {
      ++j;
    }
    ops.push_back(WriteOp{
        .src = base + local.Offset(layer, kv, local_ids[i]),
        .remote_offset = static_cast<uint64_t>(remote.Offset(layer, kv, remote_ids[i])),
        .bytes = static_cast<uint64_t>(block_bytes) * (j - i),
    });
    i = j;
  }
  return ops;
}

}  // namespace tandem::kvtransfer
