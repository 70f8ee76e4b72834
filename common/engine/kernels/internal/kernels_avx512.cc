// AVX-512 (F/BW/VL/DQ, optionally VNNI) matrix multiply. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mamx-tile -mamx-int8;
// only called when DetectIsa() saw the features and the OS enabled ZMM state
// (xgetbv), the AMX kernels only under Isa::kAvx512Amx (tile state granted).
//
// Same design as the AVX2 kernels (weight rows in lanes, per-call panel
// repacking, see kernels_avx2.cc) with 16-row panels:
//   Q4_0 (VNNI): vpdpbusd(acc, nibbles as u8 [0,15], broadcast x as s8);
//         4-byte dot products accumulate straight into int32 (no int16
//         saturation), the -8 offset is -8 * sum(x_block) per activation block.
//   Q8_0 (VNNI): vpdpbusd(acc, broadcast(x + 128) as u8, w as s8) minus
//         128 * sum(w) per row and block, precomputed at pack time
//         (AVX-512 has no vpsignb, so no sign trick).
//   F32/F16/BF16: panels converted to fp32 (k-major, 16 rows = one zmm) by the
//         AVX2 packer, 12x16 FMA micro-kernel.
//   Q4_1 ... Q6_K (VNNI): kernels_levels.inc with vpdpbusd, 8-row tiles.
//   With AMX-INT8 (Isa::kAvx512Amx; -mamx-tile -mamx-int8, tile instructions
//         only in the AMX kernels): the same panels, block dots on tiles.
// Per-call batch <= 3 float GEMVs and, without VNNI, quantized types use the
// AVX2 kernels (bandwidth-bound or no better instruction here).
// Load-time repacked weights (the AVX2 layouts, WeightMatrix::Create) at
// decode-sized batches: F16/BF16 GEMV with zmm, Q4_0/Q8_0 with 256-bit
// vpdpbusd (Q4_0 at batch 1 and Q4_K/Q5_K/Q6_K at batch 1 with 512-bit
// vpdpbusd, two of the copy's 8-row dword steps per zmm), the other types
// and batches through the AVX2 prepacked kernels; all with software
// prefetch (MatMulPrepackedAvx512).

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

// GCC 12's avx512fintrin.h unpack intrinsics start from _mm512_undefined_*,
// which -Wmaybe-uninitialized reports at every use (a false positive), and
// -Wuninitialized where _mm512_reduce_* inline into a caller. Clang has no
// such warning.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "common/base/logging.h"
#include "common/engine/kernels/internal/kernels_internal.h"

namespace tandem::engine::internal {
namespace {

inline __m512i Bcast32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __mmask16 RowMask(int nvalid) { return static_cast<__mmask16>((1u << nvalid) - 1); }

// Named accumulators, so GCC keeps them in registers (unused ones vanish).
#define TANDEM_FOR_MR12(X) \
  X(0)                     \
  if constexpr (MR > 1) {  \
    X(1)                   \
  }                        \
  if constexpr (MR > 2) {  \
    X(2)                   \
  }                        \
  if constexpr (MR > 3) {  \
    X(3)                   \
  }                        \
  if constexpr (MR > 4) {  \
    X(4)                   \
  }                        \
  if constexpr (MR > 5) {  \
    X(5)                   \
  }                        \
  if constexpr (MR > 6) {  \
    X(6)                   \
  }                        \
  if constexpr (MR > 7) {  \
    X(7)                   \
  }                        \
  if constexpr (MR > 8) {  \
    X(8)                   \
  }                        \
  if constexpr (MR > 9) {  \
    X(9)                   \
  }                        \
  if constexpr (MR > 10) { \
    X(10)                  \
  }                        \
  if constexpr (MR > 11) { \
    X(11)                  \
  }

// ---------------------------------------------------------------------------
// Quantized (VNNI)
// ---------------------------------------------------------------------------

constexpr int kPanelRows = 16;
static_assert(kPanelRows == kFloatPanelRows, "the float GEMM driver packs 16-row panels");
// Packed block of 16 rows: float d[16] | int32 corr[16] | 8 groups of 16 rows
// x 4 bytes (k = 4g..4g+3). Q4_0: nibbles as u8, corr unused. Q8_0: w as s8,
// corr = 128 * sum(w) per row.
constexpr int64_t kPanelBlock = 64 + 64 + 512;
constexpr int kQMr = 8;

// out[d] = dword d of the 16 bytes at p[r], rows r = 0..15 as lanes.
inline void Transpose4x16(const uint8_t* const p[16], __m512i out[4]) {
  auto load4 = [&](int r) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p[r])));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[r + 4])), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[r + 8])), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[r + 12])), 3);
  };
  const __m512i a = load4(0);  // rows 0, 4, 8, 12 in the four 128-bit lanes
  const __m512i b = load4(1);
  const __m512i c = load4(2);
  const __m512i e = load4(3);
  const __m512i t0 = _mm512_unpacklo_epi32(a, b);
  const __m512i t1 = _mm512_unpackhi_epi32(a, b);
  const __m512i t2 = _mm512_unpacklo_epi32(c, e);
  const __m512i t3 = _mm512_unpackhi_epi32(c, e);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// The 32 bytes at lo + at in the low half and those at hi + at in the high
// half: 16 rows from two 8-row panels of a load-time copy (rows in lanes).
inline __m512i LoadPanelPair(const uint8_t* lo, const uint8_t* hi, int64_t at) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + at))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + at)), 1);
}

