#pragma once
// The KV layout descriptor that travels with every reservation, and the pool
// geometry both ends use to turn (layer, K|V, block) into a byte offset.
//
// Pool layout (the engine's, see common/engine/engine.h): one contiguous region,
// [layer][K, V][block][kv_head][slot][head_dim]; a block of one layer's K (or
// V) is block_bytes() contiguous bytes, and consecutive block ids of one
// layer's K are adjacent, so a run of consecutive ids is one contiguous range.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/format/ggml_type.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer {

struct KvLayout {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  engine::GgmlType dtype = engine::GgmlType::kF32;
  uint64_t model_id = 0;

  // One block of one layer's K (or V): block_size * num_kv_heads * head_dim *
  // element size (4 for F32, 2 for F16; 0 for a dtype Validate() rejects).
  int64_t block_bytes() const;
  std::string ToString() const;  // "layers=22 kv_heads=4 head_dim=64 block=16 dtype=F16 model=0x…"
  bool operator==(const KvLayout& o) const = default;
  // InvalidArgument naming the field: non-positive sizes, dtype not F32/F16.
  absl::Status Validate() const;
};

// FailedPrecondition naming both layouts when they differ.
absl::Status CheckLayoutsMatch(const KvLayout& local, const KvLayout& remote);

struct PoolGeometry {
  KvLayout layout;
  int32_t num_blocks = 0;

  int64_t pool_bytes() const;
  // Byte offset of block `block` of layer `layer`, K (kv = 0) or V (kv = 1):
  // ((layer * 2 + kv) * num_blocks + block) * block_bytes. No bounds checks
  // (callers validate ids once, see CoalesceRuns).
  int64_t Offset(int32_t layer, int kv, int32_t block) const;

  // InvalidArgument unless the layout is valid and num_blocks > 0.
  absl::Status Validate() const;
};

// The copies that move blocks `local_ids[i]` of one layer's K (kv = 0) or V
// (kv = 1) from the local pool at `local_base` into blocks `remote_ids[i]` of
// the peer's pool, as few ops as possible: a run where both the local and the
// remote ids are consecutive (id[i+1] == id[i] + 1 on both sides) becomes one
// op; e.g. local [3,4,5,9] -> remote [10,11,12,20] gives two ops (3..5 -> 10..12
// and 9 -> 20), while remote [10,11,13,20] breaks the run after 4.
// `remote_offset`s are relative to the peer's region (its pool base).
// InvalidArgument when the id lists differ in length, an id is outside its
// pool, layer or kv is out of range; FailedPrecondition when the two
// geometries' layouts differ (message names both). Pure; any thread.
absl::StatusOr<std::vector<WriteOp>> CoalesceRuns(const PoolGeometry& local, const void* local_base,
                                                  const PoolGeometry& remote, int32_t layer, int kv,
                                                  absl::Span<const int32_t> local_ids,
                                                  absl::Span<const int32_t> remote_ids);

}  // namespace tandem::kvtransfer
