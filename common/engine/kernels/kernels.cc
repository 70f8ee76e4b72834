#include "common/engine/kernels/kernels.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/huge_pages.h"
#include "common/base/logging.h"
#include "common/engine/kernels/internal/kernels_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace tandem::engine {
namespace {

using internal::WeightView;

#if defined(__x86_64__)
uint64_t Xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

Isa DetectIsaUncached() {
#if defined(__x86_64__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    return Isa::kScalar;
  }
  const bool osxsave = ecx & (1u << 27);
  const bool avx = ecx & (1u << 28);
  const bool fma = ecx & (1u << 12);
  const bool f16c = ecx & (1u << 29);
  if (!osxsave || !avx || !fma || !f16c) {
    return Isa::kScalar;
  }
  const uint64_t xcr0 = Xgetbv0();
  if ((xcr0 & 0x6) != 0x6) {  // OS saves XMM and YMM state
    return Isa::kScalar;
  }
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    return Isa::kScalar;
  }
  const bool avx2 = ebx & (1u << 5);
  const bool bmi2 = ebx & (1u << 8);
  if (!avx2 || !bmi2) {
    return Isa::kScalar;
  }
  const bool avx512 = (ebx & (1u << 16)) && (ebx & (1u << 17)) &&  // F, DQ
                      (ebx & (1u << 30)) && (ebx & (1u << 31));    // BW, VL
  const bool vnni = ecx & (1u << 11);
  // Opmask, upper ZMM0-15 and ZMM16-31 state enabled by the OS.
  if (!avx512 || (xcr0 & 0xE6) != 0xE6) {
    return Isa::kAvx2;
  }
  if (!vnni) {
    return Isa::kAvx512;
  }
  const bool amx_int8 = edx & (1u << 25);
  return amx_int8 && AmxTileStateGranted() ? Isa::kAvx512Amx : Isa::kAvx512Vnni;
#else
  return Isa::kScalar;
#endif
}

}  // namespace

bool AmxTileStateGranted() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool granted = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(1, 0, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) {
      return false;  // no OSXSAVE: XGETBV would fault
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || (d & (1u << 24)) == 0) {
      return false;  // no AMX-TILE
    }
    constexpr uint64_t kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
    if ((Xgetbv0() & kTileState) != kTileState) {
      return false;
    }
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

namespace {

std::atomic<int>& ActiveIsaSlot() {
  static std::atomic<int> slot{static_cast<int>(DetectIsa())};
  return slot;
}

WeightView ViewOf(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols) {
  WeightView v;
  v.type = type;
  v.data = data;
  v.rows = rows;
  v.cols = cols;
  v.row_bytes = internal::RowBytes(type, cols);
  return v;
}

}  // namespace