// Packs rows [r0, r0 + 16) (missing rows repeat the last one; their results
// are never stored) of a Q4_0/Q8_0 matrix, all blocks. `signed_q4` (the AMX
// GEMM): Q4_0's levels stored as q - 8 (s8) instead of q (u8). The d values and the
// transposed dwords (t[d] = dword d of each row's quant bytes, rows in lanes)
// are gathered from w's rows, or, with `packed` (w's load-time copy), read
// from its 8-row panels r0 / 8 and r0 / 8 + 1, back to back, which hold the
// same values (PrepackPanel8; past the last panel the first half is
// repeated): two contiguous streams instead of 16 rows.
void PackQuantPanel16(const WeightView& w, int64_t r0, const uint8_t* packed, uint8_t* out,
                      bool signed_q4 = false) {
  const int64_t nb = w.cols / kQBlock;
  const bool q4 = w.type == GgmlType::kQ4_0;
  const int64_t block_bytes = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const uint8_t* rows[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) {
    rows[r] = w.data + std::min(r0 + r, w.rows - 1) * w.row_bytes;
  }
  const int64_t copy_qbytes = q4 ? 128 : 256;
  const int64_t panel8 = PrepackedPanelBytesAvx2(w.type, w.cols);
  const uint8_t* lo = packed != nullptr ? packed + r0 / 8 * panel8 : nullptr;
  const uint8_t* hi = packed != nullptr && r0 / 8 + 1 < (w.rows + 7) / 8 ? lo + panel8 : lo;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i ones_u8 = _mm512_set1_epi8(1);
  // 16 row streams are more than the hardware prefetchers follow (as in
  // PackLevelPanel): each row's data kPrefetchBytes ahead is requested by
  // hand, once per new cache line.
  constexpr int64_t kPrefetchBytes = 512;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i h;
    __m512i t[8];
    if (lo != nullptr) {
      h = _mm256_inserti128_si256(
          _mm256_castsi128_si256(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + nb * copy_qbytes + 16 * b))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + nb * copy_qbytes + 16 * b)), 1);
      for (int i = 0; i < (q4 ? 4 : 8); ++i) {
        t[i] = LoadPanelPair(lo, hi, b * copy_qbytes + 32 * i);
      }
    } else {
      const int64_t off = b * block_bytes;
      if (off % 64 < block_bytes) {
        const int64_t ahead = std::min(off + kPrefetchBytes, w.row_bytes - 1);
        for (int r = 0; r < kPanelRows; ++r) {
          __builtin_prefetch(rows[r] + ahead);
        }
      }
      const uint8_t* p[kPanelRows];
      const uint8_t* p2[kPanelRows];
      alignas(32) uint16_t hs[kPanelRows];
      for (int r = 0; r < kPanelRows; ++r) {
        const uint8_t* blk = rows[r] + off;
        hs[r] = LoadU16(blk);
        p[r] = blk + 2;
        p2[r] = blk + 18;
      }
      h = _mm256_load_si256(reinterpret_cast<const __m256i*>(hs));
      Transpose4x16(p, t);
      if (!q4) {
        Transpose4x16(p2, t + 4);
      }
    }
    _mm512_store_ps(reinterpret_cast<float*>(out), _mm512_cvtph_ps(h));
    auto* q = reinterpret_cast<__m512i*>(out + 128);
    if (q4) {
      const __m512i bias = _mm512_set1_epi8(signed_q4 ? 8 : 0);
      for (int d = 0; d < 4; ++d) {
        _mm512_store_si512(q + d, _mm512_sub_epi8(_mm512_and_si512(t[d], m4), bias));
        _mm512_store_si512(q + 4 + d,
                           _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(t[d], 4), m4), bias));
      }
      _mm512_store_si512(reinterpret_cast<__m512i*>(out + 64), _mm512_setzero_si512());
    } else {
      __m512i sum = _mm512_setzero_si512();
      for (int g = 0; g < 8; ++g) {
        _mm512_store_si512(q + g, t[g]);
        sum = _mm512_dpbusd_epi32(sum, ones_u8, t[g]);  // per-row sum of the 4 bytes
      }
      _mm512_store_si512(reinterpret_cast<__m512i*>(out + 64), _mm512_slli_epi32(sum, 7));
    }
    out += kPanelBlock;
  }
}

// y[i][0..nvalid) for i < MR (<= 8) from one 16-row panel.
template <int MR, bool kQ4>
void KernelVnni(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y, int64_t ldy,
                int nvalid) {
  static_assert(MR >= 1 && MR <= kQMr);
  const int64_t nb = xa.nb;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0,
         acc5 = acc0, acc6 = acc0, acc7 = acc0, acc8, acc9, acc10, acc11;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t *x1 = x0 + cols, *x2 = x0 + 2 * cols, *x3 = x0 + 3 * cols, *x4 = x0 + 4 * cols;
  const uint8_t *x5 = x0 + 5 * cols, *x6 = x0 + 6 * cols, *x7 = x0 + 7 * cols;
  const uint8_t *x8 = nullptr, *x9 = nullptr, *x10 = nullptr, *x11 = nullptr;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = panel + b * kPanelBlock;
    const auto* wq = reinterpret_cast<const __m512i*>(pb + 128);
    const int64_t xo = b * kQBlock;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
            s7 = s0, s8, s9, s10, s11;
    for (int g = 0; g < 8; ++g) {
      const __m512i w = _mm512_load_si512(wq + g);
      if constexpr (kQ4) {
#define VNNI_STEP(I) s##I = _mm512_dpbusd_epi32(s##I, w, Bcast32(x##I + xo + 4 * g));
        TANDEM_FOR_MR12(VNNI_STEP)
#undef VNNI_STEP
      } else {
#define VNNI_STEP(I) s##I = _mm512_dpbusd_epi32(s##I, Bcast32(x##I + xo + 4 * g), w);
        TANDEM_FOR_MR12(VNNI_STEP)
#undef VNNI_STEP
      }
    }
    const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(pb));
    const __m512i corr = _mm512_load_si512(reinterpret_cast<const __m512i*>(pb + 64));
#define VNNI_EPI(I)                                                                           \
  {                                                                                           \
    const __m512i t = kQ4 ? _mm512_sub_epi32(s##I, _mm512_set1_epi32(8 * xa.sum[I * nb + b])) \
                          : _mm512_sub_epi32(s##I, corr);                                     \
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(xa.d[I * nb + b]));  \
    acc##I = _mm512_fmadd_ps(f, dw, acc##I);                                                  \
  }
    TANDEM_FOR_MR12(VNNI_EPI)
#undef VNNI_EPI
  }
#define VNNI_STORE(I) _mm512_mask_storeu_ps(y + I * ldy, RowMask(nvalid), acc##I);
  TANDEM_FOR_MR12(VNNI_STORE)
#undef VNNI_STORE
}

template <bool kQ4>
void VnniTile(int mr, const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
              int64_t ldy, int nvalid) {
  switch (mr) {
    case 1:
      return KernelVnni<1, kQ4>(panel, xa, cols, y, ldy, nvalid);
    case 2:
      return KernelVnni<2, kQ4>(panel, xa, cols, y, ldy, nvalid);
    case 3:
      return KernelVnni<3, kQ4>(panel, xa, cols, y, ldy, nvalid);
    case 4:
      return KernelVnni<4, kQ4>(panel, xa, cols, y, ldy, nvalid);
    case 5:
      return KernelVnni<5, kQ4>(panel, xa, cols, y, ldy, nvalid);
    case 6:
      return KernelVnni<6, kQ4>(panel, xa, cols, y, ldy, nvalid);
    case 7:
      return KernelVnni<7, kQ4>(panel, xa, cols, y, ldy, nvalid);
    default:
      return KernelVnni<8, kQ4>(panel, xa, cols, y, ldy, nvalid);
  }
}

// ---------------------------------------------------------------------------
// AMX-INT8 (Isa::kAvx512Amx)
// ---------------------------------------------------------------------------
// The 16-row VNNI panels (PackQuantPanel16 above, PackLevelPanel in
// kernels_levels.inc) hold each 32-block of their rows as 8 groups of 16 rows
// x 4 bytes: AMX's B layout for K = 32 (8 tile rows of 64 bytes), read in
// place. One TDPB*D multiplies up to 16 activation rows (an A tile: mr rows of
// one block's quantized activations, read in place, `cols` bytes apart) by
// one block into a C tile of mr x 16 int32: the exact integer block dots that
// the VNNI kernels form in zmm lanes (vpdpbusd adds the same products; here
// any offset correction is either already out, or subtracted as there). C is
// stored and the VNNI kernel's fp32 epilogue runs on its rows unchanged, so
// every result has the VNNI path's bits, at any batch size. Two C tiles per
// step (two blocks, or Q6_K's two 16-halves, LevelKernelAmx): one's products
// run while the other's dots are stored and scaled.

// Tiles 0-1: C (mr rows x 16 int32); 2-3: A (mr rows x kbytes); 4-5: B
// (kbytes / 4 rows x 64 bytes). Loaded per call, released at its end (no
// dirty tile state between calls: context switches stay cheap).
inline void ConfigureAmxInt8(int mr, int kbytes) {
  AmxTileConfig cfg;
  for (int t = 0; t < 2; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(mr);
    cfg.colsb[t] = 64;
    cfg.rows[t + 2] = static_cast<uint8_t>(mr);
    cfg.colsb[t + 2] = static_cast<uint16_t>(kbytes);
    cfg.rows[t + 4] = static_cast<uint8_t>(kbytes / 4);
    cfg.colsb[t + 4] = 64;
  }
  LoadAmxTileConfig(cfg);
}

