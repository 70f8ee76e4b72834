#pragma once
// Anonymous memory in transparent huge pages, for what a decode step streams
// end to end: the weights' load-time copies (engine::WeightMatrix).
//
// With 4 KiB pages every 4 KiB of a stream is a TLB miss and a boundary the
// hardware prefetchers stop at. On the Xeon of docs/benchmarks.md a Q4_0
// 5632x2048 matrix-vector product ran 1.3-1.5x faster from huge pages than
// from 4 KiB ones, with the same kernel and the same software prefetches.
// (The KV pool stays in 4 KiB pages: huge pages there gave nothing
// measurable at 4k-16k tokens of context, also re-measured once the decode
// benchmarks read the pool from memory (docs/benchmarks.md, session 25), and
// would fault in 2 MiB per touched block per layer.)
// Linux only backs a 2 MiB-aligned, 2 MiB-long piece of a mapping advised
// with MADV_HUGEPAGE (under THP "madvise", the usual default) by one huge
// page, so mappings here start on a 2 MiB boundary and are advised. Where THP
// is off the advice is ignored and the memory is ordinary.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tandem::base {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// One private anonymous mapping, 2 MiB-aligned, `bytes` rounded up to whole
// huge pages, advised MADV_HUGEPAGE, zero-filled (pages are faulted in on
// first touch). Unmapped on destruction.
class HugePageMapping {
 public:
  static absl::StatusOr<HugePageMapping> Map(size_t bytes);

  HugePageMapping() = default;
  HugePageMapping(HugePageMapping&& other) noexcept;
  HugePageMapping& operator=(HugePageMapping&& other) noexcept;
  HugePageMapping(const HugePageMapping&) = delete;
  HugePageMapping& operator=(const HugePageMapping&) = delete;
  ~HugePageMapping();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  HugePageMapping(uint8_t* data, size_t size) : data_(data), size_(size) {}
  void Unmap();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Hands out 64-byte-aligned pieces of shared HugePageMappings ("chunks") so
// that many matrices, large and small, share huge pages instead of each
// rounding up to its own: a piece that fits the current chunk's rest goes
// there; one that does not opens a new chunk of max(chunk_bytes, its size
// rounded up to huge pages), whose rest later pieces use. A chunk is unmapped
// when the last piece cut from it is released (the arena itself holds none),
// so a model's copies return their memory when the model goes. Thread-safe.
class HugePageArena {
 public:
  explicit HugePageArena(size_t chunk_bytes = size_t{32} << 20);
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // `bytes` (> 0) of zero-filled memory; the pointer keeps its chunk mapped.
  absl::StatusOr<std::shared_ptr<uint8_t>> Allocate(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // The arena the weights' load-time copies come from.
  static HugePageArena& Weights();

 private:
  const size_t chunk_bytes_;
  absl::Mutex mu_;
  // The chunk pieces are cut from, while any piece of it lives.
  std::weak_ptr<HugePageMapping> current_ ABSL_GUARDED_BY(mu_);
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of it handed out (rounded to 64)
};

}  // namespace tandem::base