namespace internal {

void GemmFloatPanels(const WeightView& w, const float* x, int64_t m, float* y,
                     base::ThreadPool& pool, int mr_max, FloatTileFn tile, FloatTile2Fn tile2,
                     const uint8_t* packed, FloatTile2HalfFn tile2_half) {
  const int64_t n_panels = (w.rows + kFloatPanelRows - 1) / kFloatPanelRows;
  const int64_t panel_floats = kFloatPanelRows * kFloatKc;
  const int64_t cols = w.cols;
  const int64_t n_tiles = (m + mr_max - 1) / mr_max;
  const int64_t copy_panel_bytes = PrepackedFloatPanelBytes(cols);
  const bool half_pairs =
      packed != nullptr && tile2_half != nullptr && n_tiles <= kFloatHalfMaxTiles;
  // Panels per task. Through the buffer, every activation tile sweeps all of a
  // task's panels while its kFloatKc columns of x stay in L1, so x is streamed
  // from L2/L3 once per task and k chunk: up to kFloatMaxGroup panels (256 KiB
  // of fp32 per chunk, in L2), fewer where that would leave under two tasks per
  // thread. Sweeping the copy (half_pairs, few tiles, x small) kFloatCopyGroup
  // panels: their chunks stay in L1 for every tile, and 4 streams from DRAM
  // prefetch better than 16 (16 measured 0.8x at batch 32, 1 thread).
  const int64_t group =
      half_pairs
          ? kFloatCopyGroup
          : std::clamp<int64_t>(n_panels / (2 * int64_t{pool.num_threads()}), 1, kFloatMaxGroup);
  const int64_t n_tasks = (n_panels + group - 1) / group;
  // Activations k-major per tile: tile t (rows [i0, i0 + mr)) at xp + i0 * cols.
  static thread_local ScratchBuffer x_scratch;
  auto* xp = static_cast<float*>(x_scratch.Get(static_cast<size_t>(m * cols) * sizeof(float)));
  auto pack_tiles = [&](int64_t t_begin, int64_t t_end) {
    int64_t i0 = 0;
    for (int64_t t = 0; t < t_begin; ++t) {
      i0 += BalancedTile(m, n_tiles, t);
    }
    for (int64_t t = t_begin; t < t_end; i0 += BalancedTile(m, n_tiles, t++)) {
      const int mr = BalancedTile(m, n_tiles, t);
      float* out = xp + i0 * cols;
      for (int i = 0; i < mr; ++i) {
        const float* xi = x + (i0 + i) * cols;
        for (int64_t k = 0; k < cols; ++k) {
          out[k * mr + i] = xi[k];
        }
      }
    }
  };
  if (m * cols >= (int64_t{1} << 16)) {
    pool.ParallelFor(n_tiles, 1, pack_tiles);
  } else {
    pack_tiles(0, n_tiles);
  }
  pool.Run(n_tasks, [&](int64_t task, int /*thread*/) {
    static thread_local ScratchBuffer scratch;
    auto* buffer = static_cast<float*>(scratch.Get(group * panel_floats * sizeof(float)));
    const int64_t p0 = task * group;
    const int64_t np = std::min(group, n_panels - p0);
    for (int64_t k0 = 0; k0 < cols; k0 += kFloatKc) {
      const int64_t kc = std::min(kFloatKc, cols - k0);
      // With half_pairs only an odd last panel goes through the buffer.
      for (int64_t p = half_pairs ? np - np % 2 : 0; p < np; ++p) {
        if (packed != nullptr) {
          ConvertFloatPanelAvx2(w, packed, p0 + p, k0, kc, buffer + p * panel_floats);
        } else {
          PackFloatPanel16Avx2(w, (p0 + p) * kFloatPanelRows, k0, kc, buffer + p * panel_floats);
        }
      }
      for (int64_t t = 0, i0 = 0; t < n_tiles; i0 += BalancedTile(m, n_tiles, t++)) {
        const int mr = BalancedTile(m, n_tiles, t);
        const float* xi = xp + i0 * cols + k0 * mr;
        for (int64_t p = 0; p < np;) {
          const int64_t r0 = (p0 + p) * kFloatPanelRows;
          float* yi = y + i0 * w.rows + r0;
          if ((half_pairs || tile2 != nullptr) && p + 1 < np) {
            const int nvalid2 = static_cast<int>(
                std::min<int64_t>(kFloatPanelRows, w.rows - r0 - kFloatPanelRows));
            if (half_pairs) {
              tile2_half(mr, packed + (p0 + p) * copy_panel_bytes + k0 * kFloatPanelRows * 2,
                         copy_panel_bytes, kc, xi, yi, w.rows, nvalid2, k0 > 0);
            } else {
              tile2(mr, buffer + p * panel_floats, panel_floats, kc, xi, yi, w.rows, nvalid2,
                    k0 > 0);
            }
            p += 2;
          } else {
            const int nvalid = static_cast<int>(std::min<int64_t>(kFloatPanelRows, w.rows - r0));
            tile(mr, buffer + p * panel_floats, kc, xi, yi, w.rows, nvalid, k0 > 0);
            p += 1;
          }
        }
      }
    }
  });
}

QuantizedActs QuantizeActsParallel(const float* x, int64_t m, int64_t cols, bool offset128,
                                   base::ThreadPool& pool) {
  static thread_local ScratchBuffer scratch;
  const QuantizedActs xa = AllocQuantizedActs(scratch, m, cols);
  if (m * cols >= (int64_t{1} << 16)) {
    pool.ParallelFor(m, 1, [&](int64_t begin, int64_t end) {
      QuantizeActsAvx2(x + begin * cols, end - begin, cols, offset128, RowsFrom(xa, begin, cols));
    });
  } else {
    QuantizeActsAvx2(x, m, cols, offset128, xa);
  }
  return xa;
}

// How the panel GEMMs split their weight panels into pool tasks: groups of
// `group` panels (one for m <= mr_max, so each panel is streamed once; else
// as many as fit `budget_bytes`, at most 8, which every activation tile sweeps
// while they are in L2), and enough tasks, each whole groups, to balance the
// threads.
namespace {

struct PanelTasks {
  int64_t n_panels, group, per_task, n_tasks;
};
PanelTasks SplitPanels(int64_t rows, int64_t m, const base::ThreadPool& pool, int panel_rows,
                       int64_t panel_bytes, int mr_max, int64_t budget_bytes) {
  PanelTasks t;
  t.n_panels = (rows + panel_rows - 1) / panel_rows;
  t.group = m <= mr_max ? 1 : std::clamp<int64_t>(budget_bytes / panel_bytes, 1, 8);
  const int64_t target_tasks = int64_t{pool.num_threads()} * 8;
  t.per_task =
      std::max<int64_t>(t.group, (t.n_panels + target_tasks - 1) / target_tasks / t.group * t.group);
  t.n_tasks = (t.n_panels + t.per_task - 1) / t.per_task;
  return t;
}

}  // namespace

void QuantGemmPanels(const WeightView& w, const QuantizedActs& xa, int64_t m, float* y,
                     base::ThreadPool& pool, int panel_rows, int64_t panel_bytes, int mr_max,
                     int64_t budget_bytes, absl::FunctionRef<void(int64_t r0, uint8_t* out)> pack,
                     absl::FunctionRef<void(int mr, const uint8_t* panel, const QuantizedActs& xa,
                                            float* y, int nvalid, AheadBytes ahead)>
                         tile,
                     PanelSource source) {
  const PanelTasks pt = SplitPanels(w.rows, m, pool, panel_rows, panel_bytes, mr_max, budget_bytes);
  const int64_t n_panels = pt.n_panels, group = pt.group, per_task = pt.per_task;
  const int64_t n_tasks = pt.n_tasks;
  const int64_t n_tiles = (m + mr_max - 1) / mr_max;
  const bool interleave = source.base != nullptr && n_tiles <= kAheadMaxTiles;
  pool.Run(n_tasks, [&](int64_t task, int /*thread*/) {
    static thread_local ScratchBuffer scratch;
    auto* buffer = static_cast<uint8_t*>(scratch.Get(group * panel_bytes));
    const int64_t p_end = std::min(n_panels, (task + 1) * per_task);
    // Share k of `calls` of panel p's source (none past the task's panels).
    auto ahead_of = [&](int64_t p, int64_t k, int64_t calls) {
      if (p >= p_end) {
        return AheadBytes{};
      }
      const uint8_t* begin = source.base + p * source.panel_bytes;
      const int64_t bytes = std::min<int64_t>(source.panel_bytes, source.end - begin);
      if (bytes <= 0) {
        return AheadBytes{};
      }
      const int64_t lo = k * bytes / calls, hi = (k + 1) * bytes / calls;
      return AheadBytes{begin + lo, hi - lo};
    };
    for (int64_t p0 = task * per_task; p0 < p_end; p0 += group) {
      const int64_t np = std::min(group, p_end - p0);
      auto run_tile = [&](int64_t t, int64_t i0, int64_t p, AheadBytes ahead) {
        const int64_t r0 = (p0 + p) * panel_rows;
        const int nvalid = static_cast<int>(std::min<int64_t>(panel_rows, w.rows - r0));
        tile(BalancedTile(m, n_tiles, t), buffer + p * panel_bytes, RowsFrom(xa, i0, w.cols),
             y + i0 * w.rows + r0, nvalid, ahead);
      };
      if (!interleave) {
        for (int64_t p = 0; p < np; ++p) {
          pack((p0 + p) * panel_rows, buffer + p * panel_bytes);
        }
        for (int64_t t = 0, i0 = 0; t < n_tiles; i0 += BalancedTile(m, n_tiles, t++)) {
          for (int64_t p = 0; p < np; ++p) {
            run_tile(t, i0, p, AheadBytes{});
          }
        }
        continue;
      }
      // Calls between the group's last pack and the next group's first: the
      // first tile on the last panel, then every other tile's sweep.
      const int64_t last_calls = 1 + (n_tiles - 1) * np;
      for (int64_t p = 0; p < np; ++p) {
        pack((p0 + p) * panel_rows, buffer + p * panel_bytes);
        run_tile(0, 0, p, ahead_of(p0 + p + 1, 0, p + 1 < np ? 1 : last_calls));
      }
      int64_t k = 1;
      for (int64_t t = 1, i0 = BalancedTile(m, n_tiles, 0); t < n_tiles;
           i0 += BalancedTile(m, n_tiles, t++)) {
        for (int64_t p = 0; p < np; ++p) {
          run_tile(t, i0, p, ahead_of(p0 + np, k++, last_calls));
        }
      }
    }
  });
}

void PrepackedGemm(const WeightView& w, const uint8_t* packed, const QuantizedActs& xa, int64_t m,
                   float* y, base::ThreadPool& pool, int panel_rows, int64_t panel_bytes,
                   int mr_max, int64_t budget_bytes,
                   absl::FunctionRef<PrepackedTileFn(int mr)> tile) {
  const PanelTasks pt = SplitPanels(w.rows, m, pool, panel_rows, panel_bytes, mr_max, budget_bytes);
  const int64_t n_panels = pt.n_panels, group = pt.group, per_task = pt.per_task;
  const int64_t n_tasks = pt.n_tasks;
  const int64_t n_tiles = (m + mr_max - 1) / mr_max;
  pool.Run(n_tasks, [&](int64_t task, int /*thread*/) {
    const int64_t p_end = std::min(n_panels, (task + 1) * per_task);
    for (int64_t p0 = task * per_task; p0 < p_end; p0 += group) {
      const int64_t p1 = std::min(p0 + group, p_end);
      for (int64_t t = 0, i0 = 0; t < n_tiles; i0 += BalancedTile(m, n_tiles, t++)) {
        const int mr = BalancedTile(m, n_tiles, t);
        const PrepackedTileFn kernel = tile(mr);
        const QuantizedActs xi = RowsFrom(xa, i0, w.cols);
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t r0 = p * panel_rows;
          const int nvalid = static_cast<int>(std::min<int64_t>(panel_rows, w.rows - r0));
          kernel(packed + p * panel_bytes, xi, w.cols, y + i0 * w.rows + r0, w.rows, nvalid);
        }
      }
    }
  });
}

}  // namespace internal