constexpr int kAmxMr = 16;  // activation rows per A tile

// f(std::integral_constant<int, mr>{}) for mr in [1, Max] (larger: Max), for
// the micro-kernels templated on their activation rows (the float GEMM's,
// Max = kFMr, and the AMX ones, Max = kAmxMr).
template <int Max, typename F>
void WithMr(int mr, F&& f) {
  if constexpr (Max > 1) {
    if (mr < Max) {
      return WithMr<Max - 1>(mr, std::forward<F>(f));
    }
  }
  f(std::integral_constant<int, Max>{});
}

// C tile 0 += A tile 2 x B tile 4 (kFirst), or C 1 += A 3 x B 5: s8
// activations against s8 weights (TDPBSSD: Q8_0's quants, Q4_0's levels
// minus 8), so the tile holds the block's true integer dot, which KernelVnni
// forms as its u8 x s8 dot minus the offset term. (The intrinsics take tile
// numbers as literals.)
template <bool kFirst>
inline void AmxQuantDot() {
  if constexpr (kFirst) {
    _tile_dpbssd(0, 2, 4);
  } else {
    _tile_dpbssd(1, 3, 5);
  }
}

// KernelVnni's epilogue of block b (dw: the panel block's weight scales)
// from its integer dots s[i] (one C tile's rows, offsets already out).
template <int MR>
inline void AmxQuantTerms(const uint8_t* pb, const int32_t (*s)[16], const QuantizedActs& xa,
                          int64_t b, __m512 acc[MR]) {
  const int64_t nb = xa.nb;
  const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(pb));
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const __m512i dot = _mm512_load_si512(reinterpret_cast<const __m512i*>(s[i]));
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(xa.d[i * nb + b]));
    acc[i] = _mm512_fmadd_ps(f, dw, acc[i]);
  }
}

// KernelVnni's y[i][0..nvalid) for i < MR (<= 16) from one 16-row panel
// (PackQuantPanel16 with signed levels), the block dots on tiles; activations
// quantized without the + 128.
template <int MR>
void KernelAmx(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y, int64_t ldy,
               int nvalid) {
  const int64_t nb = xa.nb;
  const auto* x = reinterpret_cast<const uint8_t*>(xa.qs);
  alignas(64) int32_t c[2][MR][16];
  __m512 acc[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc[i] = _mm512_setzero_ps();
  }
  ConfigureAmxInt8(MR, kQBlock);
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, x + b * kQBlock, cols);
    _tile_loadd(4, panel + b * kPanelBlock + 128, 64);
    AmxQuantDot<true>();
    _tile_loadd(3, x + (b + 1) * kQBlock, cols);
    _tile_loadd(5, panel + (b + 1) * kPanelBlock + 128, 64);
    AmxQuantDot<false>();
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    AmxQuantTerms<MR>(panel + b * kPanelBlock, c[0], xa, b, acc);
    AmxQuantTerms<MR>(panel + (b + 1) * kPanelBlock, c[1], xa, b + 1, acc);
  }
  if (b < nb) {
    _tile_zero(0);
    _tile_loadd(2, x + b * kQBlock, cols);
    _tile_loadd(4, panel + b * kPanelBlock + 128, 64);
    AmxQuantDot<true>();
    _tile_stored(0, c[0], 64);
    AmxQuantTerms<MR>(panel + b * kPanelBlock, c[0], xa, b, acc);
  }
  _tile_release();
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, RowMask(nvalid), acc[i]);
  }
}

void AmxTile(int mr, const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
             int64_t ldy, int nvalid) {
  WithMr<kAmxMr>(mr,
                 [&](auto n) { KernelAmx<decltype(n)::value>(panel, xa, cols, y, ldy, nvalid); });
}

constexpr int64_t kPanelBudgetBytes = 256 * 1024;

void MatMulQuantVnni(const WeightView& w, const uint8_t* packed, const float* x, int64_t m,
                     float* y, base::ThreadPool& pool, bool amx) {
  static thread_local ScratchBuffer act_scratch;
  const QuantizedActs xa = AllocQuantizedActs(act_scratch, m, w.cols);
  // Q8_0 puts activations in vpdpbusd's unsigned operand: store x + 128 (not
  // for AMX's signed x signed TDPBSSD).
  const bool offset = w.type == GgmlType::kQ8_0 && !amx;
  if (m * w.cols >= (int64_t{1} << 16)) {
    pool.ParallelFor(m, 1, [&](int64_t begin, int64_t end) {
      QuantizeActsAvx2(x + begin * w.cols, end - begin, w.cols, offset,
                       RowsFrom(xa, begin, w.cols));
    });
  } else {
    QuantizeActsAvx2(x, m, w.cols, offset, xa);
  }
  const bool q4 = w.type == GgmlType::kQ4_0;
  QuantGemmPanels(
      w, xa, m, y, pool, kPanelRows, xa.nb * kPanelBlock, amx ? kAmxMr : kQMr, kPanelBudgetBytes,
      [&](int64_t r0, uint8_t* out) { PackQuantPanel16(w, r0, packed, out, /*signed_q4=*/amx); },
      [&](int mr, const uint8_t* panel, const QuantizedActs& xi, float* yt, int nvalid,
          AheadBytes /*ahead*/) {
        if (amx) {
          AmxTile(mr, panel, xi, w.cols, yt, w.rows, nvalid);
        } else if (q4) {
          VnniTile<true>(mr, panel, xi, w.cols, yt, w.rows, nvalid);
        } else {
          VnniTile<false>(mr, panel, xi, w.cols, yt, w.rows, nvalid);
        }
      });
}

// ---------------------------------------------------------------------------
// Float GEMM
// ---------------------------------------------------------------------------

constexpr int kFMr = 12;

template <int MR>
void KernelF32x16(const float* panel, int64_t kc, const float* x, float* y, int64_t ldy, int nvalid,
                  bool accumulate) {
  static_assert(MR >= 1 && MR <= kFMr);
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0,
         c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t k = 0; k < kc; ++k, x += MR) {
    const __m512 w = _mm512_load_ps(panel + k * kPanelRows);
#define F_STEP(I) c##I = _mm512_fmadd_ps(w, _mm512_set1_ps(x[I]), c##I);
    TANDEM_FOR_MR12(F_STEP)
#undef F_STEP
  }
  const __mmask16 mask = RowMask(nvalid);
#define F_STORE(I)                                                 \
  {                                                                \
    float* yi = y + I * ldy;                                       \
    if (accumulate) {                                              \
      c##I = _mm512_add_ps(c##I, _mm512_maskz_loadu_ps(mask, yi)); \
    }                                                              \
    _mm512_mask_storeu_ps(yi, mask, c##I);                         \
  }
  TANDEM_FOR_MR12(F_STORE)
#undef F_STORE
}

void KernelF32Tile(int mr, const float* panel, int64_t kc, const float* x, float* y, int64_t ldy,
                   int nvalid, bool accumulate) {
  WithMr<kFMr>(mr, [&](auto n) {
    KernelF32x16<decltype(n)::value>(panel, kc, x, y, ldy, nvalid, accumulate);
  });
}

