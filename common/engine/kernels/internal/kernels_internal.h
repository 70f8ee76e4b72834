#pragma once
// Per-ISA kernel entry points behind common/engine/kernels/kernels.h, and the small helpers
// they share. Each *_avx2.cc / *_avx512.cc file is compiled with its own -m
// flags, so nothing here may be an inline function using SIMD intrinsics
// (one TU's copy could be picked by the linker for another): SIMD helpers
// live in anonymous namespaces inside their own file.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "absl/functional/function_ref.h"
#include "common/base/thread_pool.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/kernels/kernels.h"

namespace tandem::engine::internal {

inline constexpr int kQBlock = 32;  // elements per Q8_0/Q4_0 block (and per activation block)

// A weight matrix as the kernels see it: GGUF row-major layout.
struct WeightView {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;  // bytes between consecutive rows
};

// Bytes of a row of `cols` elements (same as GgmlRowBytes, kept here so the
// kernels do not need the GGUF library at run time).
inline int64_t RowBytes(GgmlType type, int64_t cols) {
  switch (type) {
    case GgmlType::kF32:
      return cols * 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return cols * 2;
    case GgmlType::kQ8_0:
      return cols / kQBlock * static_cast<int64_t>(sizeof(BlockQ8_0));
    case GgmlType::kQ4_0:
      return cols / kQBlock * static_cast<int64_t>(sizeof(BlockQ4_0));
    default:
      return GgmlRowBytes(type, cols);
  }
}

// Level types (Q4_1 ... Q6_K, see IsLevelType / LevelBlock in ggml_type.h)
// multiply with the same per-32 quantized activations as Q4_0/Q8_0 (the
// activation block sum gives the m term).
inline bool IsQuantizedType(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0 || IsLevelType(t);
}

// Activation-row tiling for the GEMM micro-kernels: m rows split into
// n_tiles = ceil(m / max_tile) tiles of near-equal size (32 by 6 gives
// 6,6,5,5,5,5 rather than 6,6,6,6,6,2), so no tile is a small, inefficient
// remainder. Returns the size of tile t.
inline int BalancedTile(int64_t m, int64_t n_tiles, int64_t t) {
  return static_cast<int>(m / n_tiles + (t < m % n_tiles ? 1 : 0));
}

// --- Scalar fp16 / bf16 conversions (round to nearest even, bit exact) -----
// After Maratyszcza's FP16 library (as used by ggml): branch-free and exact
// for normals, subnormals, infinities and NaN.
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float HalfToFloat(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = BitsToFloat((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = BitsToFloat((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result =
      sign | (two_w < (1u << 27) ? FloatToBits(denormalized) : FloatToBits(normalized));
  return BitsToFloat(result);
}
inline uint16_t FloatToHalf(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = FloatToBits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) {
    bias = 0x71000000u;
  }
  base = BitsToFloat((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = FloatToBits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
inline float BfloatToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }
inline uint16_t FloatToBfloat(float f) {
  const uint32_t u = FloatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
  }
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// --- Activation quantization -------------------------------------------------
// Activations are quantized per 32-element block (as ggml's Q8_0, but with an
// fp32 scale): d = amax / 127, q = round_half_even(x * (127 / amax)), and the
// block sum of q kept for the Q4_0 offset correction and the min terms of
// Q4_1/Q5_1/Q4_K/Q5_K (ggml's Q8_1 s), and the sum of its first 16 q for the
// offset correction of Q6_K's two 16-halves (the level kernels multiply
// unsigned levels), and d * float(sum), the factor of a block's min term
// (saves the level kernels a conversion, a multiply and a broadcast per
// block and row). Every ISA computes the same bits: the scale and the
// rounding use the same float operations.
struct QuantizedActs {
  int8_t* qs = nullptr;       // [m][cols]
  float* d = nullptr;         // [m][nb]
  int32_t* sum = nullptr;     // [m][nb]
  int32_t* sum_lo = nullptr;  // [m][nb], q[0..16) of each block
  float* dsum = nullptr;      // [m][nb], d * static_cast<float>(sum)
  int64_t nb = 0;             // blocks per row
  // [m][cols] |qs| as u8, only where a kernel asked for it (the AVX2 Q8_0
  // batch-1 kernel on the copy, MatMulPrepackedAvx2); else null.
  const uint8_t* qabs = nullptr;
};

// Grow-only, 64-byte aligned scratch buffer; one per thread (thread_local).
class ScratchBuffer {
 public:
  void* Get(size_t bytes) {
    if (bytes > capacity_) {
      capacity_ = (bytes + 4095) & ~size_t{4095};
      data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, capacity_)));
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t capacity_ = 0;
};

// Lays out a QuantizedActs for m rows of `cols` inside `buffer`.
QuantizedActs AllocQuantizedActs(ScratchBuffer& buffer, int64_t m, int64_t cols);

// Rows [i0, m) of `a`, as a view.
inline QuantizedActs RowsFrom(const QuantizedActs& a, int64_t i0, int64_t cols) {
  QuantizedActs r = a;
  r.qs += i0 * cols;
  r.d += i0 * a.nb;
  r.sum += i0 * a.nb;
  r.sum_lo += i0 * a.nb;
  r.dsum += i0 * a.nb;
  if (r.qabs != nullptr) {
    r.qabs += i0 * cols;
  }
  return r;
}

// Where a GEMM's pack(r0) reads its bytes, for prefetching them: panel p's
// source is [base + p * panel_bytes, base + (p + 1) * panel_bytes), clipped
// at `end` (a load-time copy, panels back to back); base null: none known.
struct PanelSource {
  const uint8_t* base = nullptr;
  int64_t panel_bytes = 0;
  const uint8_t* end = nullptr;
};
// A range of bytes for a tile call to prefetch (into L2 on Intel, L1
// elsewhere: StreamPrefetchToL2) while it runs; empty when bytes == 0.
struct AheadBytes {
  const uint8_t* p = nullptr;
  int64_t bytes = 0;
};

// The quantized GEMM driver (kernels.cc) the AVX2 and VNNI paths share.
// Weight rows go in panels of `panel_rows` (`panel_bytes` once packed);
// each task owns a range of whole groups of panels, packs a group with
// `pack(r0, out)` into a per-thread buffer and sweeps every activation tile
// (at most `mr_max` rows, balanced) over it with `tile(mr, panel, rows of xa,
// y at the tile's first row and the panel's first column, nvalid, ahead)`. A
// group is one panel for m <= mr_max (consumed while L1-hot), else as many as
// fit `budget_bytes` (at most 8), so activations are read once per group.
// With a `source` and at most kAheadMaxTiles tiles, the first tile runs on
// each panel right after it is packed, the others sweep the group after its
// last pack, and the calls between one pack and the task's next prefetch the
// next panel's source, each its share (`ahead`): the pack then reads from
// cache, not DRAM. Otherwise a group is packed whole, then swept, and `ahead`
// is empty (packs back to back keep the hardware prefetchers on the rows:
// interleaving tiles cost 5-8 % where nothing was prefetched).
inline constexpr int64_t kAheadMaxTiles = 4;
void QuantGemmPanels(const WeightView& w, const QuantizedActs& xa, int64_t m, float* y,
                     base::ThreadPool& pool, int panel_rows, int64_t panel_bytes, int mr_max,
                     int64_t budget_bytes, absl::FunctionRef<void(int64_t r0, uint8_t* out)> pack,
                     absl::FunctionRef<void(int mr, const uint8_t* panel, const QuantizedActs& xa,
                                            float* y, int nvalid, AheadBytes ahead)>
                         tile,
                     PanelSource source = {});

// --- Float GEMM driver (kernels.cc), shared by the AVX2 and AVX-512 paths ----
// Columns per packed panel chunk. Part of every float path's summation order
// (each chunk is summed from zero and added to y in order), so the GEMM and
// the GEMV must use the same value (batch invariance).
inline constexpr int64_t kFloatKc = 256;
inline constexpr int kFloatPanelRows = 16;
// Bytes per 16-row panel of an F16/BF16 matrix's load-time copy ([k][16] halves).
inline int64_t PrepackedFloatPanelBytes(int64_t cols) { return cols * kFloatPanelRows * 2; }

// y[i][0..nvalid) for i < mr from one packed panel [kc][16] and the mr
// activation rows packed k-major, x[k * mr + i] (one stream, fixed offsets per
// row; GemmFloatPanels copies them so); adds to y when `accumulate`.
using FloatTileFn = void (*)(int mr, const float* panel, int64_t kc, const float* x, float* y,
                             int64_t ldy, int nvalid, bool accumulate);

// The same for two consecutive packed panels (32 weight rows; the second at
// panel + panel_stride, with nvalid2 valid rows; the first is whole): per
// lane the same FMAs in the same order as two `FloatTileFn` calls.
using FloatTile2Fn = void (*)(int mr, const float* panel, int64_t panel_stride, int64_t kc,
                              const float* x, float* y, int64_t ldy, int nvalid2, bool accumulate);

// FloatTile2Fn on two panels of the load-time copy as they are ([kc][16]
// halves from `half`, the second at half + stride bytes), each value widened
// to fp32 as it is loaded: the same values and FMAs, no panel written.
using FloatTile2HalfFn = void (*)(int mr, const uint8_t* half, int64_t stride, int64_t kc,
                                  const float* x, float* y, int64_t ldy, int nvalid2,
                                  bool accumulate);
// Up to this many activation tiles, a GEMM given a FloatTile2HalfFn sweeps the
// copy with it rather than convert each chunk into the buffer first (which
// costs a store and a load of every value, repaid only over many tiles).
inline constexpr int64_t kFloatHalfMaxTiles = 3;
// Panels per GemmFloatPanels task: at most this many through the buffer ...
inline constexpr int64_t kFloatMaxGroup = 16;
// ... and this many when the tiles sweep the copy (tile2_half).
inline constexpr int64_t kFloatCopyGroup = 4;

// The float GEMM: tasks of panels of 16 weight rows (up to kFloatMaxGroup
// through the buffer, fewer where that leaves under two tasks a thread;
// kFloatCopyGroup when sweeping the copy), converted to fp32 per kFloatKc
// columns into a per-thread buffer, every activation tile (at most `mr_max`
// rows, balanced) swept over them by `tile2` (pairs of panels, when given) and
// `tile`. The panels come from w (PackFloatPanel16Avx2: sixteen
// rows gathered and transposed) or, for F16/BF16 with `packed` (the load-time
// copy, PrepackAvx2), from its [k][16] chunks (ConvertFloatPanelAvx2: one
// contiguous stream): the same values either way. The activations are first
// copied k-major per tile (tile t's rows [i0, i0 + mr) to x_packed[i0 * cols
// + k * mr + i]): the micro-kernels then broadcast from one pointer at fixed
// offsets instead of mr row streams 4 * cols bytes apart (GPR spills, and L1
// set conflicts at power-of-two cols). Only the layout changes, not the
// values or their order. With `tile2_half` and at most kFloatHalfMaxTiles
// tiles, pairs of panels are read from the copy by it instead (an odd last
// panel still goes through the buffer; `tile2` may be null then). Plain control code:
// compiled without ISA flags, the ISA lives in the tiles and converters.
void GemmFloatPanels(const WeightView& w, const float* x, int64_t m, float* y,
                     base::ThreadPool& pool, int mr_max, FloatTileFn tile,
                     FloatTile2Fn tile2 = nullptr, const uint8_t* packed = nullptr,
                     FloatTile2HalfFn tile2_half = nullptr);

// --- Attention ---------------------------------------------------------------
// State of the online softmax of one query head.
// One KV block for `group` query heads sharing a KV head: q is [group][head_dim]
// (already scaled), k and v point at the block's [block_size][head_dim] rows of
// that KV head in `dtype`; only the first `n` keys count. Updates the running
// max m[g], sum l[g] and unnormalized output acc[g][head_dim]. `ahead`, when
// not null, is a later block's K and V (same layout, the same n x head_dim
// values) for the function to prefetch while it works on this one.
struct KvBlockRef {
  const void* k;
  const void* v;
};
using AttendBlockFn = void (*)(const float* q, int group, const void* k, const void* v,
                               GgmlType dtype, int n, int head_dim, float* m, float* l, float* acc,
                               const KvBlockRef* ahead);

// --- Scalar reference (kernels_scalar.cc) -------------------------------------
void QuantizeActsScalar(const float* x, int64_t m, int64_t cols, const QuantizedActs& out);
void MatMulScalar(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool);
void RmsNormScalar(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                   float* out);
void SwiGluScalar(const float* gate, const float* up, int64_t n, float* out);
void AttendBlockScalar(const float* q, int group, const void* k, const void* v, GgmlType dtype,
                       int n, int head_dim, float* m, float* l, float* acc,
                       const KvBlockRef* ahead);
// Row r of w as floats.
void DequantizeRowScalar(const WeightView& w, int64_t r, float* out);

// --- AVX2 + FMA + F16C (kernels_avx2.cc) ---------------------------------------
// offset128: store q + 128 as u8 (for kernels whose activation operand is
// unsigned) instead of q as s8.
void QuantizeActsAvx2(const float* x, int64_t m, int64_t cols, bool offset128,
                      const QuantizedActs& out);
// `packed`, when not null, is w's load-time copy (PrepackAvx2): the Q4_0 /
// Q8_0 and level (Q4_K, Q5_K, Q6_K) GEMMs then fill their panels from it (the same
// panel bytes).
void MatMulAvx2(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool,
                const uint8_t* packed = nullptr);
void RmsNormAvx2(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                 float* out);
void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out);
void AttendBlockAvx2(const float* q, int group, const void* k, const void* v, GgmlType dtype, int n,
                     int head_dim, float* m, float* l, float* acc, const KvBlockRef* ahead);
// Packs rows [r0, r0 + 16) (clamped to w.rows; missing rows repeat the last)
// and columns [k0, k0 + kc) of a float-type matrix (F32/F16/BF16) as fp32,
// k-major: out[k][16]. Used by the AVX2 and AVX-512 float GEMMs.
void PackFloatPanel16Avx2(const WeightView& w, int64_t r0, int64_t k0, int64_t kc, float* out);
// Columns [k0, k0 + kc) of load-time panel `p` of an F16/BF16 matrix's copy
// (`packed`, PrepackAvx2's [k][16] halves) as fp32: out[k][16], the values
// PackFloatPanel16Avx2 gives for the same rows.
void ConvertFloatPanelAvx2(const WeightView& w, const uint8_t* packed, int64_t p, int64_t k0,
                           int64_t kc, float* out);

// Quantizes m activation rows with QuantizeActsAvx2 into this thread's
// scratch buffer (rows in parallel when there are many); valid until the
// thread's next call.
QuantizedActs QuantizeActsParallel(const float* x, int64_t m, int64_t cols, bool offset128,
                                   base::ThreadPool& pool);

// LDTILECFG's 64-byte operand (palette 1): tile t is rows[t] rows of colsb[t]
// bytes; tiles left at zero are off. Shared by the AMX-INT8 GEMMs
// (kernels_avx512.cc) and the encoder's AMX-BF16 GEMM.
struct alignas(64) AmxTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

#if defined(__x86_64__)
// LDTILECFG of cfg. Not GCC 12's _tile_loadconfig: its asm operand covers only
// the first 8 bytes of the config, so the compiler may drop the stores of rows
// and colsb as dead (seen: every tile left unconfigured, the first tile
// instruction SIGILL). This operand is the whole 64-byte object.
inline void LoadAmxTileConfig(const AmxTileConfig& cfg) {
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}
#endif

// --- AVX-512 (kernels_avx512.cc); only called when DetectIsa() allows ----------
// `vnni` selects the VPDPBUSD quantized kernels; without it quantized types
// fall back to the AVX2 kernels (float types still use 512-bit FMA).
// `packed`, when not null, is w's load-time copy (PrepackAvx2): the VNNI
// Q4_0 / Q8_0 GEMM then fills its panels from it (the same panel bytes).
// `amx` (with `vnni`; Isa::kAvx512Amx): the quantized GEMMs on per-call
// panels form their integer block dots on AMX-INT8 tiles (the same bits).
void MatMulAvx512(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool,
                  bool vnni, const uint8_t* packed = nullptr, bool amx = false);
// AttendBlockFn with zmm: each score one fma chain over 16-lane pieces of
// the dims, 16 scores' lanes summed in one shuffle tree, the values pass
// two heads at a time (head_dim 16, 32, 64 or 128; otherwise, and past 64
// keys, AttendBlockAvx2). Not the AVX2 kernel's bits (other sums), the same
// bits for a head whatever the group size or batch.
void AttendBlockAvx512(const float* q, int group, const void* k, const void* v, GgmlType dtype,
                       int n, int head_dim, float* m, float* l, float* acc,
                       const KvBlockRef* ahead);

// --- Weights repacked once at load (WeightMatrix::Create) ---------------------
// A micro-kernel over one prepacked panel: y[i][0..nvalid) for the rows i of
// xa it was chosen for (ldy apart).
using PrepackedTileFn = void (*)(const uint8_t* panel, const QuantizedActs& xa, int64_t cols,
                                 float* y, int64_t ldy, int nvalid);

// The GEMM over prepacked panels (kernels.cc): each task owns a range of
// whole groups of panels; a group is one panel for m <= mr_max (each weight
// byte streamed once), else as many as fit `budget_bytes` (at most 8), which
// every activation tile (at most mr_max rows, balanced; tile(mr) gives its
// kernel) sweeps before the next group.
void PrepackedGemm(const WeightView& w, const uint8_t* packed, const QuantizedActs& xa, int64_t m,
                   float* y, base::ThreadPool& pool, int panel_rows, int64_t panel_bytes,
                   int mr_max, int64_t budget_bytes,
                   absl::FunctionRef<PrepackedTileFn(int mr)> tile);

// Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K in 8-row AVX2 panels, F16 and
// BF16 in 16-row k-major panels for the GEMV (layouts in kernels_avx2.cc):
// PrepackedAvx2Bytes is the size of the packed copy (0 for other types; the
// GGUF data's, rows padded to 8 or 16, Q4_K +2.8 %, Q5_K +2.3 %), PrepackAvx2 writes it
// (panels in parallel on `pool`), MatMulPrepackedAvx2 multiplies with it
// (F16 / BF16 above batch 3: through the per-call GEMM, its fp32 panels
// converted from the copy), bitwise equal to MatMulAvx2 at every batch size.
int64_t PrepackedAvx2Bytes(GgmlType type, int64_t rows, int64_t cols);
// Batches above this many rows take the per-call paths (MatMul).
inline constexpr int64_t kPrepackedMaxM = 16;

// ActiveStreamPrefetch() == StreamPrefetch::kL2 (SetStreamPrefetch stores it).
inline std::atomic<bool>& StreamPrefetchL2Slot() {
  static std::atomic<bool> slot{DetectStreamPrefetch() == StreamPrefetch::kL2};
  return slot;
}
inline bool StreamPrefetchToL2() { return StreamPrefetchL2Slot().load(std::memory_order_relaxed); }

// Software prefetch ahead of a kernel reading the load-time copy: a panel is
// its levels for every chunk (block or super-block), then their factors, and
// the panels of a task lie back to back. Chunk c of a panel of kStride bytes
// per chunk prefetches the lines that start in bytes
// [ahead + c * kStride, ahead + (c + 1) * kStride) from the panel's start:
// the levels and factors ahead in proportion, and past the panel's end the
// next panel's (this thread's next; another's, or unmapped memory past the
// copy, harmlessly: a prefetch never faults). A chunk's lines go out in
// kParts pieces, piece p from the kernel's p-th step through the chunk:
// PrefetchPartSpan(c, p) is piece p's byte range; over every c and p the
// pieces cover each line of the stream once.
struct PrefetchSpan {
  int64_t lo, hi;
};
template <int64_t kStride, int kParts>
constexpr PrefetchSpan PrefetchPartSpan(int64_t c, int part) {
  return {c * kStride + part * kStride / kParts, c * kStride + (part + 1) * kStride / kParts};
}

#if defined(__x86_64__)
inline constexpr int64_t kPrefetchAheadBytes = 12 * 1024;
// PrefetchAheadPart and PrefetchLine have internal linkage (the rule at the
// top of this file): each ISA's file compiles, and calls, its own copy under
// its own -m flags.
namespace {  // NOLINT(build/namespaces): per-TU copies on purpose

// The line at p, into L2 if `to_l2` (StreamPrefetchToL2(), read once per
// kernel call, outside its loops), else into L1 (the F16 / BF16 GEMVs issue
// one per 64 bytes of their stream).
// Volatile asm, not _mm_prefetch: GCC 12's dead-code elimination deleted
// every PrefetchAheadPart<1680, 32> loop (pieces of at most one line) as a
// loop without side effects.
inline void PrefetchLine(const void* p, bool to_l2) {
  const char& line = *static_cast<const char*>(p);
  if (to_l2) {
    __asm__ volatile("prefetcht1 %0" : : "m"(line));
  } else {
    __asm__ volatile("prefetcht0 %0" : : "m"(line));
  }
}

// Piece `part` of chunk c's lines (PrefetchPartSpan), kPrefetchAheadBytes
// ahead. The hardware prefetchers alone left batch-1 decode latency-bound on
// an AVX-512 Zen 5 VM (Q4_0 at 8.5 GB/s of 31); 4-16 KiB ahead gave 18-26
// GB/s. All of a chunk's lines at once (18-27 PREFETCHT1 in a row for a
// K-quant super-block of 8 rows) left the Xeon's batch-1 K-quant kernels
// 1.2-1.5x slower than pieces of 1-3 lines spread over the chunk's steps,
// Q8_0's 1.2x (docs/benchmarks.md).
template <int64_t kStride, int kParts>
inline void PrefetchAheadPart(const uint8_t* panel, int64_t c, int part, bool to_l2) {
  const PrefetchSpan span = PrefetchPartSpan<kStride, kParts>(c, part);
  const uintptr_t base = reinterpret_cast<uintptr_t>(panel) + kPrefetchAheadBytes;
  for (uintptr_t a = (base + span.lo + 63) & ~uintptr_t{63}; a < base + span.hi; a += 64) {
    PrefetchLine(reinterpret_cast<const void*>(a), to_l2);
  }
}

// The lines that part `part` of `parts` of a QuantGemmPanels tile call's
// `ahead` bytes prefetches: [lo, hi) in steps of 64, the lines that start in
// the part, so that the parts (and the calls' consecutive ranges) cover each
// line once.
inline PrefetchSpan AheadPartLines(AheadBytes ahead, int64_t part, int64_t parts) {
  const int64_t base = static_cast<int64_t>(reinterpret_cast<uintptr_t>(ahead.p));
  const int64_t lo = base + part * ahead.bytes / parts;
  const int64_t hi = base + (part + 1) * ahead.bytes / parts;
  return {(lo + 63) & ~int64_t{63}, hi};
}
inline void PrefetchAheadBytesPart(AheadBytes ahead, int64_t part, int64_t parts, bool to_l2) {
  const PrefetchSpan lines = AheadPartLines(ahead, part, parts);
  for (int64_t a = lines.lo; a < lines.hi; a += 64) {
    PrefetchLine(reinterpret_cast<const void*>(static_cast<uintptr_t>(a)), to_l2);
  }
}

}  // namespace
#endif
// The same under Isa::kAvx512Amx: the per-call panels' AMX-INT8 GEMM beats
// the copy's kernels from about batch 12 (Q8_0 from 9; docs/benchmarks.md).
inline constexpr int64_t kPrepackedAmxMaxM = 8;
// Q4_K, Q5_K and Q6_K under VNNI: the copy's kernels for them (512-bit VNNI
// at batch 1, the AVX2 ones at batch 2) give way above this to the VNNI level
// GEMM (up to batch 8 reading the copy as it is, beyond that filling
// per-call panels from it).
inline constexpr int64_t kPrepackedLevelsVnniMaxM = 2;
// Q5_K under AVX2 (and AVX-512 without VNNI, which runs the same level
// kernels): the copy's kernel decodes the fifth bits once per
// activation tile of 4 rows; from 4 tiles up the per-call panels (decoded once
// per call) are faster (5632x2048 at batch 16, 1 thread: 3.04 vs 2.72 ms;
// batch 8: 1.63 vs 1.98).
inline constexpr int64_t kPrepackedQ5KAvx2MaxM = 8;
// The copy's K-quant panels (8 rows; layout in kernels_avx2.cc), which the
// per-call level GEMMs also read: per super-block the level vectors, and
// after all of them the factors.
inline constexpr int64_t kQ4KLevelBytes8 = 4 * 8 * 32;
inline constexpr int64_t kQ4KFactorBytes8 = 2 * 2 * 8 + 2 * 8 * 8;
inline constexpr int64_t kQ5KLevelBytes8 = 5 * 8 * 32;  // qh, then Q4_K's qs vectors
inline constexpr int64_t kQ5KFactorBytes8 = kQ4KFactorBytes8;
inline constexpr int64_t kQ6KLevelBytes8 = (2 * 2 * 8 + 2 * 8) * 32;
inline constexpr int64_t kQ6KFactorBytes8 = 2 * 8 + 16 * 8;
void PrepackAvx2(const WeightView& w, uint8_t* out, base::ThreadPool& pool);
// `q8_no_min`: w is Q8_0 and none of its quants is -128 (Q8NoMinQuant), so
// batches of 1-2 may take the kernel that moves the sign trick onto the
// weights (sign(w, x) times |x|; -128 has no positive in int8).
void MatMulPrepackedAvx2(const WeightView& w, const uint8_t* packed, const float* x, int64_t m,
                         float* y, base::ThreadPool& pool, bool q8_no_min = false);
// Whether no quant of a Q8_0 matrix is -128 (ggml's quantizer never writes
// it; other writers may). Scans the data once, at load.
bool Q8NoMinQuant(const WeightView& w);
// Bytes of one 8-row panel of the quantized layouts (0: not such a type).
int64_t PrepackedPanelBytesAvx2(GgmlType type, int64_t cols);
// MatMulPrepackedAvx2 under the AVX-512 ISAs (kernels_avx512.cc): the same
// layouts; F16 / BF16 (m <= kGemv512MaxM only) with 512-bit FMA, with `vnni` Q4_0 and
// Q8_0 with vpdpbusd, and Q4_K / Q5_K / Q6_K at batch 1 with 512-bit vpdpbusd
// (the same integer dots, the same fp32 operations per lane: the same bits),
// the other types as MatMulPrepackedAvx2.
inline constexpr int64_t kGemv512MaxM = 8;
void MatMulPrepackedAvx512(const WeightView& w, const uint8_t* packed, const float* x, int64_t m,
                           float* y, base::ThreadPool& pool, bool vnni);

}  // namespace tandem::engine::internal