Isa DetectIsa() {
  static const Isa isa = DetectIsaUncached();
  return isa;
}

void SetActiveIsa(Isa isa) {
  const Isa best = DetectIsa();
  if (static_cast<int>(isa) > static_cast<int>(best)) {
    isa = best;
  }
  ActiveIsaSlot().store(static_cast<int>(isa), std::memory_order_relaxed);
}

Isa ActiveIsa() { return static_cast<Isa>(ActiveIsaSlot().load(std::memory_order_relaxed)); }

StreamPrefetch DetectStreamPrefetch() {
#if defined(__x86_64__)
  static const StreamPrefetch prefetch = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
      return StreamPrefetch::kL1;
    }
    char vendor[12];
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    return std::string_view(vendor, 12) == "GenuineIntel" ? StreamPrefetch::kL2
                                                          : StreamPrefetch::kL1;
  }();
  return prefetch;
#else
  return StreamPrefetch::kL1;
#endif
}

void SetStreamPrefetch(StreamPrefetch prefetch) {
  internal::StreamPrefetchL2Slot().store(prefetch == StreamPrefetch::kL2,
                                         std::memory_order_relaxed);
}

StreamPrefetch ActiveStreamPrefetch() {
  return internal::StreamPrefetchToL2() ? StreamPrefetch::kL2 : StreamPrefetch::kL1;
}