// Two panels (32 weight rows) per activation row: two weight loads and MR
// broadcasts feed 2 MR FMAs (KernelF32x16: 1 + MR loads per MR), so the loads
// no longer bound the FMAs. Per lane the same FMAs in k order: the bits of
// two KernelF32x16 calls.
//
// Src: the panels' values as fp32 (GgmlType::kF32, strides in floats) or the
// load-time copy's F16 / BF16 halves, widened as loaded (strides in bytes).
template <GgmlType Src>
inline __m512 LoadPanelRow(const void* base, int64_t k) {
  if constexpr (Src == GgmlType::kF32) {
    return _mm512_load_ps(static_cast<const float*>(base) + k * kPanelRows);
  } else {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint8_t*>(base) + k * kPanelRows * 2));
    if constexpr (Src == GgmlType::kF16) {
      return _mm512_cvtph_ps(h);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

template <int MR, GgmlType Src, typename T>
void KernelF32x32(const T* panel, int64_t panel_stride, int64_t kc, const float* x, float* y,
                  int64_t ldy, int nvalid2, bool accumulate) {
  static_assert(MR >= 1 && MR <= kFMr);
  const T* panel2 = panel + panel_stride;
  // Reading the copy (few tiles, the first from DRAM): both panels' lines
  // kPrefetchAheadBytes ahead, one line of each per two k.
  constexpr bool kFromCopy = Src != GgmlType::kF32;
  const bool to_l2 = kFromCopy && StreamPrefetchToL2();
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0,
         c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  __m512 d0 = c0, d1 = c0, d2 = c0, d3 = c0, d4 = c0, d5 = c0, d6 = c0, d7 = c0, d8 = c0, d9 = c0,
         d10 = c0, d11 = c0;
  for (int64_t k = 0; k < kc; ++k, x += MR) {
    if constexpr (kFromCopy) {
      if ((k & 1) == 0) {
        PrefetchLine(reinterpret_cast<const uint8_t*>(panel) + k * kPanelRows * 2 +
                         kPrefetchAheadBytes,
                     to_l2);
        PrefetchLine(reinterpret_cast<const uint8_t*>(panel2) + k * kPanelRows * 2 +
                         kPrefetchAheadBytes,
                     to_l2);
      }
    }
    const __m512 w = LoadPanelRow<Src>(panel, k);
    const __m512 w2 = LoadPanelRow<Src>(panel2, k);
#define F_STEP(I)                           \
  {                                         \
    const __m512 xb = _mm512_set1_ps(x[I]); \
    c##I = _mm512_fmadd_ps(w, xb, c##I);    \
    d##I = _mm512_fmadd_ps(w2, xb, d##I);   \
  }
    TANDEM_FOR_MR12(F_STEP)
#undef F_STEP
  }
  const __mmask16 mask2 = RowMask(nvalid2);
#define F_STORE(I)                                                                 \
  {                                                                                \
    float* yi = y + I * ldy;                                                       \
    if (accumulate) {                                                              \
      c##I = _mm512_add_ps(c##I, _mm512_loadu_ps(yi));                             \
      d##I = _mm512_add_ps(d##I, _mm512_maskz_loadu_ps(mask2, yi + kPanelRows));   \
    }                                                                              \
    _mm512_storeu_ps(yi, c##I);                                                    \
    _mm512_mask_storeu_ps(yi + kPanelRows, mask2, d##I);                           \
  }
  TANDEM_FOR_MR12(F_STORE)
#undef F_STORE
}

void KernelF32Tile2(int mr, const float* panel, int64_t panel_stride, int64_t kc, const float* x,
                    float* y, int64_t ldy, int nvalid2, bool accumulate) {
  WithMr<kFMr>(mr, [&](auto n) {
    KernelF32x32<decltype(n)::value, GgmlType::kF32>(panel, panel_stride, kc, x, y, ldy, nvalid2,
                                                     accumulate);
  });
}

template <GgmlType Src>
void KernelHalfTile2(int mr, const uint8_t* half, int64_t stride, int64_t kc, const float* x,
                     float* y, int64_t ldy, int nvalid2, bool accumulate) {
  WithMr<kFMr>(mr, [&](auto n) {
    KernelF32x32<decltype(n)::value, Src>(half, stride, kc, x, y, ldy, nvalid2, accumulate);
  });
}

// Level types (Q4_1 ... Q6_K) with VNNI.
#include "common/engine/kernels/internal/kernels_levels.inc"

// ---------------------------------------------------------------------------
// Load-time repacked Q4_0 / Q8_0 (the AVX2 8-row layouts, kernels_avx2.cc)
// ---------------------------------------------------------------------------
// The AVX2 kernels widen vpmaddubsw's int16 pairs (vpaddw, vpmaddwd) and,
// at batch 1, chain every product of a block through one register; here
// vpdpbusd (256-bit, EVEX, x broadcast from memory) accumulates straight
// into int32, into up to 8 independent registers per activation row that
// are added at the end of the block. The integer block dot is exact either
// way, and the fp32 epilogue is KernelQ4Prepacked's / KernelQ8Prepacked's,
// so the bits are the same.

constexpr int kPP8Rows = 8;
constexpr int kPPVnniMr = 8;

inline __m256i Bcast32y(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline void StorePartial8(float* dst, __m256 v, int n) {
  _mm256_mask_storeu_ps(dst, static_cast<__mmask8>((1u << n) - 1), v);
}

// Independent accumulators per activation row: 8 steps per block in all.
template <int MR>
constexpr int VnniSplit() {
  return MR == 1 ? 8 : MR == 2 ? 4 : MR <= 4 ? 2 : 1;
}

template <int K>
inline __m256i SumTree(const __m256i* s) {
  if constexpr (K == 1) {
    return s[0];
  } else {
    return _mm256_add_epi32(SumTree<K / 2>(s), SumTree<K / 2>(s + K / 2));
  }
}

// Q4_0 (kQ4: 16 nibble bytes per row and block, u8 levels against s8 x,
// minus 8 * sum(x)) or Q8_0 (32 signed bytes: |w| against sign(x, w)).
template <int MR, bool kQ4>
void KernelPrepackedVnni(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                         int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= kPPVnniMr);
  constexpr int K = VnniSplit<MR>();
  constexpr int64_t kQuantBytes = kQ4 ? 128 : 256;  // per block, 8 rows
  const int64_t nb = xa.nb;
  const uint8_t* scales = panel + nb * kQuantBytes;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[MR];
  const uint8_t* xr[MR];
  for (int i = 0; i < MR; ++i) {
    acc[i] = _mm256_setzero_ps();
    xr[i] = reinterpret_cast<const uint8_t*>(xa.qs) + i * cols;
  }
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = panel + b * kQuantBytes;
    const int64_t xo = b * kQBlock;
    __m256i s[MR][K];
    for (int i = 0; i < MR; ++i) {
      for (int k = 0; k < K; ++k) {
        s[i][k] = _mm256_setzero_si256();
      }
    }
    if constexpr (kQ4) {
#pragma GCC unroll 4
      for (int d = 0; d < 4; ++d) {
        if (d % 2 == 0) {
          PrefetchAheadPart<kQuantBytes + 2 * kPP8Rows, 2>(panel, b, d / 2, to_l2);
        }
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * d));
        const __m256i wl = _mm256_and_si256(raw, m4);
        const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        for (int i = 0; i < MR; ++i) {
          __m256i& sl = s[i][(2 * d) % K];
          __m256i& sh = s[i][(2 * d + 1) % K];
          sl = _mm256_dpbusd_epi32(sl, wl, Bcast32y(xr[i] + xo + 4 * d));
          sh = _mm256_dpbusd_epi32(sh, wh, Bcast32y(xr[i] + xo + 16 + 4 * d));
        }
      }
    } else {
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        if (g % 2 == 0) {
          PrefetchAheadPart<kQuantBytes + 2 * kPP8Rows, 4>(panel, b, g / 2, to_l2);
        }
        const __m256i sgn = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * g));
        const __m256i ab = _mm256_abs_epi8(sgn);
        for (int i = 0; i < MR; ++i) {
          __m256i& sg = s[i][g % K];
          sg = _mm256_dpbusd_epi32(sg, ab, _mm256_sign_epi8(Bcast32y(xr[i] + xo + 4 * g), sgn));
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + b * 2 * kPP8Rows)));
    for (int i = 0; i < MR; ++i) {
      __m256i t = SumTree<K>(s[i]);
      if constexpr (kQ4) {
        t = _mm256_sub_epi32(t, _mm256_set1_epi32(8 * xa.sum[i * nb + b]));
      }
      const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(xa.d[i * nb + b]));
      acc[i] = _mm256_fmadd_ps(f, dw, acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    StorePartial8(y + i * ldy, acc[i], nvalid);
  }
}

// The 512-bit batch-1 kernels below: vpermd index putting x's dwords p and
// p + 1 (of a 32-byte activation block) into the low and high 8 lanes, and
// the sum of a zmm's two 8-lane halves.
inline __m512i DwordPairIndex(int p) {
  return _mm512_add_epi32(
      _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), _mm512_set1_epi32(p));
}
inline __m256i FoldHalves(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// Q4_0 at batch 1 with 512-bit vectors: two of the block's dword steps per
// zmm (lanes 0-7 step d, 8-15 step d + 1, which the copy holds back to back),
// against x's dwords for the two steps broadcast into the two halves by one
// vpermd; the halves are added at the end of the block. Half the vector
// instructions of KernelPrepackedVnni<1, true> per block, the same exact
// integer dot and the same fp32 epilogue: the same bits.
void KernelQ4VnniZmm1(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                      int64_t ldy, int nvalid) {
  (void)cols;
  (void)ldy;
  const int64_t nb = xa.nb;
  const uint8_t* scales = panel + nb * 128;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // x dwords (steps d, d + 1): low nibbles of zmm 0 (steps 0, 1), of zmm 1
  // (steps 2, 3); high nibbles pair with dwords 4 + d.
  const __m512i lo0 = DwordPairIndex(0);
  const __m512i lo1 = DwordPairIndex(2);
  const __m512i hi0 = DwordPairIndex(4);
  const __m512i hi1 = DwordPairIndex(6);
  const auto* x = reinterpret_cast<const uint8_t*>(xa.qs);
  __m256 acc = _mm256_setzero_ps();
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = panel + b * 128;
    PrefetchAheadPart<128 + 2 * kPP8Rows, 2>(panel, b, 0, to_l2);
    const __m512i xv = _mm512_castsi256_si512(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kQBlock)));
    const __m512i r0 = _mm512_loadu_si512(q);
    const __m512i r1 = _mm512_loadu_si512(q + 64);
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(r0, m4),
                                     _mm512_permutexvar_epi32(lo0, xv));
    __m512i s1 =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(_mm512_srli_epi16(r0, 4), m4),
                            _mm512_permutexvar_epi32(hi0, xv));
    PrefetchAheadPart<128 + 2 * kPP8Rows, 2>(panel, b, 1, to_l2);
    s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(r1, m4), _mm512_permutexvar_epi32(lo1, xv));
    s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(r1, 4), m4),
                             _mm512_permutexvar_epi32(hi1, xv));
    const __m512i s = _mm512_add_epi32(s0, s1);
    __m256i t = FoldHalves(s);
    t = _mm256_sub_epi32(t, _mm256_set1_epi32(8 * xa.sum[b]));
    const __m256 dw = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + b * 2 * kPP8Rows)));
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(xa.d[b]));
    acc = _mm256_fmadd_ps(f, dw, acc);
  }
  StorePartial8(y, acc, nvalid);
}

// Q4_K (kQ5 false) or Q5_K at batch 1 on the copy with 512-bit VNNI: per
// pair j of sub-blocks each zmm holds two of the pair's dword steps (vectors
// g, g + 1 of the pair, back to back in the copy), whose low nibbles dot x's
// block 2j and high nibbles block 2j + 1, x's two dwords broadcast into the
// halves by vpermd; Q5_K's levels get their fifth bit (bit sb of the qh
// byte, moved to bit 4 as KernelQ5KPrepacked does). Then KernelQ4KPrepacked's
// / KernelQ5KPrepacked's fp32 epilogue in its order (the same exact dots, the
// same bits as the AVX2 copy kernels this replaces at batch 1).
template <bool kQ5>
void KernelK45VnniZmm1(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                       int64_t ldy, int nvalid) {
  (void)cols;
  (void)ldy;
  constexpr int64_t kLevelBytes = kQ5 ? kQ5KLevelBytes8 : kQ4KLevelBytes8;
  constexpr int64_t kFactorBytes = kQ5 ? kQ5KFactorBytes8 : kQ4KFactorBytes8;
  constexpr int kQsVector = kQ5 ? 8 : 0;  // Q5_K: the 8 qh vectors come first
  const int64_t nb = xa.nb;
  const int64_t n_chunks = nb / 8;
  const uint8_t* factors = panel + n_chunks * kLevelBytes;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m10 = _mm512_set1_epi8(0x10);
  const __m512i idx[4] = {DwordPairIndex(0), DwordPairIndex(2), DwordPairIndex(4),
                          DwordPairIndex(6)};
  const __m256 neg = _mm256_set1_ps(-0.0f);
  const auto* x = reinterpret_cast<const uint8_t*>(xa.qs);
  __m256 acc = _mm256_setzero_ps();
  const bool to_l2 = StreamPrefetchToL2();
  auto u8x8 = [](const uint8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  };
  // Bit sb of each byte of qh at bit 4 (others cleared).
  auto fifth = [&](__m512i qh, auto sbc) {
    constexpr int sb = decltype(sbc)::value;
    if constexpr (sb < 4) {
      return _mm512_and_si512(_mm512_slli_epi16(qh, 4 - sb), m10);
    } else if constexpr (sb == 4) {
      return _mm512_and_si512(qh, m10);
    } else {
      return _mm512_and_si512(_mm512_srli_epi16(qh, sb - 4), m10);
    }
  };
  for (int64_t c = 0; c < n_chunks; ++c) {
    const uint8_t* lv = panel + c * kLevelBytes;
    const uint8_t* f = factors + c * kFactorBytes;
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f)));
    const __m256 dmin =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f + 2 * kPP8Rows)));
    const uint8_t* sc = f + 4 * kPP8Rows;
    const uint8_t* mn = sc + 8 * kPP8Rows;
    auto pair = [&](auto jc) {
      constexpr int j = decltype(jc)::value;
      const int64_t b = c * 8 + 2 * j;
      const __m512i xl = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kQBlock)));
      const __m512i xh = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (b + 1) * kQBlock)));
      __m512i sl = _mm512_setzero_si512(), sh = sl;