const char* StreamPrefetchName(StreamPrefetch prefetch) {
  return prefetch == StreamPrefetch::kL2 ? "l2" : "l1";
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAvx512Amx:
      return "avx512amx";
  }
  return "unknown";
}

namespace {
std::atomic<bool>& LoadTimeRepackSlot() {
  static std::atomic<bool> slot{true};
  return slot;
}
}  // namespace

void SetLoadTimeRepack(bool enabled) {
  LoadTimeRepackSlot().store(enabled, std::memory_order_relaxed);
}
bool LoadTimeRepack() { return LoadTimeRepackSlot().load(std::memory_order_relaxed); }

absl::StatusOr<WeightMatrix> WeightMatrix::Create(GgmlType type, const void* data, int64_t rows,
                                                  int64_t cols, bool repack) {
  // Every type the format knows has kernels (the type table is ggml_type.cc's).
  if (!GgmlTypeFromId(static_cast<uint32_t>(type)).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WeightMatrix: unsupported type id ", static_cast<uint32_t>(type)));
  }
  if (rows <= 0 || cols <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("WeightMatrix: bad shape ", rows, "x", cols));
  }
  if (cols % GgmlBlockSize(type) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("WeightMatrix: cols ", cols,
                                                   " not a multiple of the ", GgmlTypeName(type),
                                                   " block size ", GgmlBlockSize(type)));
  }
  if (data == nullptr) {
    return absl::InvalidArgumentError("WeightMatrix: null data");
  }
  WeightMatrix w;
  w.type_ = type;
  w.rows_ = rows;
  w.cols_ = cols;
  w.data_ = static_cast<const uint8_t*>(data);
  // Quantized types whose per-call repacking costs more than the multiply at
  // small batch get a copy repacked once, here, for the active ISA's
  // kernels; the rest are read in their GGUF layout (an mmap'd file in
  // place, at no extra memory), repacked per call into cache-resident
  // panels where the GEMM wants them.
  // The AVX2 layouts serve the AVX-512 ISAs too: their kernels give the same
  // bits as the VNNI and 512-bit per-call paths (exact integer block dots,
  // the same fp32 epilogue; see MatMul), and at decode-sized batches a
  // repacked copy streamed once beats any per-call repacking.
  const Isa isa = ActiveIsa();
  const int64_t bytes = repack && LoadTimeRepack() && isa >= Isa::kAvx2
                            ? internal::PrepackedAvx2Bytes(type, rows, cols)
                            : 0;
  if (bytes > 0) {
    // In transparent huge pages (base::HugePageArena): a decode step streams
    // every byte, and with 4 KiB pages each 4 KiB would cost a TLB miss and
    // stop the hardware prefetchers. Small matrices share huge pages.
    auto owned = base::HugePageArena::Weights().Allocate(static_cast<size_t>(bytes));
    if (!owned.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("WeightMatrix: cannot allocate ", bytes,
                       " bytes for repacked weights: ", owned.status().message()));
    }
    w.owned_ = *std::move(owned);
    uint8_t* p = w.owned_.get();
    // Large matrices on every core (a pool of one runs on this thread).
    base::ThreadPool pool(bytes >= (int64_t{8} << 20)
                              ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                              : 1);
    internal::PrepackAvx2(ViewOf(type, w.data_, rows, cols), p, pool);
    w.packed_ = p;
    w.packed_bytes_ = bytes;
    w.packed_isa_ = isa;
    // Only the AVX2 path reads it (MatMul): no scan under the AVX-512 ISAs.
    w.q8_no_min_ = isa == Isa::kAvx2 && internal::Q8NoMinQuant(ViewOf(type, w.data_, rows, cols));
  }
  return w;
}