#pragma GCC unroll 4
      for (int e = 0; e < 4; ++e) {
        PrefetchAheadPart<kLevelBytes + kFactorBytes, 16>(panel, c, 4 * j + e, to_l2);
        const __m512i qs = _mm512_loadu_si512(lv + 32 * (kQsVector + 8 * j + 2 * e));
        __m512i wl = _mm512_and_si512(qs, m4);
        __m512i wh = _mm512_and_si512(_mm512_srli_epi16(qs, 4), m4);
        if constexpr (kQ5) {
          const __m512i qh = _mm512_loadu_si512(lv + 32 * (2 * e));
          wl = _mm512_or_si512(wl, fifth(qh, std::integral_constant<int, 2 * j>{}));
          wh = _mm512_or_si512(wh, fifth(qh, std::integral_constant<int, 2 * j + 1>{}));
        }
        sl = _mm512_dpbusd_epi32(sl, wl, _mm512_permutexvar_epi32(idx[e], xl));
        sh = _mm512_dpbusd_epi32(sh, wh, _mm512_permutexvar_epi32(idx[e], xh));
      }
      // Sub-block 2j, then 2j + 1 (LevelKernel's order).
      const __m256 dl0 = _mm256_mul_ps(d, u8x8(sc + 2 * j * kPP8Rows));
      const __m256 m0 = _mm256_xor_ps(_mm256_mul_ps(dmin, u8x8(mn + 2 * j * kPP8Rows)), neg);
      const __m256 dl1 = _mm256_mul_ps(d, u8x8(sc + (2 * j + 1) * kPP8Rows));
      const __m256 m1 = _mm256_xor_ps(_mm256_mul_ps(dmin, u8x8(mn + (2 * j + 1) * kPP8Rows)), neg);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(FoldHalves(sl)),
                            _mm256_mul_ps(dl0, _mm256_set1_ps(xa.d[b])), acc);
      acc = _mm256_fmadd_ps(m0, _mm256_set1_ps(xa.dsum[b]), acc);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(FoldHalves(sh)),
                            _mm256_mul_ps(dl1, _mm256_set1_ps(xa.d[b + 1])), acc);
      acc = _mm256_fmadd_ps(m1, _mm256_set1_ps(xa.dsum[b + 1]), acc);
    };
    pair(std::integral_constant<int, 0>{});
    pair(std::integral_constant<int, 1>{});
    pair(std::integral_constant<int, 2>{});
    pair(std::integral_constant<int, 3>{});
  }
  StorePartial8(y, acc, nvalid);
}

// Q6_K at batch 1 on the copy with 512-bit VNNI: each zmm holds two dword
// steps of a 16-half (the copy's ql and qh vectors g, g + 1 back to back),
// their levels decoded as KernelQ6KPrepacked does, x's two dwords broadcast
// into the halves by vpermd; then its fp32 epilogue in its order (the same
// exact dots, the same bits as the AVX2 copy kernel this replaces at batch 1).
void KernelQ6KVnniZmm1(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                       int64_t ldy, int nvalid) {
  (void)cols;
  (void)ldy;
  const int64_t nb = xa.nb;
  const int64_t n_chunks = nb / 8;
  const uint8_t* factors = panel + n_chunks * kQ6KLevelBytes8;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i idx[4] = {DwordPairIndex(0), DwordPairIndex(2), DwordPairIndex(4),
                          DwordPairIndex(6)};
  const auto* x = reinterpret_cast<const uint8_t*>(xa.qs);
  __m256 acc = _mm256_setzero_ps();
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t c = 0; c < n_chunks; ++c) {
    const uint8_t* lv = panel + c * kQ6KLevelBytes8;
    const uint8_t* f = factors + c * kQ6KFactorBytes8;
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f)));
    const uint8_t* sc = f + 2 * kPP8Rows;
    // Sub-block 4h + k (see KernelQ6KPrepacked): k a constant per instance.
    auto sub_block = [&](int hh, auto kc) {
      constexpr int k = decltype(kc)::value;
      const int sb = 4 * hh + k;
      const int64_t b = c * 8 + sb;
      const __m512i xv = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kQBlock)));
      // Steps g, g + 1 (g even).
      auto dot = [&](int g, __m512i acc_in) {
        PrefetchAheadPart<kQ6KLevelBytes8 + kQ6KFactorBytes8, 32>(panel, c, 4 * sb + g / 2, to_l2);
        const __m512i ql = _mm512_loadu_si512(lv + 32 * (8 * (2 * hh + k % 2) + g));
        const __m512i qh = _mm512_loadu_si512(lv + 32 * (32 + 8 * hh + g));
        const __m512i nib =
            k < 2 ? _mm512_and_si512(ql, m4) : _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
        __m512i hi2;
        if constexpr (k == 0) {
          hi2 = _mm512_slli_epi16(qh, 4);
        } else if constexpr (k == 1) {
          hi2 = _mm512_slli_epi16(qh, 2);
        } else if constexpr (k == 2) {
          hi2 = qh;
        } else {
          hi2 = _mm512_srli_epi16(qh, 2);
        }
        const __m512i w = _mm512_or_si512(nib, _mm512_and_si512(hi2, m30));
        return _mm512_dpbusd_epi32(acc_in, w, _mm512_permutexvar_epi32(idx[g / 2], xv));
      };
      const __m256i s = FoldHalves(dot(2, dot(0, _mm512_setzero_si512())));
      const __m256i u = FoldHalves(dot(6, dot(4, _mm512_setzero_si512())));
      const __m256 dlo = _mm256_mul_ps(
          d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 2 * sb * kPP8Rows)))));
      const __m256 dhi = _mm256_mul_ps(
          d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + (2 * sb + 1) * kPP8Rows)))));
      const __m256 dx = _mm256_set1_ps(xa.d[b]);
      acc = _mm256_fmadd_ps(
          _mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_set1_epi32(32 * xa.sum_lo[b]))),
          _mm256_mul_ps(dlo, dx), acc);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(
                                u, _mm256_set1_epi32(32 * (xa.sum[b] - xa.sum_lo[b])))),
                            _mm256_mul_ps(dhi, dx), acc);
    };
    for (int hh = 0; hh < 2; ++hh) {
      sub_block(hh, std::integral_constant<int, 0>{});
      sub_block(hh, std::integral_constant<int, 1>{});
      sub_block(hh, std::integral_constant<int, 2>{});
      sub_block(hh, std::integral_constant<int, 3>{});
    }
  }
  StorePartial8(y, acc, nvalid);
}

template <bool kQ4>
PrepackedTileFn PrepackedVnniTile(int mr) {
  if constexpr (kQ4) {
    if (mr == 1) {
      return KernelQ4VnniZmm1;
    }
  }
  switch (mr) {
#define PP_CASE(N) \
  case N:          \
    return KernelPrepackedVnni<N, kQ4>;
    PP_CASE(1)
    PP_CASE(2)
    PP_CASE(3)
    PP_CASE(4)
    PP_CASE(5)
    PP_CASE(6)
    PP_CASE(7)
#undef PP_CASE
    default:
      return KernelPrepackedVnni<8, kQ4>;
  }
}

}  // namespace

// F16 / BF16 GEMV (m <= kGemv512MaxM) on the AVX2 16-row k-major panels
// ([k][16] halves): one zmm per k where the AVX2 kernel takes two ymm. Per
// lane the same fp32 FMAs in k order from zero per kFloatKc chunk, each
// chunk's sum added to y: GemvPrepacked16's bits at m <= 3 and the 512-bit
// GEMM's (KernelF32x16 over kFloatKc panels) above, so batches up to 8 read
// the copy once instead of converting F16 panels per call.
template <GgmlType T, int MI>
void GemvPrepacked512(const WeightView& w, const uint8_t* panel, int64_t r0, const float* x,
                      float* y) {
  static_assert(MI >= 1 && MI <= 8);
  const int64_t cols = w.cols;
  const int nvalid = static_cast<int>(std::min<int64_t>(kFloatPanelRows, w.rows - r0));
  const __mmask16 mask = RowMask(nvalid);
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t k0 = 0; k0 < cols; k0 += kFloatKc) {
    const int64_t k_end = std::min(cols, k0 + kFloatKc);
    __m512 acc[MI];
    for (int i = 0; i < MI; ++i) {
      acc[i] = _mm512_setzero_ps();
    }
    const uint8_t* pk = panel + k0 * kFloatPanelRows * 2;
#pragma GCC unroll 4
    for (int64_t k = k0; k < k_end; ++k, pk += kFloatPanelRows * 2) {
      if ((k & 1) == 0) {
        PrefetchLine(pk + kPrefetchAheadBytes, to_l2);
      }
      const __m512 wv = LoadPanelRow<T>(panel, k);
      for (int i = 0; i < MI; ++i) {
        acc[i] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[i * cols + k]), acc[i]);
      }
    }
    for (int i = 0; i < MI; ++i) {
      float* dst = y + i * w.rows + r0;
      __m512 a = acc[i];
      if (k0 > 0) {
        a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(mask, dst));
      }
      _mm512_mask_storeu_ps(dst, mask, a);
    }
  }
}

template <GgmlType T>
void MatMulFloatPrepacked512(const WeightView& w, const uint8_t* packed, const float* x, int64_t m,
                             float* y, base::ThreadPool& pool) {
  const int64_t n_panels = (w.rows + kFloatPanelRows - 1) / kFloatPanelRows;
  const int64_t panel_bytes = w.cols * kFloatPanelRows * 2;
  pool.ParallelFor(n_panels, 2, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint8_t* panel = packed + p * panel_bytes;
      const int64_t r0 = p * kFloatPanelRows;
      switch (m) {
#define GEMV_CASE(N)                              \
  case N:                                         \
    GemvPrepacked512<T, N>(w, panel, r0, x, y); \
    break;
        GEMV_CASE(1)
        GEMV_CASE(2)
        GEMV_CASE(3)
        GEMV_CASE(4)
        GEMV_CASE(5)
        GEMV_CASE(6)
        GEMV_CASE(7)
#undef GEMV_CASE
        default:
          GemvPrepacked512<T, 8>(w, panel, r0, x, y);
          break;
      }
    }
  });
}

void MatMulPrepackedAvx512(const WeightView& w, const uint8_t* packed, const float* x, int64_t m,
                           float* y, base::ThreadPool& pool, bool vnni) {
  if (w.type == GgmlType::kF16 || w.type == GgmlType::kBF16) {
    if (m > kGemv512MaxM) {  // the GEMM on the copy (converted per call past 3 tiles)
      GemmFloatPanels(w, x, m, y, pool, kFMr, KernelF32Tile, KernelF32Tile2, packed,
                      w.type == GgmlType::kF16 ? KernelHalfTile2<GgmlType::kF16>
                                               : KernelHalfTile2<GgmlType::kBF16>);
      return;
    }
    if (w.type == GgmlType::kF16) {
      MatMulFloatPrepacked512<GgmlType::kF16>(w, packed, x, m, y, pool);
    } else {
      MatMulFloatPrepacked512<GgmlType::kBF16>(w, packed, x, m, y, pool);
    }
    return;
  }
  if (vnni && m == 1 &&
      (w.type == GgmlType::kQ4_K || w.type == GgmlType::kQ5_K || w.type == GgmlType::kQ6_K)) {
    const QuantizedActs xa = QuantizeActsParallel(x, m, w.cols, /*offset128=*/false, pool);
    const PrepackedTileFn fn = w.type == GgmlType::kQ4_K   ? KernelK45VnniZmm1<false>
                               : w.type == GgmlType::kQ5_K ? KernelK45VnniZmm1<true>
                                                           : KernelQ6KVnniZmm1;
    PrepackedGemm(w, packed, xa, m, y, pool, kPP8Rows, PrepackedPanelBytesAvx2(w.type, w.cols), 1,
                  kPanelBudgetBytes, [fn](int) { return fn; });
    return;
  }
  if (!vnni || (w.type != GgmlType::kQ4_0 && w.type != GgmlType::kQ8_0)) {
    MatMulPrepackedAvx2(w, packed, x, m, y, pool);
    return;
  }
  const bool q4 = w.type == GgmlType::kQ4_0;
  const QuantizedActs xa = QuantizeActsParallel(x, m, w.cols, /*offset128=*/false, pool);
  PrepackedGemm(w, packed, xa, m, y, pool, kPP8Rows, PrepackedPanelBytesAvx2(w.type, w.cols),
                kPPVnniMr, kPanelBudgetBytes,
                [&](int mr) { return q4 ? PrepackedVnniTile<true>(mr) : PrepackedVnniTile<false>(mr); });
}

void MatMulAvx512(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool,
                  bool vnni, const uint8_t* packed, bool amx) {
  switch (w.type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      if (vnni) {
        MatMulQuantVnni(w, packed, x, m, y, pool, amx);
      } else {
        MatMulAvx2(w, x, m, y, pool, packed);
      }
      return;
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      if (m <= 3) {
        MatMulAvx2(w, x, m, y, pool);  // GEMV: bandwidth-bound, reads F16/BF16 in place
      } else {
        GemmFloatPanels(w, x, m, y, pool, kFMr, KernelF32Tile, KernelF32Tile2);
      }
      return;
    default:  // level types (Q4_1 ... Q6_K)
      if (vnni) {
        MatMulLevelsImpl(w, QuantizeActsParallel(x, m, w.cols, /*offset128=*/false, pool), m, y,
                         pool, packed, amx);
      } else {
        MatMulAvx2(w, x, m, y, pool, packed);
      }
      return;
  }
}

namespace {

// --- Attention ---------------------------------------------------------------

// Exp256's polynomial (kernels_avx2.cc) on 16 lanes: each lane the same
// operations, so the same bits as Exp256 gives that lane.
inline __m512 Exp512(__m512 x) {
  x = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f));
  __m512 fx = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
  fx = _mm512_roundscale_ps(fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 y = _mm512_set1_ps(1.9875691500E-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
  y = _mm512_fmadd_ps(y, z, x);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  __m512i e = _mm512_cvttps_epi32(fx);
  e = _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

// The slot SumLanes16 reads key j's vector from (an involution: output lane
// L sums the lanes of slot kSumSlot[L]).
constexpr int kSumSlot[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

// Lane j of the result: the sum of the 16 lanes of t[kSumSlot[j]], added in
// a fixed tree (halves, quarters, pairs, then single lanes): 15 adds and 30
// shuffles for 16 dot products instead of ~4 + 4 each.
inline __m512 SumLanes16(const __m512* t) {
  __m512 u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[i], t[i + 8], 0x44),
                         _mm512_shuffle_f32x4(t[i], t[i + 8], 0xEE));
  }
  __m512 w[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[i], u[i + 4], 0x88),
                         _mm512_shuffle_f32x4(u[i], u[i + 4], 0xDD));
  }
  __m512 x[2];
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m512d a = _mm512_castps_pd(w[i]);
    const __m512d b = _mm512_castps_pd(w[i + 2]);
    x[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], 0x88), _mm512_shuffle_ps(x[0], x[1], 0xDD));
}