void WeightMatrix::DequantizeRowTo(int64_t r, float* out) const {
  DCHECK_GE(r, 0);
  DCHECK_LT(r, rows_);
  internal::DequantizeRowScalar(ViewOf(type_, data_, rows_, cols_), r, out);
}

void MatMul(const WeightMatrix& w, const float* x, int64_t m, float* y, base::ThreadPool& caller_pool) {
  if (m <= 0 || w.rows_ == 0) {
    return;
  }
  const WeightView v = ViewOf(w.type_, w.data_, w.rows_, w.cols_);
  // Below ~256k multiply-adds a job costs more to hand out than it saves
  // (a tiny model's whole decode step is a few of these): run it here.
  static thread_local base::ThreadPool serial(1);
  base::ThreadPool& pool = m * w.rows_ * w.cols_ < (int64_t{1} << 18) ? serial : caller_pool;
  const Isa isa = ActiveIsa();
  // The repacked copy serves decode-sized batches. Past kPrepackedMaxM rows
  // (kPrepackedAmxMaxM under AMX, whose tiles make them cheaper) the per-call
  // panels (levels expanded to bytes once per call into L2, wider tiles) win
  // again and their packing is amortized: the same bits either way.
  // Float types use the copy up to batch 3 under AVX2 (the GEMM above
  // converts the borrowed data per call) and up to kGemv512MaxM under the
  // AVX-512 ISAs (the 512-bit GEMM's bits, see MatMulPrepackedAvx512).
  const bool is_float = w.type_ == GgmlType::kF16 || w.type_ == GgmlType::kBF16;
  // Q4_K, Q5_K and Q6_K under VNNI: the copy's batch-2 kernels are AVX2 ones
  // (vpmaddubsw); the VNNI level GEMM on the copy (MatMulLevelsImpl) wins
  // above kPrepackedLevelsVnniMaxM.
  const bool vnni_levels =
      isa >= Isa::kAvx512Vnni &&
      (w.type_ == GgmlType::kQ4_K || w.type_ == GgmlType::kQ5_K || w.type_ == GgmlType::kQ6_K);
  const int64_t packed_max_m = vnni_levels ? internal::kPrepackedLevelsVnniMaxM
                               : is_float  ? (isa == Isa::kAvx2 ? 3 : internal::kGemv512MaxM)
                               : w.type_ == GgmlType::kQ5_K && isa <= Isa::kAvx512
                                   ? internal::kPrepackedQ5KAvx2MaxM
                               : isa == Isa::kAvx512Amx ? internal::kPrepackedAmxMaxM
                                                        : internal::kPrepackedMaxM;
  // Past that, float types still read the copy (contiguous [k][16] halves)
  // to fill the GEMM's fp32 panels: the same values as gathering w's rows.
  // Q8_0 under AVX2 reads the copy up to batch 32 as well: its per-call panel
  // holds w and |w| (twice the bytes) to save one vpabsb per 4 activation
  // rows, which a decode batch does not repay (batch 32 on two Zen 3 cores:
  // 8-14 % less time per step); prefill's 512 rows keep the panels
  // (docs/benchmarks.md).
  const int64_t q8_max_m = isa == Isa::kAvx2 && w.type_ == GgmlType::kQ8_0 ? 32 : 0;
  if (w.packed_ != nullptr && isa == w.packed_isa_ &&
      (m <= std::max(packed_max_m, q8_max_m) || is_float)) {
    if (isa == Isa::kAvx2) {
      internal::MatMulPrepackedAvx2(v, w.packed_, x, m, y, pool, w.q8_no_min_);
    } else {
      internal::MatMulPrepackedAvx512(v, w.packed_, x, m, y, pool, isa >= Isa::kAvx512Vnni);
    }
    return;
  }
  // The per-call GEMMs that can fill their panels from the copy do (the same
  // panel bytes, read as one stream instead of gathered from 8 or 16 rows).
  const uint8_t* copy = w.packed_isa_ == isa ? w.packed_ : nullptr;
  switch (isa) {
    case Isa::kAvx512Amx:
      internal::MatMulAvx512(v, x, m, y, pool, /*vnni=*/true, copy, /*amx=*/true);
      return;
    case Isa::kAvx512Vnni:
      internal::MatMulAvx512(v, x, m, y, pool, /*vnni=*/true, copy, /*amx=*/false);
      return;
    case Isa::kAvx512:
      internal::MatMulAvx512(v, x, m, y, pool, /*vnni=*/false, copy, /*amx=*/false);
      return;
    case Isa::kAvx2:
      internal::MatMulAvx2(v, x, m, y, pool, copy);
      return;
    case Isa::kScalar:
      internal::MatMulScalar(v, x, m, y, pool);
      return;
  }
}

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out) {
  if (ActiveIsa() == Isa::kScalar) {
    internal::RmsNormScalar(x, weight, rows, n, eps, out);
  } else {
    internal::RmsNormAvx2(x, weight, rows, n, eps, out);
  }
}