// One query head's scores against n (<= 64) fp32 keys of kC * 16 dims,
// already softmaxed into sc[0, n) with the running m, l updated: each
// score one fma chain over the dims (16 lanes) summed by SumLanes16.
// Returns the correction factor for the head's accumulator.
template <int kC>
float ScoresSoftmax512(const float* qg, const float* k, int n, float* sc, float* m, float* l) {
  constexpr int kHd = 16 * kC;
  __m512 qv[kC];
#pragma GCC unroll 8
  for (int c = 0; c < kC; ++c) qv[c] = _mm512_loadu_ps(qg + 16 * c);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 vmax = neg_inf;
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int nj = std::min(16, n - j0);
    __m512 t[16];
#pragma GCC unroll 16
    for (int s = 0; s < 16; ++s) {
      const int j = kSumSlot[s];
      if (j < nj) {
        const float* kr = k + int64_t{j0 + j} * kHd;
        __m512 a = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kr));
#pragma GCC unroll 8
        for (int c = 1; c < kC; ++c) a = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kr + 16 * c), a);
        t[s] = a;
      } else {
        t[s] = _mm512_setzero_ps();
      }
    }
    const __mmask16 valid = static_cast<__mmask16>((1u << nj) - 1);
    const __m512 sv = _mm512_mask_blend_ps(valid, neg_inf, SumLanes16(t));
    _mm512_store_ps(sc + j0, sv);
    vmax = _mm512_max_ps(vmax, sv);
  }
  const float new_max = std::max(*m, _mm512_reduce_max_ps(vmax));
  // As the AVX2 kernel: an unchanged running max rescales by exactly 1.
  const float correction =
      new_max == *m ? 1.0f
                    : _mm_cvtss_f32(_mm512_castps512_ps128(Exp512(_mm512_set1_ps(*m - new_max))));
  const __m512 bmax = _mm512_set1_ps(new_max);
  __m512 vsum = _mm512_setzero_ps();
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int nj = std::min(16, n - j0);
    const __m512 e = Exp512(_mm512_sub_ps(_mm512_load_ps(sc + j0), bmax));
    _mm512_store_ps(sc + j0, e);
    vsum = _mm512_mask_add_ps(vsum, static_cast<__mmask16>((1u << nj) - 1), vsum, e);
  }
  *l = *l * correction + _mm512_reduce_add_ps(vsum);
  *m = new_max;
  return correction;
}

// A later KV block's lines into L2, a few per step of the value loops: the
// block's F16 reads then meet lines already on their way while this block's
// arithmetic (all from L1) runs, instead of the reads and the arithmetic
// taking turns.
class AheadPrefetch {
 public:
  AheadPrefetch(const KvBlockRef* ahead, int64_t bytes, int64_t steps)
      : k_(ahead != nullptr ? static_cast<const char*>(ahead->k) : nullptr),
        v_(ahead != nullptr ? static_cast<const char*>(ahead->v) : nullptr),
        end_(ahead != nullptr ? bytes : 0),
        per_step_(steps > 0 ? 64 * ((bytes / 64 + steps - 1) / steps) : bytes) {}
  void Step() {
    const int64_t stop = std::min(end_, next_ + per_step_);
    for (; next_ < stop; next_ += 64) {
      PrefetchLine(k_ + next_, /*to_l2=*/true);
      PrefetchLine(v_ + next_, /*to_l2=*/true);
    }
  }

 private:
  const char* k_;
  const char* v_;
  int64_t end_;
  int64_t per_step_;
  int64_t next_ = 0;
};

// acc[h][d] = acc[h][d] * corr[h] + sum_j p[h][j] v[j][d] for kH heads
// (1 or 2, so that 2 * kC fma chains run), each dim one chain over j in order
// (the AVX2 kernel's order, whichever heads run together).
template <int kC, int kH>
void AccumulateV512(const float* v, int n, const float* const* p, const float* corr,
                    float* const* acc, AheadPrefetch& prefetch) {
  constexpr int kHd = 16 * kC;
  __m512 a[kH][kC];
#pragma GCC unroll 2
  for (int h = 0; h < kH; ++h) {
    const __m512 vc = _mm512_set1_ps(corr[h]);
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) a[h][c] = _mm512_mul_ps(_mm512_loadu_ps(acc[h] + 16 * c), vc);
  }
  for (int j = 0; j < n; ++j) {
    prefetch.Step();
    const float* vr = v + int64_t{j} * kHd;
#pragma GCC unroll 2
    for (int h = 0; h < kH; ++h) {
      const __m512 pj = _mm512_set1_ps(p[h][j]);
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c)
        a[h][c] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr + 16 * c), a[h][c]);
    }
  }
#pragma GCC unroll 2
  for (int h = 0; h < kH; ++h) {
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) _mm512_storeu_ps(acc[h] + 16 * c, a[h][c]);
  }
}

template <int kC>
void AttendBlockZmm(const float* q, int group, const float* k, const float* v, int n, float* m,
                    float* l, float* acc, const KvBlockRef* ahead, int64_t ahead_bytes) {
  constexpr int kHd = 16 * kC;
  alignas(64) float sc[2][64];
  AheadPrefetch prefetch(ahead, ahead_bytes, int64_t{(group + 1) / 2} * n);
  int g = 0;
  for (; g + 2 <= group; g += 2) {
    const float corr[2] = {
        ScoresSoftmax512<kC>(q + g * kHd, k, n, sc[0], m + g, l + g),
        ScoresSoftmax512<kC>(q + (g + 1) * kHd, k, n, sc[1], m + g + 1, l + g + 1)};
    const float* p[2] = {sc[0], sc[1]};
    float* a[2] = {acc + g * kHd, acc + (g + 1) * kHd};
    AccumulateV512<kC, 2>(v, n, p, corr, a, prefetch);
  }
  if (g < group) {
    const float corr = ScoresSoftmax512<kC>(q + g * kHd, k, n, sc[0], m + g, l + g);
    const float* p = sc[0];
    float* a = acc + g * kHd;
    AccumulateV512<kC, 1>(v, n, &p, &corr, &a, prefetch);
  }
}

}  // namespace

void AttendBlockAvx512(const float* q, int group, const void* k, const void* v, GgmlType dtype,
                       int n, int head_dim, float* m, float* l, float* acc,
                       const KvBlockRef* ahead) {
  const int chunks = head_dim / 16;
  if (head_dim % 16 != 0 || (chunks != 1 && chunks != 2 && chunks != 4 && chunks != 8) || n > 64) {
    AttendBlockAvx2(q, group, k, v, dtype, n, head_dim, m, l, acc, ahead);
    return;
  }
  const float* kf = static_cast<const float*>(k);
  const float* vf = static_cast<const float*>(v);
  if (dtype == GgmlType::kF16) {
    // The block to fp32 once (exact), for every head's loops.
    static thread_local ScratchBuffer scratch;
    const int64_t elems = int64_t{n} * head_dim;
    auto* kw = static_cast<float*>(scratch.Get(2 * elems * sizeof(float)));
    float* vw = kw + elems;
    const auto* kh = static_cast<const uint16_t*>(k);
    const auto* vh = static_cast<const uint16_t*>(v);
    // elems is a multiple of 16 (head_dim is).
    for (int64_t e = 0; e < elems; e += 16) {
      _mm512_storeu_ps(
          kw + e, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kh + e))));
      _mm512_storeu_ps(
          vw + e, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vh + e))));
    }
    kf = kw;
    vf = vw;
  }
  const int64_t bytes = int64_t{n} * head_dim * (dtype == GgmlType::kF16 ? 2 : 4);
  switch (chunks) {
    case 1:
      AttendBlockZmm<1>(q, group, kf, vf, n, m, l, acc, ahead, bytes);
      return;
    case 2:
      AttendBlockZmm<2>(q, group, kf, vf, n, m, l, acc, ahead, bytes);
      return;
    case 4:
      AttendBlockZmm<4>(q, group, kf, vf, n, m, l, acc, ahead, bytes);
      return;
    default:
      AttendBlockZmm<8>(q, group, kf, vf, n, m, l, acc, ahead, bytes);
      return;
  }
}

}  // namespace tandem::engine::internal