void Rope(float* x, int n_heads, int head_dim, int rot_dim, int32_t position, const float* inv_freq,
          RopeStyle style) {
  DCHECK_LE(rot_dim, head_dim);
  DCHECK_EQ(rot_dim % 2, 0);
  const int half = rot_dim / 2;
  static thread_local std::vector<float> cs;
  cs.resize(2 * static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float theta = static_cast<float>(position) * inv_freq[i];
    cs[2 * i] = std::cos(theta);
    cs[2 * i + 1] = std::sin(theta);
  }
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = style == RopeStyle::kNormal ? 2 * i : i;
      const int b = style == RopeStyle::kNormal ? 2 * i + 1 : i + half;
      const float c = cs[2 * i];
      const float s = cs[2 * i + 1];
      const float x0 = xh[a];
      const float x1 = xh[b];
      xh[a] = x0 * c - x1 * s;
      xh[b] = x0 * s + x1 * c;
    }
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  if (ActiveIsa() == Isa::kScalar) {
    internal::SwiGluScalar(gate, up, n, out);
  } else {
    internal::SwiGluAvx2(gate, up, n, out);
  }
}

void PagedAttention(const float* q, int64_t n_tokens, const int32_t* positions,
                    const int32_t* const* block_tables, const PagedKv& kv, int n_heads, float scale,
                    float* out, base::ThreadPool& pool) {
  if (n_tokens <= 0) {
    return;
  }
  DCHECK_GT(kv.n_kv_heads, 0);
  DCHECK_EQ(n_heads % kv.n_kv_heads, 0);
  DCHECK(kv.dtype == GgmlType::kF32 || kv.dtype == GgmlType::kF16);
  const int group = n_heads / kv.n_kv_heads;
  const int hd = kv.head_dim;
  const int bs = kv.block_size;
  const int64_t elt = kv.dtype == GgmlType::kF16 ? 2 : 4;
  const int64_t head_stride = int64_t{bs} * hd * elt;        // one KV head of one block
  const int64_t block_stride = head_stride * kv.n_kv_heads;  // one block
  const internal::AttendBlockFn attend = ActiveIsa() == Isa::kScalar ? internal::AttendBlockScalar
                                         : ActiveIsa() == Isa::kAvx2 ? internal::AttendBlockAvx2
                                                                     : internal::AttendBlockAvx512;
  // Keys per AttendBlock call (bounds its score buffer).
  constexpr int kChunk = 64;
  constexpr int64_t kAheadBlocks = 2;
  // One task per (token, KV head): the query heads of a GQA group share every
  // K/V block they read, so it is loaded into L1 once for all of them.
  pool.Run(n_tokens * kv.n_kv_heads, [&](int64_t task, int /*thread*/) {
    const int64_t t = task / kv.n_kv_heads;
    const int h = static_cast<int>(task % kv.n_kv_heads);
    static thread_local std::vector<float> state;
    state.resize(static_cast<size_t>(group) * (2 * hd + 2));
    float* qs = state.data();
    float* acc = qs + static_cast<size_t>(group) * hd;
    float* mx = acc + static_cast<size_t>(group) * hd;
    float* l = mx + group;
    const float* qt = q + (t * n_heads + int64_t{h} * group) * hd;
    for (int64_t j = 0; j < int64_t{group} * hd; ++j) {
      qs[j] = qt[j] * scale;
      acc[j] = 0.0f;
    }
    for (int g = 0; g < group; ++g) {
      mx[g] = -std::numeric_limits<float>::infinity();
      l[g] = 0.0f;
    }
    const int64_t n_keys = int64_t{positions[t]} + 1;
    DCHECK_GE(positions[t], 0);
    const int32_t* table = block_tables[t];
    const auto* kbase = static_cast<const uint8_t*>(kv.k);
    const auto* vbase = static_cast<const uint8_t*>(kv.v);
    for (int64_t blk = 0; blk * bs < n_keys; ++blk) {
      const int32_t id = table[blk];
      DCHECK_GE(id, 0) << "token " << t << " block " << blk;
      const int64_t off = id * block_stride + h * head_stride;
      const int n = static_cast<int>(std::min<int64_t>(bs, n_keys - blk * bs));
      // The block kAheadBlocks on (this head's part of it) is prefetched
      // while this one is attended: a head's K and V in a block are a few
      // KiB each, a block stride apart, and the hardware's streams start
      // over at every 4 KiB page.
      internal::KvBlockRef ahead_ref{};
      const internal::KvBlockRef* ahead = nullptr;
      if ((blk + kAheadBlocks) * bs < n_keys) {
        const int64_t a = int64_t{table[blk + kAheadBlocks]} * block_stride + h * head_stride;
        ahead_ref = {kbase + a, vbase + a};
        ahead = &ahead_ref;
      }
      for (int j0 = 0; j0 < n; j0 += kChunk) {
        const int64_t sub = int64_t{j0} * hd * elt;
        const int nj = std::min(kChunk, n - j0);
        internal::KvBlockRef sub_ref{};
        if (ahead != nullptr) {
          sub_ref = {static_cast<const uint8_t*>(ahead->k) + sub,
                     static_cast<const uint8_t*>(ahead->v) + sub};
        }
        attend(qs, group, kbase + off + sub, vbase + off + sub, kv.dtype, nj, hd, mx, l, acc,
               ahead != nullptr ? &sub_ref : nullptr);
      }
    }
    float* ot = out + (t * n_heads + int64_t{h} * group) * hd;
    for (int g = 0; g < group; ++g) {
      const float inv = 1.0f / l[g];
      for (int d = 0; d < hd; ++d) {
        ot[g * hd + d] = acc[g * hd + d] * inv;
      }
    }
  });
}

void WriteKv(const PagedKv& kv, int32_t block, int slot, const float* k, const float* v) {
  DCHECK_GE(block, 0);
  DCHECK_GE(slot, 0);
  DCHECK_LT(slot, kv.block_size);
  const int hd = kv.head_dim;
  for (int h = 0; h < kv.n_kv_heads; ++h) {
    const int64_t dst = ((int64_t{block} * kv.n_kv_heads + h) * kv.block_size + slot) * hd;
    const float* ks = k + int64_t{h} * hd;
    const float* vs = v + int64_t{h} * hd;
    if (kv.dtype == GgmlType::kF16) {
      auto* kd = static_cast<uint16_t*>(kv.k) + dst;
      auto* vd = static_cast<uint16_t*>(kv.v) + dst;
      for (int d = 0; d < hd; ++d) {
        kd[d] = internal::FloatToHalf(ks[d]);
        vd[d] = internal::FloatToHalf(vs[d]);
      }
    } else {
      std::memcpy(static_cast<float*>(kv.k) + dst, ks, hd * sizeof(float));
      std::memcpy(static_cast<float*>(kv.v) + dst, vs, hd * sizeof(float));
    }
  }
}

}  // namespace tandem::engine
