// AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c -mbmi2 and
// only called after DetectIsa() saw those features.
//
// Matrix multiply layout. The GEMMs put weight ROWS in SIMD lanes ("lanes =
// rows"): a panel of 8 (quantized) or 16 (float) consecutive weight rows is
// repacked per call, in a per-thread buffer, so that one vector holds the
// same k of 8/16 rows. The micro-kernel broadcasts one activation element (or
// 4 int8 activations) and multiplies it with the vector, so every weight
// vector loaded serves MR activation rows, every broadcast serves 8/16 weight
// rows, and results come out as contiguous y[i][r..r+7] with the per-row
// scales applied as one vector. No horizontal sums; the GGUF layout (possibly
// an mmap) is read once per call. Each task owns a range of panels, so every
// thread streams its share of the weights once per call, at any batch.
// Batch 1-2 Q4_0 transposes blocks in registers without a panel buffer
// (FusedQ4Rows8); batch <= 3 float types transpose 8x8 tiles in registers
// and read F16/BF16 in place (GemvRows8); with the load-time copy, F16/BF16
// GEMMs of up to kFloatHalfMaxTiles activation tiles read the copy's halves
// directly (KernelHalfTile2), larger ones convert fp32 panels per call.
//
// Every path is batch-invariant: a row's output bits do not depend on m or
// on the row's place in the batch. Quantized paths sum exact integer block
// dot products and add the scaled block terms in k order whatever the tile;
// float paths all add one fma per k in k order, per 256-column chunk.
//
// Quantized dot products (activations quantized per 32-block to int8, see
// kernels_internal.h) are exact integer sums per block, so ISA paths differ
// from the scalar reference only in fp32 rounding of the scale accumulation:
//   Q4_0: vpmaddubsw with int16 accumulation over a whole block and one
//         vpmaddwd per block (see KernelQ4 for the two operand layouts and
//         their saturation bounds).
//   Q8_0: ggml's sign trick: vpmaddubsw(|w|, sign(x, w)), pairs at most
//         2*128*127 = 32512, then vpmaddwd per product (no int16 headroom).
//         On Zen 3 vpsignb, vpmaddubsw and vpmaddwd share the two multiply
//         pipes, which bounds Q8_0 to 32 MACs per 1.5 cycles.
//   Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: kernels_levels.inc (shared with the
//         VNNI path), blocks decoded to byte levels with float scales.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/base/logging.h"
#include "common/engine/kernels/internal/kernels_internal.h"

namespace tandem::engine::internal {
namespace {

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

inline float HsumPs(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HmaxPs(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t HsumEpi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Sums of 4 vectors each, as lanes 0..3.
inline __m128 Hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// exp(x) for x <= 0 mostly (softmax, silu); Cephes-style polynomial, relative
// error ~2 ulp over the clamped range; underflows to 0 below about -87.
inline __m256 Exp256(__m256 x) {
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
  x = _mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f));
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, z, x);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_cvttps_epi32(fx);
  e = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// Stores the first n (<= 8) lanes of v.
inline void StorePartial(float* dst, __m256 v, int n) {
  if (n == 8) {
    _mm256_storeu_ps(dst, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int j = 0; j < n; ++j) {
    dst[j] = tmp[j];
  }
}

// Eight converted elements of a float-type row starting at column c.
template <GgmlType T>
inline __m256 Load8(const uint8_t* row, int64_t c) {
  if constexpr (T == GgmlType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (T == GgmlType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  } else {
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
}

template <GgmlType T>
inline float Load1(const uint8_t* row, int64_t c) {
  if constexpr (T == GgmlType::kF32) {
    return reinterpret_cast<const float*>(row)[c];
  } else if constexpr (T == GgmlType::kF16) {
    return _cvtsh_ss(LoadU16(row + 2 * c));
  } else {
    return BfloatToFloat(LoadU16(row + 2 * c));
  }
}

// ---------------------------------------------------------------------------
// Activation quantization
// ---------------------------------------------------------------------------

}  // namespace

void QuantizeActsAvx2(const float* x, int64_t m, int64_t cols, bool offset128,
                      const QuantizedActs& out) {
  const int64_t nb = cols / kQBlock;
  const __m256i flip = _mm256_set1_epi8(offset128 ? static_cast<char>(0x80) : 0);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + i * cols + b * kQBlock;
      const __m256 v0 = _mm256_loadu_ps(xb);
      const __m256 v1 = _mm256_loadu_ps(xb + 8);
      const __m256 v2 = _mm256_loadu_ps(xb + 16);
      const __m256 v3 = _mm256_loadu_ps(xb + 24);
      __m256 mx = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
      mx = _mm256_max_ps(mx, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
      const float amax = HmaxPs(mx);
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      // cvtps rounds half to even (MXCSR default), as nearbyint in the scalar path.
      const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
      const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
      const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
      const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
      const int32_t sum_lo = HsumEpi32(_mm256_add_epi32(i0, i1));
      out.sum_lo[i * nb + b] = sum_lo;
      const int32_t sum = sum_lo + HsumEpi32(_mm256_add_epi32(i2, i3));
      out.sum[i * nb + b] = sum;
      out.dsum[i * nb + b] = d * static_cast<float>(sum);
      out.d[i * nb + b] = d;
      const __m256i p01 = _mm256_packs_epi32(i0, i1);
      const __m256i p23 = _mm256_packs_epi32(i2, i3);
      // x + 128 as u8 is x with its top bit flipped.
      const __m256i q =
          _mm256_xor_si256(_mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm), flip);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs + i * cols + b * kQBlock), q);
    }
  }
}

namespace {

// ---------------------------------------------------------------------------
// Quantized GEMM (Q4_0, Q8_0)
// ---------------------------------------------------------------------------

constexpr int kQPanelRows = 8;
// A packed block holds one 32-column block of 8 consecutive weight rows;
// group g (k = 4g..4g+3) is one vector of 8 rows x 4 bytes. Q4_0 has two
// layouts (see KernelQ4): the unsigned one packs faster (batch <= kQMrQ4,
// where packing is a large share of the work), the signed one has a shorter
// epilogue (large batches, where packing is amortized).
//   Q4_0 unsigned: float d[8] | q as u8 (0..15), 8 groups                    (288 bytes)
//   Q4_0 signed:   float d[8] | int32 128*sum(q-8) [8] | q-8 as s8, 8 groups (320 bytes)
//   Q8_0:          float d[8] | w as s8, 8 groups | |w| as u8, 8 groups      (544 bytes)
constexpr int64_t kQ4uPanelBlock = 32 + 256;
constexpr int64_t kQ4sPanelBlock = 32 + 32 + 256;
constexpr int64_t kQ8PanelBlock = 32 + 512;
constexpr int kQMrQ4 = 6;  // activation rows per Q4_0 micro-kernel call
constexpr int kQMrQ8 = 4;  // Q8_0 (the sign trick needs two weight registers)

enum class Q4Layout { kUnsigned, kSigned };

inline int64_t PanelBlockBytes(GgmlType t, Q4Layout layout) {
  if (t == GgmlType::kQ8_0) {
    return kQ8PanelBlock;
  }
  return layout == Q4Layout::kSigned ? kQ4sPanelBlock : kQ4uPanelBlock;
}

// Per-lane (dword) sums of the 4 signed bytes of v, as int32.
inline __m256i DwordByteSums(__m256i v) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
}

// out[d] = dword d (bytes 4d..4d+3) of the 16 bytes at p[r], rows r = 0..7 as lanes.
inline void Transpose4x8(const uint8_t* const p[8], __m256i out[4]) {
  auto load2 = [](const uint8_t* lo, const uint8_t* hi) {
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
  };
  const __m256i a = load2(p[0], p[4]);
  const __m256i b = load2(p[1], p[5]);
  const __m256i c = load2(p[2], p[6]);
  const __m256i e = load2(p[3], p[7]);
  const __m256i t0 = _mm256_unpacklo_epi32(a, b);
  const __m256i t1 = _mm256_unpackhi_epi32(a, b);
  const __m256i t2 = _mm256_unpacklo_epi32(c, e);
  const __m256i t3 = _mm256_unpackhi_epi32(c, e);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

// Packs rows [r0, r0+8) (missing rows repeat the last one; their results are
// never stored) of a Q4_0/Q8_0 matrix, all blocks: gathered from w's rows,
// or, with `packed` (w's load-time copy), from its 8-row panel r0 / 8, which
// holds the same d values and the same transposed dwords (PrepackPanel8).
void PackQuantPanel(const WeightView& w, int64_t r0, Q4Layout layout, const uint8_t* packed,
                    uint8_t* out) {
  const int64_t nb = w.cols / kQBlock;
  const uint8_t* rows[kQPanelRows];
  for (int r = 0; r < kQPanelRows; ++r) {
    rows[r] = w.data + std::min(r0 + r, w.rows - 1) * w.row_bytes;
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  const bool q4 = w.type == GgmlType::kQ4_0;
  const int64_t block_bytes = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int64_t copy_qbytes = q4 ? 128 : 256;
  const uint8_t* copy =
      packed != nullptr ? packed + r0 / 8 * PrepackedPanelBytesAvx2(w.type, w.cols) : nullptr;
  for (int64_t b = 0; b < nb; ++b) {
    __m128i hv;
    __m256i t[8];
    if (copy != nullptr) {
      hv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(copy + nb * copy_qbytes + 16 * b));
      for (int i = 0; i < (q4 ? 4 : 8); ++i) {
        t[i] =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(copy + b * copy_qbytes + 32 * i));
      }
    } else {
      const uint8_t* p[kQPanelRows];
      const uint8_t* p2[kQPanelRows];
      uint16_t h[kQPanelRows];
      for (int r = 0; r < kQPanelRows; ++r) {
        const uint8_t* blk = rows[r] + b * block_bytes;
        h[r] = LoadU16(blk);
        p[r] = blk + 2;
        p2[r] = blk + 18;
      }
      hv = _mm_setr_epi16(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
      Transpose4x8(p, t);
      if (!q4) {
        Transpose4x8(p2, t + 4);
      }
    }
    _mm256_store_ps(reinterpret_cast<float*>(out), _mm256_cvtph_ps(hv));
    if (q4) {
      if (layout == Q4Layout::kUnsigned) {
        auto* q = reinterpret_cast<__m256i*>(out + 32);
        for (int d = 0; d < 4; ++d) {
          _mm256_store_si256(q + d, _mm256_and_si256(t[d], m4));
          _mm256_store_si256(q + 4 + d, _mm256_and_si256(_mm256_srli_epi16(t[d], 4), m4));
        }
        out += kQ4uPanelBlock;
      } else {
        auto* q = reinterpret_cast<__m256i*>(out + 64);
        __m256i corr = _mm256_setzero_si256();
        for (int d = 0; d < 4; ++d) {
          const __m256i lo = _mm256_sub_epi8(_mm256_and_si256(t[d], m4), eight);
          const __m256i hi =
              _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(t[d], 4), m4), eight);
          _mm256_store_si256(q + d, lo);
          _mm256_store_si256(q + 4 + d, hi);
          corr = _mm256_add_epi32(corr, _mm256_add_epi32(DwordByteSums(lo), DwordByteSums(hi)));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32), _mm256_slli_epi32(corr, 7));
        out += kQ4sPanelBlock;
      }
    } else {
      auto* q = reinterpret_cast<__m256i*>(out + 32);
      for (int g = 0; g < 8; ++g) {
        _mm256_store_si256(q + g, t[g]);
        _mm256_store_si256(q + 8 + g, _mm256_abs_epi8(t[g]));
      }
      out += kQ8PanelBlock;
    }
  }
}

// The inner steps of the lanes = rows int8 dot products, as inline asm so that
// GCC neither reassociates the accumulations into a tree (which spills) nor
// hoists the broadcasts. x points at 4 activation bytes.
typedef int32_t UnalignedInt32 __attribute__((aligned(1), may_alias));

// Q4_0: s += maddubs(w as u8, broadcast(x) as s8) (kUnsigned) or
// s += maddubs(broadcast(x) as u8, w as s8) (kSigned). w comes in a register:
// on Zen 3 vpmaddubsw with a memory operand runs at 2/3 the rate.
template <Q4Layout kLayout>
inline void MaddubsAcc16(__m256i& s, __m256i w, const uint8_t* x) {
  __m256i t;
  if constexpr (kLayout == Q4Layout::kUnsigned) {
    __asm__(
        "vpbroadcastd %[x], %[t]\n\t"
        "vpmaddubsw %[t], %[w], %[t]\n\t"
        "vpaddw %[t], %[s], %[s]"
        : [s] "+x"(s), [t] "=&x"(t)
        : [w] "x"(w), [x] "m"(*reinterpret_cast<const UnalignedInt32*>(x)));
  } else {
    __asm__(
        "vpbroadcastd %[x], %[t]\n\t"
        "vpmaddubsw %[w], %[t], %[t]\n\t"
        "vpaddw %[t], %[s], %[s]"
        : [s] "+x"(s), [t] "=&x"(t)
        : [w] "x"(w), [x] "m"(*reinterpret_cast<const UnalignedInt32*>(x)));
  }
}

// Q8_0 (ggml's sign trick): s += madd(maddubs(|w|, sign(broadcast(x), w)), 1).
inline void SignMaddAcc32(__m256i& s, __m256i wabs, __m256i wsgn, __m256i ones, const uint8_t* x) {
  __m256i t;
  __asm__(
      "vpbroadcastd %[x], %[t]\n\t"
      "vpsignb %[ws], %[t], %[t]\n\t"
      "vpmaddubsw %[t], %[wa], %[t]\n\t"
      "vpmaddwd %[ones], %[t], %[t]\n\t"
      "vpaddd %[t], %[s], %[s]"
      : [s] "+x"(s), [t] "=&x"(t)
      : [wa] "x"(wabs), [ws] "x"(wsgn), [ones] "x"(ones),
        [x] "m"(*reinterpret_cast<const UnalignedInt32*>(x)));
}

// Named accumulators (not arrays) so GCC keeps them in registers; the unused
// ones vanish for small MR.
#define TANDEM_FOR_MR(X)  \
  X(0)                    \
  if constexpr (MR > 1) { \
    X(1)                  \
  }                       \
  if constexpr (MR > 2) { \
    X(2)                  \
  }                       \
  if constexpr (MR > 3) { \
    X(3)                  \
  }                       \
  if constexpr (MR > 4) { \
    X(4)                  \
  }                       \
  if constexpr (MR > 5) { \
    X(5)                  \
  }

// Q4_0 micro-kernel: y[i][0..nvalid) for i < MR (<= 6) from one packed 8-row
// panel. In both layouts each vpmaddubsw pair stays far from int16
// saturation, so the 8 products of a block add up in int16 and one vpmaddwd
// per block widens them:
//   kUnsigned: weights q as u8 (0..15), activations x as s8 (|x| <= 127):
//     pairs <= 2*15*127 = 3810, 8 of them <= 30480; sum((q-8) x) =
//     sum(q x) - 8 sum(x), with sum(x) per activation block from the quantizer.
//   kSigned: activations x + 128 as u8 (1..255), weights q - 8 as s8 (-8..7):
//     pairs <= 2*255*8 = 4080, 8 of them <= 32640; sum((x+128) w) -
//     128 sum(w) = sum(x w), with 128 sum(w) per row and block from the packer.
template <int MR, Q4Layout kLayout>
void KernelQ4(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y, int64_t ldy,
              int nvalid) {
  static_assert(MR >= 1 && MR <= 6);
  const int64_t nb = xa.nb;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0,
         acc5 = acc0;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t* x1 = x0 + cols;
  const uint8_t* x2 = x0 + 2 * cols;
  const uint8_t* x3 = x0 + 3 * cols;
  const uint8_t* x4 = x0 + 4 * cols;
  const uint8_t* x5 = x0 + 5 * cols;
  for (int64_t b = 0; b < nb; ++b) {
    constexpr bool kSigned = kLayout == Q4Layout::kSigned;
    const uint8_t* pb = panel + b * (kSigned ? kQ4sPanelBlock : kQ4uPanelBlock);
    const auto* wq = reinterpret_cast<const __m256i*>(pb + (kSigned ? 64 : 32));
    const int64_t xo = b * kQBlock;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m256i w = _mm256_load_si256(wq + g);
#define Q4_STEP(I) MaddubsAcc16<kLayout>(s##I, w, x##I + xo + 4 * g);
      TANDEM_FOR_MR(Q4_STEP)
#undef Q4_STEP
    }
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(pb));
    const __m256i wcorr = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + 32));
#define Q4_EPI(I)                                                                            \
  {                                                                                          \
    const __m256i corr = kSigned ? wcorr : _mm256_set1_epi32(8 * xa.sum[I * nb + b]);        \
    const __m256i t = _mm256_sub_epi32(_mm256_madd_epi16(s##I, ones), corr);                 \
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(xa.d[I * nb + b])); \
    acc##I = _mm256_fmadd_ps(f, dw, acc##I);                                                 \
  }
    TANDEM_FOR_MR(Q4_EPI)
#undef Q4_EPI
  }
#define Q_STORE(I) StorePartial(y + I * ldy, acc##I, nvalid);
  TANDEM_FOR_MR(Q_STORE)
}

// Q8_0 micro-kernel, MR <= 4 (the sign trick needs two weight registers).
template <int MR>
void KernelQ8(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y, int64_t ldy,
              int nvalid) {
  static_assert(MR >= 1 && MR <= 4);
  const int64_t nb = xa.nb;
  const __m256i ones = _mm256_set1_epi16(1);
  // acc4/5, x4/5 and s4/5 only satisfy name lookup in TANDEM_FOR_MR.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4, acc5;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t* x1 = x0 + cols;
  const uint8_t* x2 = x0 + 2 * cols;
  const uint8_t* x3 = x0 + 3 * cols;
  const uint8_t *x4 = nullptr, *x5 = nullptr;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = panel + b * kQ8PanelBlock;
    const auto* ws = reinterpret_cast<const __m256i*>(pb + 32);
    const auto* wa = reinterpret_cast<const __m256i*>(pb + 32 + 256);
    const int64_t xo = b * kQBlock;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4, s5;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m256i sgn = _mm256_load_si256(ws + g);
      const __m256i ab = _mm256_load_si256(wa + g);
#define Q8_STEP(I) SignMaddAcc32(s##I, ab, sgn, ones, x##I + xo + 4 * g);
      TANDEM_FOR_MR(Q8_STEP)
#undef Q8_STEP
    }
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(pb));
#define Q8_EPI(I)                                                                               \
  {                                                                                             \
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s##I), _mm256_set1_ps(xa.d[I * nb + b])); \
    acc##I = _mm256_fmadd_ps(f, dw, acc##I);                                                    \
  }
    TANDEM_FOR_MR(Q8_EPI)
#undef Q8_EPI
  }
  TANDEM_FOR_MR(Q_STORE)
}
#undef Q_STORE

template <Q4Layout kLayout>
void Q4Tile(int mr, const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
            int64_t ldy, int nvalid) {
  switch (mr) {
    case 1:
      return KernelQ4<1, kLayout>(panel, xa, cols, y, ldy, nvalid);
    case 2:
      return KernelQ4<2, kLayout>(panel, xa, cols, y, ldy, nvalid);
    case 3:
      return KernelQ4<3, kLayout>(panel, xa, cols, y, ldy, nvalid);
    case 4:
      return KernelQ4<4, kLayout>(panel, xa, cols, y, ldy, nvalid);
    case 5:
      return KernelQ4<5, kLayout>(panel, xa, cols, y, ldy, nvalid);
    default:
      return KernelQ4<6, kLayout>(panel, xa, cols, y, ldy, nvalid);
  }
}

void QuantKernelTile(GgmlType type, Q4Layout layout, int mr, const uint8_t* panel,
                     const QuantizedActs& xa, int64_t cols, float* y, int64_t ldy, int nvalid) {
  if (type == GgmlType::kQ4_0) {
    if (layout == Q4Layout::kSigned) {
      Q4Tile<Q4Layout::kSigned>(mr, panel, xa, cols, y, ldy, nvalid);
    } else {
      Q4Tile<Q4Layout::kUnsigned>(mr, panel, xa, cols, y, ldy, nvalid);
    }
    return;
  }
  switch (mr) {
    case 1:
      return KernelQ8<1>(panel, xa, cols, y, ldy, nvalid);
    case 2:
      return KernelQ8<2>(panel, xa, cols, y, ldy, nvalid);
    case 3:
      return KernelQ8<3>(panel, xa, cols, y, ldy, nvalid);
    default:
      return KernelQ8<4>(panel, xa, cols, y, ldy, nvalid);
  }
}

// Budget for the panels a thread packs before sweeping all activation tiles
// over them (L2-resident on current x86 cores).
constexpr int64_t kPanelBudgetBytes = 192 * 1024;

// Batch 1-2 Q4_0: transposes each block of 8 rows into registers and uses
// it at once, with no panel buffer (at this batch the stores and reloads of a
// packed panel cost more than the dot products). Same arithmetic as
// KernelQ4<MR, kUnsigned>.
template <int MR>
void FusedQ4Rows8(const WeightView& w, int64_t r0, const QuantizedActs& xa, float* y, int64_t ldy) {
  static_assert(MR >= 1 && MR <= 2);
  const int64_t nb = xa.nb;
  const uint8_t* rows[kQPanelRows];
  for (int r = 0; r < kQPanelRows; ++r) {
    rows[r] = w.data + std::min(r0 + r, w.rows - 1) * w.row_bytes;
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2, acc3, acc4, acc5;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t* x1 = x0 + w.cols;
  const uint8_t *x2 = nullptr, *x3 = nullptr, *x4 = nullptr, *x5 = nullptr;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t off = b * static_cast<int64_t>(sizeof(BlockQ4_0));
    const uint8_t* p[kQPanelRows];
    for (int r = 0; r < kQPanelRows; ++r) {
      p[r] = rows[r] + off + 2;
    }
    // The 8 fp16 scales, gathered in general-purpose registers (integer
    // ports) and moved over in two 64-bit halves.
    auto h = [&](int r) { return static_cast<uint64_t>(LoadU16(rows[r] + off)); };
    const uint64_t lo = h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48;
    const uint64_t hi = h(4) | h(5) << 16 | h(6) << 32 | h(7) << 48;
    const __m256 dw =
        _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)));
    __m256i t[4];
    Transpose4x8(p, t);
    const int64_t xo = b * kQBlock;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2, s3, s4, s5;
    for (int d = 0; d < 4; ++d) {
      const __m256i wl = _mm256_and_si256(t[d], m4);
      const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(t[d], 4), m4);
#define FUSED_STEP(I)                                             \
  MaddubsAcc16<Q4Layout::kUnsigned>(s##I, wl, x##I + xo + 4 * d); \
  MaddubsAcc16<Q4Layout::kUnsigned>(s##I, wh, x##I + xo + 16 + 4 * d);
      TANDEM_FOR_MR(FUSED_STEP)
#undef FUSED_STEP
    }
#define FUSED_EPI(I)                                                                          \
  {                                                                                           \
    const __m256i tt = _mm256_sub_epi32(_mm256_madd_epi16(s##I, ones),                        \
                                        _mm256_set1_epi32(8 * xa.sum[I * nb + b]));           \
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(tt), _mm256_set1_ps(xa.d[I * nb + b])); \
    acc##I = _mm256_fmadd_ps(f, dw, acc##I);                                                  \
  }
    TANDEM_FOR_MR(FUSED_EPI)
#undef FUSED_EPI
  }
  const int nvalid = static_cast<int>(std::min<int64_t>(kQPanelRows, w.rows - r0));
#define FUSED_STORE(I) StorePartial(y + I * ldy + r0, acc##I, nvalid);
  TANDEM_FOR_MR(FUSED_STORE)
#undef FUSED_STORE
}

void MatMulQ4SmallBatch(const WeightView& w, const QuantizedActs& xa, int64_t m, float* y,
                        base::ThreadPool& pool) {
  const int64_t n_panels = (w.rows + kQPanelRows - 1) / kQPanelRows;
  pool.ParallelFor(n_panels, 4, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      if (m == 1) {
        FusedQ4Rows8<1>(w, p * kQPanelRows, xa, y, w.rows);
      } else {
        FusedQ4Rows8<2>(w, p * kQPanelRows, xa, y, w.rows);
      }
    }
  });
}

// Q4_0 layout for a batch of m (see KernelQ4).
inline Q4Layout Q4LayoutFor(int64_t m) {
  return m <= kQMrQ4 ? Q4Layout::kUnsigned : Q4Layout::kSigned;
}

void MatMulQuantAvx2(const WeightView& w, const QuantizedActs& xa, int64_t m, float* y,
                     base::ThreadPool& pool, const uint8_t* packed) {
  if (w.type == GgmlType::kQ4_0 && m <= 2) {
    MatMulQ4SmallBatch(w, xa, m, y, pool);
    return;
  }
  const Q4Layout layout = Q4LayoutFor(m);
  QuantGemmPanels(
      w, xa, m, y, pool, kQPanelRows, xa.nb * PanelBlockBytes(w.type, layout),
      w.type == GgmlType::kQ4_0 ? kQMrQ4 : kQMrQ8, kPanelBudgetBytes,
      [&](int64_t r0, uint8_t* out) { PackQuantPanel(w, r0, layout, packed, out); },
      [&](int mr, const uint8_t* panel, const QuantizedActs& xi, float* yt, int nvalid,
          AheadBytes /*ahead*/) {
        QuantKernelTile(w.type, layout, mr, panel, xi, w.cols, yt, w.rows, nvalid);
      });
}

// ---------------------------------------------------------------------------
// Level types (Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)
// ---------------------------------------------------------------------------

#include "common/engine/kernels/internal/kernels_levels.inc"

// ---------------------------------------------------------------------------
// Weights repacked once at load (WeightMatrix::Create): Q4_0, Q8_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
// ---------------------------------------------------------------------------
//
// The per-call panels above rebuild a transposed copy of every weight on
// every call (FusedQ4Rows8 in registers, the rest through a buffer), and
// LevelRowsFused reduces each block horizontally: at batch 1 that work, not
// memory, bounds the step. These layouts are built once, as 8-row panels
// (rows in lanes, as above) holding the same bytes as the GGUF rows, so a
// call streams each weight byte once and does no shuffles. A panel is the
// quants of all its blocks (or super-blocks) followed by their factors; in
// quant vector v of a block, lane r holds dword v of row r's quant bytes
// (Q4_0, Q4_1, Q5_0, Q5_1: the 16 nibble bytes; Q8_0: the 32 bytes; Q4_K: qs bytes 32j + 4g
// for pair j, group g; Q5_K: qh bytes 4g, then the qs dwords as Q4_K's;
// Q6_K: ql bytes 64h + 32p + 4g (half h, part p), then qh bytes 32h + 4g).
// Factors: fp16 d [8] per block (Q4_0, Q8_0); the Q5 types' qh words [8],
// then d [8] and m [8] (with a min) per block; d [8], dmin [8] fp16 and the
// 6-bit scales and mins unpacked to u8 [8][8] per super-block (Q4_K, Q5_K:
// 148 / 180 bytes per row and super-block where GGUF has 144 / 176); d [8]
// fp16 and the int8 scales [16][8] (Q6_K). The K-quants' level vectors are
// thus, in order, the dwords of GGUF's level bytes (qs; qh then qs; ql then
// qh: vector 8i + g is dword g of their 32-byte vector i), which is what the
// per-call panel packers decode (LevelsFromRaw).
//
// The arithmetic: exact integer dots per block (or 16-half), the same values
// the per-call kernels form, then the same fp32 operations in the same order
// (Q4_0 / Q8_0 as KernelQ4 / KernelQ8; the level types as LevelKernel, with
// the scales computed as LevelKScalesRows8 does). So every batch size, the
// per-call paths and the prepacked one give the same bits (tested).

constexpr int kPPRows = 8;
static_assert(kQ4KLevelBytes8 + kQ4KFactorBytes8 == kPPRows * (sizeof(BlockQ4_K) + 4));
static_assert(kQ5KLevelBytes8 + kQ5KFactorBytes8 == kPPRows * (sizeof(BlockQ5_K) + 4));
static_assert(kQ6KLevelBytes8 + kQ6KFactorBytes8 == kPPRows * sizeof(BlockQ6_K));
static_assert(offsetof(BlockQ5_K, qs) == offsetof(BlockQ5_K, qh) + kQK_K / 8);

// Q4_1, Q5_0, Q5_1: bytes per block after the 128 nibble bytes: the fifth
// bits (Q5: 4 bytes per row, as in the block), then fp16 d [8] and m [8]
// (with a min).
constexpr int64_t Level32ExtraBytes(GgmlType t) {
  return (t == GgmlType::kQ4_1 ? 0 : 4 * kPPRows) + 2 * kPPRows +
         (t == GgmlType::kQ5_0 ? 0 : 2 * kPPRows);
}
static_assert(128 + Level32ExtraBytes(GgmlType::kQ4_1) == kPPRows * sizeof(BlockQ4_1));
static_assert(128 + Level32ExtraBytes(GgmlType::kQ5_0) == kPPRows * sizeof(BlockQ5_0));
static_assert(128 + Level32ExtraBytes(GgmlType::kQ5_1) == kPPRows * sizeof(BlockQ5_1));

// Bytes of one prepacked 8-row panel of `cols` (0: not a prepacked type).
int64_t PrepackedPanelBytes8(GgmlType type, int64_t cols) {
  switch (type) {
    case GgmlType::kQ4_0:
      return cols / kQBlock * (128 + 2 * kPPRows);
    case GgmlType::kQ8_0:
      return cols / kQBlock * (256 + 2 * kPPRows);
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
      return cols / kQBlock * (128 + Level32ExtraBytes(type));
    case GgmlType::kQ4_K:
      return cols / kQK_K * (kQ4KLevelBytes8 + kQ4KFactorBytes8);
    case GgmlType::kQ5_K:
      return cols / kQK_K * (kQ5KLevelBytes8 + kQ5KFactorBytes8);
    case GgmlType::kQ6_K:
      return cols / kQK_K * (kQ6KLevelBytes8 + kQ6KFactorBytes8);
    default:
      return 0;
  }
}

// out[v] = dword v of the `n` x 16 bytes at rows[r] + off, rows in lanes.
inline void GatherDwords8(const uint8_t* const rows[kPPRows], int64_t off, int n, __m256i* out) {
  for (int part = 0; part < n; ++part) {
    const uint8_t* p[kPPRows];
    for (int r = 0; r < kPPRows; ++r) {
      p[r] = rows[r] + off + 16 * part;
    }
    Transpose4x8(p, out + 4 * part);
  }
}

inline void StoreU(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline __m256i LoadU(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256 HalvesToPs(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 U8x8ToPs(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 S8x8ToPs(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

void PrepackPanel8(const WeightView& w, const uint8_t* const rows[kPPRows], uint8_t* panel) {
  switch (w.type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0: {
      const bool q4 = w.type == GgmlType::kQ4_0;
      const int64_t nb = w.cols / kQBlock;
      const int64_t block_bytes = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
      const int64_t qbytes = q4 ? 128 : 256;
      uint8_t* scales = panel + nb * qbytes;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t off = b * block_bytes;
        for (int r = 0; r < kPPRows; ++r) {
          std::memcpy(scales + b * 2 * kPPRows + 2 * r, rows[r] + off, 2);  // d, first in both
        }
        __m256i v[8];
        GatherDwords8(rows, off + 2, q4 ? 1 : 2, v);
        for (int i = 0; i < (q4 ? 4 : 8); ++i) {
          StoreU(panel + b * qbytes + 32 * i, v[i]);
        }
      }
      return;
    }
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const GgmlType t = w.type;
      const bool has_m = t != GgmlType::kQ5_0;
      const bool q5 = t != GgmlType::kQ4_1;
      const int64_t nb = w.cols / kQBlock;
      const int64_t block_bytes = GgmlTypeSize(t);
      const int64_t qh_at = has_m ? 4 : 2;
      const int64_t qs_at = qh_at + (q5 ? 4 : 0);
      const int64_t extra = Level32ExtraBytes(t);
      uint8_t* extras = panel + nb * 128;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t off = b * block_bytes;
        __m256i v[4];
        GatherDwords8(rows, off + qs_at, 1, v);
        for (int i = 0; i < 4; ++i) {
          StoreU(panel + b * 128 + 32 * i, v[i]);
        }
        uint8_t* e = extras + b * extra;
        for (int r = 0; r < kPPRows; ++r) {
          const uint8_t* blk = rows[r] + off;
          uint8_t* f = e + (q5 ? 4 * kPPRows : 0);
          if (q5) {
            std::memcpy(e + 4 * r, blk + qh_at, 4);
          }
          std::memcpy(f + 2 * r, blk, 2);  // d
          if (has_m) {
            std::memcpy(f + 2 * kPPRows + 2 * r, blk + 2, 2);  // m
          }
        }
      }
      return;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      // Q4_K: qs (128 bytes: 4 pairs x 8 dwords); Q5_K: qh (32) and qs,
      // contiguous in the block. d, dmin and scales lie alike in both.
      static_assert(offsetof(BlockQ5_K, d) == offsetof(BlockQ4_K, d) &&
                    offsetof(BlockQ5_K, dmin) == offsetof(BlockQ4_K, dmin) &&
                    offsetof(BlockQ5_K, scales) == offsetof(BlockQ4_K, scales));
      const bool q5 = w.type == GgmlType::kQ5_K;
      const int64_t level_bytes = q5 ? kQ5KLevelBytes8 : kQ4KLevelBytes8;
      const int64_t block_bytes = GgmlTypeSize(w.type);
      const int64_t levels_at = q5 ? offsetof(BlockQ5_K, qh) : offsetof(BlockQ4_K, qs);
      const int n_vectors = static_cast<int>(level_bytes / 32);
      const int64_t n_chunks = w.cols / kQK_K;
      uint8_t* factors = panel + n_chunks * level_bytes;
      for (int64_t c = 0; c < n_chunks; ++c) {
        const int64_t off = c * block_bytes;
        __m256i v[kQ5KLevelBytes8 / 32];
        GatherDwords8(rows, off + levels_at, n_vectors / 4, v);
        for (int i = 0; i < n_vectors; ++i) {
          StoreU(panel + c * level_bytes + 32 * i, v[i]);
        }
        uint8_t* f = factors + c * kQ4KFactorBytes8;
        uint8_t* sc = f + 4 * kPPRows;
        uint8_t* mn = sc + 8 * kPPRows;
        for (int r = 0; r < kPPRows; ++r) {
          const uint8_t* blk = rows[r] + off;
          std::memcpy(f + 2 * r, blk + offsetof(BlockQ4_K, d), 2);
          std::memcpy(f + 2 * kPPRows + 2 * r, blk + offsetof(BlockQ4_K, dmin), 2);
          for (int k = 0; k < 8; ++k) {
            KQuantScaleMin(k, blk + offsetof(BlockQ4_K, scales), &sc[k * kPPRows + r],
                           &mn[k * kPPRows + r]);
          }
        }
      }
      return;
    }
    case GgmlType::kQ6_K: {
      const int64_t n_chunks = w.cols / kQK_K;
      uint8_t* factors = panel + n_chunks * kQ6KLevelBytes8;
      for (int64_t c = 0; c < n_chunks; ++c) {
        const int64_t off = c * static_cast<int64_t>(sizeof(BlockQ6_K));
        __m256i v[48];
        GatherDwords8(rows, off + offsetof(BlockQ6_K, ql), 8, v);       // ql: 128 bytes
        GatherDwords8(rows, off + offsetof(BlockQ6_K, qh), 4, v + 32);  // qh: 64 bytes
        for (int i = 0; i < 48; ++i) {
          StoreU(panel + c * kQ6KLevelBytes8 + 32 * i, v[i]);
        }
        uint8_t* f = factors + c * kQ6KFactorBytes8;
        for (int r = 0; r < kPPRows; ++r) {
          const uint8_t* blk = rows[r] + off;
          std::memcpy(f + 2 * r, blk + offsetof(BlockQ6_K, d), 2);
          for (int k = 0; k < 16; ++k) {
            f[2 * kPPRows + k * kPPRows + r] = blk[offsetof(BlockQ6_K, scales) + k];
          }
        }
      }
      return;
    }
    default:
      LOG(FATAL) << "PrepackPanel8: type " << GgmlTypeName(w.type);
  }
}

// Q4_0, MR <= kQMrQ4: KernelQ4<MR, kUnsigned>'s arithmetic on a prepacked panel.
template <int MR>
void KernelQ4Prepacked(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                       int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= kQMrQ4);
  const int64_t nb = xa.nb;
  const uint8_t* scales = panel + nb * 128;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0,
         acc5 = acc0;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t *x1 = x0 + cols, *x2 = x0 + 2 * cols, *x3 = x0 + 3 * cols, *x4 = x0 + 4 * cols,
                *x5 = x0 + 5 * cols;
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = panel + b * 128;
    const int64_t xo = b * kQBlock;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0;
#pragma GCC unroll 4
    for (int d = 0; d < 4; ++d) {
      if (d % 2 == 0) {
        PrefetchAheadPart<128 + 2 * kPPRows, 2>(panel, b, d / 2, to_l2);
      }
      const __m256i raw = LoadU(q + 32 * d);
      const __m256i wl = _mm256_and_si256(raw, m4);
      const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
#define PP_STEP(I)                                                \
  MaddubsAcc16<Q4Layout::kUnsigned>(s##I, wl, x##I + xo + 4 * d); \
  MaddubsAcc16<Q4Layout::kUnsigned>(s##I, wh, x##I + xo + 16 + 4 * d);
      TANDEM_FOR_MR(PP_STEP)
#undef PP_STEP
    }
    const __m256 dw = HalvesToPs(scales + b * 2 * kPPRows);
#define PP_EPI(I)                                                                             \
  {                                                                                           \
    const __m256i tt = _mm256_sub_epi32(_mm256_madd_epi16(s##I, ones),                        \
                                        _mm256_set1_epi32(8 * xa.sum[I * nb + b]));           \
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(tt), _mm256_set1_ps(xa.d[I * nb + b])); \
    acc##I = _mm256_fmadd_ps(f, dw, acc##I);                                                  \
  }
    TANDEM_FOR_MR(PP_EPI)
#undef PP_EPI
  }
#define PP_STORE(I) StorePartial(y + I * ldy, acc##I, nvalid);
  TANDEM_FOR_MR(PP_STORE)
#undef PP_STORE
}

// Q8_0, MR <= kQMrQ8: KernelQ8's arithmetic (the sign trick, |w| formed here).
template <int MR>
void KernelQ8Prepacked(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                       int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= kQMrQ8);
  const int64_t nb = xa.nb;
  const uint8_t* scales = panel + nb * 256;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4, acc5;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t *x1 = x0 + cols, *x2 = x0 + 2 * cols, *x3 = x0 + 3 * cols;
  const uint8_t *x4 = nullptr, *x5 = nullptr;
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = panel + b * 256;
    const int64_t xo = b * kQBlock;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4, s5;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      if (g % 2 == 0) {
        PrefetchAheadPart<256 + 2 * kPPRows, 4>(panel, b, g / 2, to_l2);
      }
      const __m256i sgn = LoadU(q + 32 * g);
      const __m256i ab = _mm256_abs_epi8(sgn);
#define PP_STEP(I) SignMaddAcc32(s##I, ab, sgn, ones, x##I + xo + 4 * g);
      TANDEM_FOR_MR(PP_STEP)
#undef PP_STEP
    }
    const __m256 dw = HalvesToPs(scales + b * 2 * kPPRows);
#define PP_EPI(I)                                                                               \
  {                                                                                             \
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s##I), _mm256_set1_ps(xa.d[I * nb + b])); \
    acc##I = _mm256_fmadd_ps(f, dw, acc##I);                                                    \
  }
    TANDEM_FOR_MR(PP_EPI)
#undef PP_EPI
  }
#define PP_STORE(I) StorePartial(y + I * ldy, acc##I, nvalid);
  TANDEM_FOR_MR(PP_STORE)
#undef PP_STORE
}

// s += madd(maddubs(broadcast(|x|), sign(w, broadcast(x))), 1): KernelQ8's
// integer products with the sign moved onto the weights, so no |w| is formed
// per group (at batch 1 one vpabsb per vpmaddubsw): one vector instruction
// fewer per step, one broadcast more. Exact only where w != -128 (its
// negation wraps), hence only for matrices without it (Q8NoMinQuant).
inline void AbsXSignMaddAcc32(__m256i& s, __m256i w, __m256i ones, const uint8_t* xabs,
                              const uint8_t* x) {
  __m256i t, u;
  __asm__(
      "vpbroadcastd %[x], %[u]\n\t"
      "vpsignb %[u], %[w], %[u]\n\t"
      "vpbroadcastd %[xa], %[t]\n\t"
      "vpmaddubsw %[u], %[t], %[t]\n\t"
      "vpmaddwd %[ones], %[t], %[t]\n\t"
      "vpaddd %[t], %[s], %[s]"
      : [s] "+x"(s), [t] "=&x"(t), [u] "=&x"(u)
      : [w] "x"(w), [ones] "x"(ones), [x] "m"(*reinterpret_cast<const UnalignedInt32*>(x)),
        [xa] "m"(*reinterpret_cast<const UnalignedInt32*>(xabs)));
}

// Q8_0 at batch 1-2 on the copy, for matrices without -128 (xa.qabs set):
// the same integer dots as KernelQ8Prepacked, the same fp32 epilogue.
template <int MR>
void KernelQ8PrepackedAbsX(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                           int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= 2);
  const int64_t nb = xa.nb;
  const uint8_t* scales = panel + nb * 256;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t* x1 = x0 + cols;
  const uint8_t* a0 = xa.qabs;
  const uint8_t* a1 = a0 + cols;
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = panel + b * 256;
    const int64_t xo = b * kQBlock;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      if (g % 2 == 0) {
        PrefetchAheadPart<256 + 2 * kPPRows, 4>(panel, b, g / 2, to_l2);
      }
      const __m256i w = LoadU(q + 32 * g);
      AbsXSignMaddAcc32(s0, w, ones, a0 + xo + 4 * g, x0 + xo + 4 * g);
      if constexpr (MR > 1) {
        AbsXSignMaddAcc32(s1, w, ones, a1 + xo + 4 * g, x1 + xo + 4 * g);
      }
    }
    const __m256 dw = HalvesToPs(scales + b * 2 * kPPRows);
    acc0 =
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(xa.d[b])), dw, acc0);
    if constexpr (MR > 1) {
      acc1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(xa.d[nb + b])),
                             dw, acc1);
    }
  }
  StorePartial(y, acc0, nvalid);
  if constexpr (MR > 1) {
    StorePartial(y + ldy, acc1, nvalid);
  }
}

// Q4_1, Q5_0, Q5_1, MR <= 4: LevelKernel's arithmetic. Group g (k = 4g..)
// is the low nibbles of dword g (g < 4) or the high ones of dword g - 4, plus
// (Q5) bits 4g..4g+3 of the row's qh word as bit 4 of its 4 bytes (as
// PackLevelBlock8). 4-bit levels sum 8 vpmaddubsw pairs in int16 (<= 30480),
// 5-bit ones 4 (<= 4 * 2 * 31 * 127 = 31496).
template <GgmlType T, int MR>
void KernelLevel32Prepacked(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                            int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= 4);
  constexpr bool kQ5 = T != GgmlType::kQ4_1;
  constexpr bool kHasM = T != GgmlType::kQ5_0;
  constexpr int64_t kExtra = Level32ExtraBytes(T);
  const int64_t nb = xa.nb;
  const uint8_t* extras = panel + nb * 128;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4, acc5;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t *x1 = x0 + cols, *x2 = x0 + 2 * cols, *x3 = x0 + 3 * cols;
  const uint8_t *x4 = nullptr, *x5 = nullptr;
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = panel + b * 128;
    const uint8_t* e = extras + b * kExtra;
    const uint8_t* f = e + (kQ5 ? 4 * kPPRows : 0);
    const int64_t xo = b * kQBlock;
    [[maybe_unused]] const __m256i qh = kQ5 ? LoadU(e) : _mm256_setzero_si256();
    auto level = [&](int g) {
      const __m256i raw = LoadU(q + 32 * (g % 4));
      __m256i lv = g < 4 ? _mm256_and_si256(raw, m4)
                         : _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kQ5) {
        const __m256i nib = _mm256_and_si256(_mm256_srli_epi32(qh, 4 * g), _mm256_set1_epi32(0xF));
        const __m256i spread = _mm256_and_si256(
            _mm256_mullo_epi32(nib, _mm256_set1_epi32(0x00204081)), _mm256_set1_epi32(0x01010101));
        lv = _mm256_or_si256(lv, _mm256_slli_epi32(spread, 4));
      }
      return lv;
    };
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4, s5;
    __m256i u0 = s0, u1 = s0, u2 = s0, u3 = s0, u4, u5;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      if (g % 4 == 0) {
        PrefetchAheadPart<128 + kExtra, 2>(panel, b, g / 4, to_l2);
      }
      const __m256i lv = level(g);
      // 4-bit: one int16 sum over the block (s); 5-bit: groups 0-3 in s, 4-7 in u.
      if (!kQ5 || g < 4) {
#define PP_STEP(I) MaddubsAcc16<Q4Layout::kUnsigned>(s##I, lv, x##I + xo + 4 * g);
        TANDEM_FOR_MR(PP_STEP)
#undef PP_STEP
      } else {
#define PP_STEP(I) MaddubsAcc16<Q4Layout::kUnsigned>(u##I, lv, x##I + xo + 4 * g);
        TANDEM_FOR_MR(PP_STEP)
#undef PP_STEP
      }
    }
    const __m256 dw = HalvesToPs(f);
    [[maybe_unused]] const __m256 mw = kHasM ? HalvesToPs(f + 2 * kPPRows) : _mm256_setzero_ps();
#define PP_EPI(I)                                                                              \
  {                                                                                            \
    const int64_t jj = I * nb + b;                                                             \
    __m256i t = _mm256_madd_epi16(s##I, ones);                                                 \
    if constexpr (kQ5) {                                                                       \
      t = _mm256_add_epi32(t, _mm256_madd_epi16(u##I, ones));                                  \
    }                                                                                          \
    if constexpr (LevelOffset<T>() != 0) {                                                     \
      t = _mm256_sub_epi32(t, _mm256_set1_epi32(LevelOffset<T>() * xa.sum[jj]));               \
    }                                                                                          \
    acc##I = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_set1_ps(xa.d[jj])), \
                             acc##I);                                                          \
    if constexpr (kHasM) {                                                                     \
      acc##I = _mm256_fmadd_ps(mw, _mm256_set1_ps(xa.dsum[jj]), acc##I);                       \
    }                                                                                          \
  }
    TANDEM_FOR_MR(PP_EPI)
#undef PP_EPI
  }
#define PP_STORE(I) StorePartial(y + I * ldy, acc##I, nvalid);
  TANDEM_FOR_MR(PP_STORE)
#undef PP_STORE
}

// Q4_K, MR <= 4: LevelKernel's arithmetic. Per pair j of sub-blocks the low
// nibbles (sub-block 2j) and the high ones (2j + 1) each sum 8 vpmaddubsw
// pairs in int16 (<= 8 * 2 * 15 * 127 = 30480) before one vpmaddwd.
template <int MR>
void KernelQ4KPrepacked(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                        int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= 4);
  const int64_t nb = xa.nb;
  const int64_t n_chunks = nb / 8;
  const uint8_t* factors = panel + n_chunks * kQ4KLevelBytes8;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 neg = _mm256_set1_ps(-0.0f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4, acc5;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t *x1 = x0 + cols, *x2 = x0 + 2 * cols, *x3 = x0 + 3 * cols;
  const uint8_t *x4 = nullptr, *x5 = nullptr;
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t c = 0; c < n_chunks; ++c) {
    const uint8_t* lv = panel + c * kQ4KLevelBytes8;
    const uint8_t* f = factors + c * kQ4KFactorBytes8;
    const __m256 d = HalvesToPs(f);
    const __m256 dmin = HalvesToPs(f + 2 * kPPRows);
    const uint8_t* sc = f + 4 * kPPRows;
    const uint8_t* mn = sc + 8 * kPPRows;
    for (int j = 0; j < 4; ++j) {
      const int64_t b = c * 8 + 2 * j;
      const int64_t xo = b * kQBlock;
      __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4, s5;
      __m256i u0 = s0, u1 = s0, u2 = s0, u3 = s0, u4, u5;
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        if (g % 2 == 0) {
          PrefetchAheadPart<kQ4KLevelBytes8 + kQ4KFactorBytes8, 16>(panel, c, 4 * j + g / 2, to_l2);
        }
        const __m256i raw = LoadU(lv + 32 * (8 * j + g));
        const __m256i wl = _mm256_and_si256(raw, m4);
        const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
#define PP_STEP(I)                                                \
  MaddubsAcc16<Q4Layout::kUnsigned>(s##I, wl, x##I + xo + 4 * g); \
  MaddubsAcc16<Q4Layout::kUnsigned>(u##I, wh, x##I + xo + kQBlock + 4 * g);
        TANDEM_FOR_MR(PP_STEP)
#undef PP_STEP
      }
      // Sub-block 2j, then 2j + 1 (LevelKernel's order).
      const __m256 dlo0 = _mm256_mul_ps(d, U8x8ToPs(sc + 2 * j * kPPRows));
      const __m256 m0 = _mm256_xor_ps(_mm256_mul_ps(dmin, U8x8ToPs(mn + 2 * j * kPPRows)), neg);
      const __m256 dlo1 = _mm256_mul_ps(d, U8x8ToPs(sc + (2 * j + 1) * kPPRows));
      const __m256 m1 =
          _mm256_xor_ps(_mm256_mul_ps(dmin, U8x8ToPs(mn + (2 * j + 1) * kPPRows)), neg);
#define PP_EPI(I)                                                                               \
  {                                                                                             \
    const int64_t jj = I * nb + b;                                                              \
    acc##I = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s##I, ones)),                 \
                             _mm256_mul_ps(dlo0, _mm256_set1_ps(xa.d[jj])), acc##I);            \
    acc##I = _mm256_fmadd_ps(m0, _mm256_set1_ps(xa.dsum[jj]), acc##I);                          \
    acc##I = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(u##I, ones)),                 \
                             _mm256_mul_ps(dlo1, _mm256_set1_ps(xa.d[jj + 1])), acc##I);        \
    acc##I = _mm256_fmadd_ps(m1, _mm256_set1_ps(xa.dsum[jj + 1]), acc##I);                      \
  }
      TANDEM_FOR_MR(PP_EPI)
#undef PP_EPI
    }
  }
#define PP_STORE(I) StorePartial(y + I * ldy, acc##I, nvalid);
  TANDEM_FOR_MR(PP_STORE)
#undef PP_STORE
}

// Q5_K, MR <= 4: LevelKernel's arithmetic, one sub-block at a time. Levels
// (<= 31): the qs nibbles of sub-block sb (low ones for even sb) with bit sb
// of each qh byte moved to bit 4 (one immediate 16-bit shift, none for sb =
// 4, and a mask: a shift carries bits across bytes only where the mask drops
// them), as LevelsFromRaw. Groups 0-3 and 4-7 sum 4 vpmaddubsw pairs each in
// int16 (<= 31496), widened and added to the sub-block's exact dot.
template <int MR>
void KernelQ5KPrepacked(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                        int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= 4);
  const int64_t nb = xa.nb;
  const int64_t n_chunks = nb / 8;
  const uint8_t* factors = panel + n_chunks * kQ5KLevelBytes8;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m10 = _mm256_set1_epi8(0x10);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 neg = _mm256_set1_ps(-0.0f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4, acc5;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t *x1 = x0 + cols, *x2 = x0 + 2 * cols, *x3 = x0 + 3 * cols;
  const uint8_t *x4 = nullptr, *x5 = nullptr;
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t c = 0; c < n_chunks; ++c) {
    const uint8_t* lv = panel + c * kQ5KLevelBytes8;
    const uint8_t* f = factors + c * kQ5KFactorBytes8;
    const __m256 d = HalvesToPs(f);
    const __m256 dmin = HalvesToPs(f + 2 * kPPRows);
    const uint8_t* sc = f + 4 * kPPRows;
    const uint8_t* mn = sc + 8 * kPPRows;
    auto sub_block = [&](auto sbc) {
      constexpr int sb = decltype(sbc)::value;
      const int64_t b = c * 8 + sb;
      const int64_t xo = b * kQBlock;
      auto level = [&](int g) {
        const __m256i qs = LoadU(lv + 32 * (8 + 8 * (sb / 2) + g));
        const __m256i qh = LoadU(lv + 32 * g);
        const __m256i nib =
            sb % 2 == 0 ? _mm256_and_si256(qs, m4) : _mm256_and_si256(_mm256_srli_epi16(qs, 4), m4);
        __m256i hi;
        if constexpr (sb < 4) {
          hi = _mm256_slli_epi16(qh, 4 - sb);
        } else if constexpr (sb == 4) {
          hi = qh;
        } else {
          hi = _mm256_srli_epi16(qh, sb - 4);
        }
        return _mm256_or_si256(nib, _mm256_and_si256(hi, m10));
      };
      __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4, s5;
      __m256i u0 = s0, u1 = s0, u2 = s0, u3 = s0, u4, u5;
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        if (g % 4 == 0) {
          PrefetchAheadPart<kQ5KLevelBytes8 + kQ5KFactorBytes8, 16>(panel, c, 2 * sb + g / 4,
                                                                    to_l2);
        }
        const __m256i w = level(g);
        if (g < 4) {
#define PP_STEP(I) MaddubsAcc16<Q4Layout::kUnsigned>(s##I, w, x##I + xo + 4 * g);
          TANDEM_FOR_MR(PP_STEP)
#undef PP_STEP
        } else {
#define PP_STEP(I) MaddubsAcc16<Q4Layout::kUnsigned>(u##I, w, x##I + xo + 4 * g);
          TANDEM_FOR_MR(PP_STEP)
#undef PP_STEP
        }
      }
      const __m256 dl = _mm256_mul_ps(d, U8x8ToPs(sc + sb * kPPRows));
      const __m256 m = _mm256_xor_ps(_mm256_mul_ps(dmin, U8x8ToPs(mn + sb * kPPRows)), neg);
#define PP_EPI(I)                                                                                \
  {                                                                                              \
    const int64_t jj = I * nb + b;                                                               \
    const __m256i t =                                                                            \
        _mm256_add_epi32(_mm256_madd_epi16(s##I, ones), _mm256_madd_epi16(u##I, ones));          \
    acc##I = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dl, _mm256_set1_ps(xa.d[jj])), \
                             acc##I);                                                            \
    acc##I = _mm256_fmadd_ps(m, _mm256_set1_ps(xa.dsum[jj]), acc##I);                            \
  }
      TANDEM_FOR_MR(PP_EPI)
#undef PP_EPI
    };
    sub_block(std::integral_constant<int, 0>{});
    sub_block(std::integral_constant<int, 1>{});
    sub_block(std::integral_constant<int, 2>{});
    sub_block(std::integral_constant<int, 3>{});
    sub_block(std::integral_constant<int, 4>{});
    sub_block(std::integral_constant<int, 5>{});
    sub_block(std::integral_constant<int, 6>{});
    sub_block(std::integral_constant<int, 7>{});
  }
#define PP_STORE(I) StorePartial(y + I * ldy, acc##I, nvalid);
  TANDEM_FOR_MR(PP_STORE)
#undef PP_STORE
}

// Q6_K, MR <= 4: LevelKernel's arithmetic. Levels <= 63: two vpmaddubsw
// pairs (<= 2 * 2 * 63 * 127 = 32004) per int16 sum, so each 16-half (4
// groups) widens two of them.
template <int MR>
void KernelQ6KPrepacked(const uint8_t* panel, const QuantizedActs& xa, int64_t cols, float* y,
                        int64_t ldy, int nvalid) {
  static_assert(MR >= 1 && MR <= 4);
  const int64_t nb = xa.nb;
  const int64_t n_chunks = nb / 8;
  const uint8_t* factors = panel + n_chunks * kQ6KLevelBytes8;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4, acc5;
  const auto* x0 = reinterpret_cast<const uint8_t*>(xa.qs);
  const uint8_t *x1 = x0 + cols, *x2 = x0 + 2 * cols, *x3 = x0 + 3 * cols;
  const uint8_t *x4 = nullptr, *x5 = nullptr;
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t c = 0; c < n_chunks; ++c) {
    const uint8_t* lv = panel + c * kQ6KLevelBytes8;
    const uint8_t* f = factors + c * kQ6KFactorBytes8;
    const __m256 d = HalvesToPs(f);
    const uint8_t* sc = f + 2 * kPPRows;
    // Sub-block 4h + k: the nibbles of ql part k % 2 (low ones for k < 2)
    // and bits 2k, 2k + 1 of qh half h. k is a constant in each instance:
    // the two bits move to bits 4-5 of their byte with one immediate shift
    // (none for k = 2) and one mask; the 16-bit shifts carry bits across
    // bytes only where the mask drops them.
    auto sub_block = [&](int hh, auto kc) {
      constexpr int k = decltype(kc)::value;
      const int sb = 4 * hh + k;
      const int64_t b = c * 8 + sb;
      const int64_t xo = b * kQBlock;
      auto level = [&](int g) {
        const __m256i ql = LoadU(lv + 32 * (8 * (2 * hh + k % 2) + g));
        const __m256i qh = LoadU(lv + 32 * (32 + 8 * hh + g));
        const __m256i nib =
            k < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
        __m256i hi2;
        if constexpr (k == 0) {
          hi2 = _mm256_slli_epi16(qh, 4);
        } else if constexpr (k == 1) {
          hi2 = _mm256_slli_epi16(qh, 2);
        } else if constexpr (k == 2) {
          hi2 = qh;
        } else {
          hi2 = _mm256_srli_epi16(qh, 2);
        }
        return _mm256_or_si256(nib, _mm256_and_si256(hi2, m30));
      };
      // The 16-halves: groups 0-3 into dot s, 4-7 into dot u, each from two
      // int16 sums of two vpmaddubsw pairs.
      __m256i s0, s1, s2, s3, s4, s5, u0, u1, u2, u3, u4, u5;
#define PP_HALF(HALF, DOT)                                                                     \
  {                                                                                            \
    __m256i t0 = _mm256_setzero_si256(), t1 = t0, t2 = t0, t3 = t0, t4, t5;                    \
    __m256i v0 = t0, v1 = t0, v2 = t0, v3 = t0, v4, v5;                                        \
    const __m256i w0 = level(4 * HALF);                                                        \
    const __m256i w1 = level(4 * HALF + 1);                                                    \
    const __m256i w2 = level(4 * HALF + 2);                                                    \
    const __m256i w3 = level(4 * HALF + 3);                                                    \
    const int64_t xh = xo + 16 * HALF;                                                         \
    PrefetchAheadPart<kQ6KLevelBytes8 + kQ6KFactorBytes8, 16>(panel, c, 2 * sb + HALF, to_l2); \
    TANDEM_FOR_MR(PP_STEP)                                                                     \
    TANDEM_FOR_MR(DOT)                                                                         \
  }
#define PP_STEP(I)                                            \
  MaddubsAcc16<Q4Layout::kUnsigned>(t##I, w0, x##I + xh);     \
  MaddubsAcc16<Q4Layout::kUnsigned>(t##I, w1, x##I + xh + 4); \
  MaddubsAcc16<Q4Layout::kUnsigned>(v##I, w2, x##I + xh + 8); \
  MaddubsAcc16<Q4Layout::kUnsigned>(v##I, w3, x##I + xh + 12);
#define PP_DOT_S(I) \
  s##I = _mm256_add_epi32(_mm256_madd_epi16(t##I, ones), _mm256_madd_epi16(v##I, ones));
#define PP_DOT_U(I) \
  u##I = _mm256_add_epi32(_mm256_madd_epi16(t##I, ones), _mm256_madd_epi16(v##I, ones));
      PP_HALF(0, PP_DOT_S)
      PP_HALF(1, PP_DOT_U)
#undef PP_DOT_U
#undef PP_DOT_S
#undef PP_STEP
#undef PP_HALF
      const __m256 dlo = _mm256_mul_ps(d, S8x8ToPs(sc + 2 * sb * kPPRows));
      const __m256 dhi = _mm256_mul_ps(d, S8x8ToPs(sc + (2 * sb + 1) * kPPRows));
#define PP_EPI(I)                                                                                 \
  {                                                                                               \
    const int64_t jj = I * nb + b;                                                                \
    const __m256 dx = _mm256_set1_ps(xa.d[jj]);                                                   \
    acc##I = _mm256_fmadd_ps(                                                                     \
        _mm256_cvtepi32_ps(_mm256_sub_epi32(s##I, _mm256_set1_epi32(32 * xa.sum_lo[jj]))),        \
        _mm256_mul_ps(dlo, dx), acc##I);                                                          \
    acc##I = _mm256_fmadd_ps(                                                                     \
        _mm256_cvtepi32_ps(                                                                       \
            _mm256_sub_epi32(u##I, _mm256_set1_epi32(32 * (xa.sum[jj] - xa.sum_lo[jj])))),        \
        _mm256_mul_ps(dhi, dx), acc##I);                                                          \
  }
      TANDEM_FOR_MR(PP_EPI)
#undef PP_EPI
    };
    for (int hh = 0; hh < 2; ++hh) {
      sub_block(hh, std::integral_constant<int, 0>{});
      sub_block(hh, std::integral_constant<int, 1>{});
      sub_block(hh, std::integral_constant<int, 2>{});
      sub_block(hh, std::integral_constant<int, 3>{});
    }
  }
#define PP_STORE(I) StorePartial(y + I * ldy, acc##I, nvalid);
  TANDEM_FOR_MR(PP_STORE)
#undef PP_STORE
}

template <int MR>
PrepackedTileFn PrepackedKernel8(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return KernelQ4Prepacked<MR>;
    case GgmlType::kQ8_0:
      return KernelQ8Prepacked<std::min(MR, kQMrQ8)>;
    case GgmlType::kQ4_1:
      return KernelLevel32Prepacked<GgmlType::kQ4_1, std::min(MR, 4)>;
    case GgmlType::kQ5_0:
      return KernelLevel32Prepacked<GgmlType::kQ5_0, std::min(MR, 4)>;
    case GgmlType::kQ5_1:
      return KernelLevel32Prepacked<GgmlType::kQ5_1, std::min(MR, 4)>;
    case GgmlType::kQ4_K:
      return KernelQ4KPrepacked<std::min(MR, 4)>;
    case GgmlType::kQ5_K:
      return KernelQ5KPrepacked<std::min(MR, 4)>;
    default:
      return KernelQ6KPrepacked<std::min(MR, 4)>;
  }
}

// Activation rows per prepacked micro-kernel call.
int PrepackedMr8(GgmlType type) { return type == GgmlType::kQ4_0 ? kQMrQ4 : 4; }

PrepackedTileFn PrepackedTile8(GgmlType type, int mr) {
  switch (mr) {
    case 1:
      return PrepackedKernel8<1>(type);
    case 2:
      return PrepackedKernel8<2>(type);
    case 3:
      return PrepackedKernel8<3>(type);
    case 4:
      return PrepackedKernel8<4>(type);
    case 5:
      return PrepackedKernel8<5>(type);
    default:
      return PrepackedKernel8<6>(type);
  }
}

// ---------------------------------------------------------------------------
// Float GEMM for larger m: 16-row fp32 panels, 6x16 micro-kernel
// ---------------------------------------------------------------------------

constexpr int kFPanelRows = kFloatPanelRows;
constexpr int kFMr = 6;
constexpr int64_t kFKc = kFloatKc;  // columns per packed panel: 16 KB per panel

inline void Transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
  const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
  const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
  const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Stores (or adds to) the first n (<= 16) of a:b at dst.
inline void StoreF16Rows(float* dst, __m256 a, __m256 b, int n, bool accumulate) {
  if (n == 16) {
    if (accumulate) {
      a = _mm256_add_ps(a, _mm256_loadu_ps(dst));
      b = _mm256_add_ps(b, _mm256_loadu_ps(dst + 8));
    }
    _mm256_storeu_ps(dst, a);
    _mm256_storeu_ps(dst + 8, b);
    return;
  }
  alignas(32) float tmp[16];
  _mm256_store_ps(tmp, a);
  _mm256_store_ps(tmp + 8, b);
  for (int r = 0; r < n; ++r) {
    dst[r] = accumulate ? dst[r] + tmp[r] : tmp[r];
  }
}

template <GgmlType T>
void PackFloatPanel16(const WeightView& w, int64_t r0, int64_t k0, int64_t kc, float* out) {
  const uint8_t* rows[kFPanelRows];
  for (int r = 0; r < kFPanelRows; ++r) {
    rows[r] = w.data + std::min(r0 + r, w.rows - 1) * w.row_bytes;
  }
  const int64_t kc8 = kc & ~int64_t{7};
  for (int64_t k = 0; k < kc8; k += 8) {
    for (int half = 0; half < 2; ++half) {
      __m256 v[8];
      for (int r = 0; r < 8; ++r) {
        v[r] = Load8<T>(rows[half * 8 + r], k0 + k);
      }
      Transpose8x8(v);
      for (int j = 0; j < 8; ++j) {
        _mm256_storeu_ps(out + (k + j) * kFPanelRows + half * 8, v[j]);
      }
    }
  }
  for (int64_t k = kc8; k < kc; ++k) {
    for (int r = 0; r < kFPanelRows; ++r) {
      out[k * kFPanelRows + r] = Load1<T>(rows[r], k0 + k);
    }
  }
}

// One 16-row panel [kc][16] of fp32 (the GEMM's buffer) or of the load-time
// copy's halves (Src = F16 / BF16, each value widened as it is loaded: the
// same values, so the same FMAs in the same order).
template <int MR, GgmlType Src>
void KernelF32x16(const uint8_t* panel, int64_t kc, const float* x, float* y, int64_t ldy,
                  int nvalid, bool accumulate) {
  static_assert(MR >= 1 && MR <= 6);
  __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0;
  __m256 a3 = a0, b3 = a0, a4 = a0, b4 = a0, a5 = a0, b5 = a0;
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k, x += MR) {
    const __m256 w0 = Load8<Src>(panel, k * kFPanelRows);
    const __m256 w1 = Load8<Src>(panel, k * kFPanelRows + 8);
#define F_STEP(I)                                 \
  {                                               \
    const __m256 xb = _mm256_broadcast_ss(x + I); \
    a##I = _mm256_fmadd_ps(w0, xb, a##I);         \
    b##I = _mm256_fmadd_ps(w1, xb, b##I);         \
  }
    TANDEM_FOR_MR(F_STEP)
#undef F_STEP
  }
#define F_STORE(I) StoreF16Rows(y + I * ldy, a##I, b##I, nvalid, accumulate);
  TANDEM_FOR_MR(F_STORE)
#undef F_STORE
}

template <GgmlType Src>
void KernelTile16(int mr, const uint8_t* panel, int64_t kc, const float* x, float* y, int64_t ldy,
                  int nvalid, bool accumulate) {
  switch (mr) {
    case 1:
      KernelF32x16<1, Src>(panel, kc, x, y, ldy, nvalid, accumulate);
      break;
    case 2:
      KernelF32x16<2, Src>(panel, kc, x, y, ldy, nvalid, accumulate);
      break;
    case 3:
      KernelF32x16<3, Src>(panel, kc, x, y, ldy, nvalid, accumulate);
      break;
    case 4:
      KernelF32x16<4, Src>(panel, kc, x, y, ldy, nvalid, accumulate);
      break;
    case 5:
      KernelF32x16<5, Src>(panel, kc, x, y, ldy, nvalid, accumulate);
      break;
    default:
      KernelF32x16<6, Src>(panel, kc, x, y, ldy, nvalid, accumulate);
      break;
  }
}

void KernelF32Tile(int mr, const float* panel, int64_t kc, const float* x, float* y, int64_t ldy,
                   int nvalid, bool accumulate) {
  KernelTile16<GgmlType::kF32>(mr, reinterpret_cast<const uint8_t*>(panel), kc, x, y, ldy, nvalid,
                               accumulate);
}

// Two panels (GemmFloatPanels' pairs) read from the load-time copy as they
// are, one after the other (sixteen ymm registers hold one panel's 6 x 16
// accumulators, not two panels'): at a few activation tiles this saves
// converting every value into the buffer (a store and a reload), which only
// many tiles repay.
template <GgmlType Src>
void KernelHalfTile2(int mr, const uint8_t* half, int64_t stride, int64_t kc, const float* x,
                     float* y, int64_t ldy, int nvalid2, bool accumulate) {
  KernelTile16<Src>(mr, half, kc, x, y, ldy, kFPanelRows, accumulate);
  KernelTile16<Src>(mr, half + stride, kc, x, y + kFPanelRows, ldy, nvalid2, accumulate);
}

// ---------------------------------------------------------------------------
// Float GEMV for small m (F32, F16, BF16 read in place: half-size bandwidth)
// ---------------------------------------------------------------------------
//
// Batch-invariant by construction: every y[i][r] is summed in exactly the
// order of the GEMM micro-kernel above (one fma per k, k ascending within
// kFKc-column chunks, each chunk's sum added to y), so a sequence's logits do
// not depend on how many other sequences share the decode step. Lanes = rows
// as in the GEMM, but without a panel buffer: 8 rows x 8 columns are loaded
// in their stored type, transposed in registers and used at once.

constexpr int kGemvMaxM = 3;  // m above this uses the packed GEMM

// y[i][r0 .. r0 + 8) for i < MI, from 8 weight rows: one fma chain per
// activation row. Not more rows at once: rows a power of two apart (4 KiB
// for 2048 F16 columns) share an L1 set, and more streams than this defeat
// the prefetchers on weights mmap'd in 4 KiB pages (32 rows at once ran at
// half the speed; docs/benchmarks.md). Each 256-column chunk is summed from
// zero and added to y in chunk order, exactly as the GEMM does.
template <GgmlType T, int MI>
void GemvRows8(const WeightView& w, int64_t r0, const float* x, float* y) {
  static_assert(MI >= 1 && MI <= 3);
  const int64_t cols = w.cols;
  const uint8_t* rows[8];
  for (int r = 0; r < 8; ++r) {
    rows[r] = w.data + std::min(r0 + r, w.rows - 1) * w.row_bytes;
  }
  const int nvalid = static_cast<int>(std::min<int64_t>(8, w.rows - r0));
  for (int64_t k0 = 0; k0 < cols; k0 += kFKc) {
    const int64_t k_end = std::min(cols, k0 + kFKc);
    const int64_t k_end8 = k0 + ((k_end - k0) & ~int64_t{7});
    __m256 acc[MI];
#pragma GCC unroll 3
    for (int i = 0; i < MI; ++i) {
      acc[i] = _mm256_setzero_ps();
    }
    for (int64_t k = k0; k < k_end8; k += 8) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        v[r] = Load8<T>(rows[r], k);
      }
      Transpose8x8(v);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 3
        for (int i = 0; i < MI; ++i) {
          acc[i] = _mm256_fmadd_ps(v[j], _mm256_broadcast_ss(x + i * cols + k + j), acc[i]);
        }
      }
    }
    for (int64_t k = k_end8; k < k_end; ++k) {  // the chunk's last < 8 columns
      alignas(32) float col[8];
      for (int r = 0; r < 8; ++r) {
        col[r] = Load1<T>(rows[r], k);
      }
      const __m256 v = _mm256_load_ps(col);
      for (int i = 0; i < MI; ++i) {
        acc[i] = _mm256_fmadd_ps(v, _mm256_set1_ps(x[i * cols + k]), acc[i]);
      }
    }
    // Add the chunk to y in chunk order, as StoreF16Rows does.
    for (int i = 0; i < MI; ++i) {
      float* dst = y + i * w.rows + r0;
      __m256 a = acc[i];
      if (k0 > 0) {
        alignas(32) float prev[8] = {};
        std::copy(dst, dst + nvalid, prev);
        a = _mm256_add_ps(a, _mm256_load_ps(prev));
      }
      StorePartial(dst, a, nvalid);
    }
  }
}

template <GgmlType T>
void GemvFloat(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool) {
  const int64_t groups = (w.rows + 7) / 8;
  pool.ParallelFor(groups, 4, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t r0 = g * 8;
      switch (m) {
        case 1:
          GemvRows8<T, 1>(w, r0, x, y);
          break;
        case 2:
          GemvRows8<T, 2>(w, r0, x, y);
          break;
        default:
          GemvRows8<T, 3>(w, r0, x, y);
          break;
      }
    }
  });
}

template <GgmlType T>
void MatMulFloat(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool) {
  if (m <= kGemvMaxM) {
    GemvFloat<T>(w, x, m, y, pool);
  } else {
    GemmFloatPanels(w, x, m, y, pool, kFMr, KernelF32Tile);
  }
}

// F16 / BF16 GEMV on weights repacked once at load: 16-row panels, each the
// kFKc-column chunks of its rows in turn, a chunk stored k-major ([kc][16]
// values in the weights' own 2-byte type), so the GEMV streams each panel
// once with no transposes (GemvRows8 transposes 8x8 tiles in registers on
// every call). The same sums in the same order as GemvRows8 and the GEMM: one
// fma per k in k order per chunk, each chunk summed from zero and added to y
// in chunk order; rows 0-7 and 8-15 of a panel are two independent chains
// per activation row.
constexpr int kF16PanelRows = 16;
static_assert(kF16PanelRows == kFloatPanelRows, "PrepackedFloatPanelBytes' layout");

void PrepackFloatPanel(const WeightView& w, int64_t p, uint8_t* out) {
  for (int r = 0; r < kF16PanelRows; ++r) {
    // Rows past the end repeat the last one (their lanes are never stored).
    const auto* row = reinterpret_cast<const uint16_t*>(
        w.data + std::min(p * kF16PanelRows + r, w.rows - 1) * w.row_bytes);
    auto* o = reinterpret_cast<uint16_t*>(out) + r;
    for (int64_t k = 0; k < w.cols; ++k) {
      o[k * kF16PanelRows] = row[k];  // chunks are consecutive: [k][16] throughout
    }
  }
}

template <GgmlType T, int MI>
void GemvPrepacked16(const WeightView& w, const uint8_t* panel, int64_t r0, const float* x,
                     float* y) {
  static_assert(MI >= 1 && MI <= 3);
  const int64_t cols = w.cols;
  const int nvalid = static_cast<int>(std::min<int64_t>(kF16PanelRows, w.rows - r0));
  const bool to_l2 = StreamPrefetchToL2();
  for (int64_t k0 = 0; k0 < cols; k0 += kFKc) {
    const int64_t k_end = std::min(cols, k0 + kFKc);
    __m256 lo[MI], hi[MI];
#pragma GCC unroll 3
    for (int i = 0; i < MI; ++i) {
      lo[i] = _mm256_setzero_ps();
      hi[i] = _mm256_setzero_ps();
    }
    const uint8_t* pk = panel + k0 * kF16PanelRows * 2;
#pragma GCC unroll 4
    for (int64_t k = k0; k < k_end; ++k, pk += kF16PanelRows * 2) {
      if ((k & 1) == 0) {  // a 64-byte line per two k (see PrefetchAheadPart)
        PrefetchLine(pk + kPrefetchAheadBytes, to_l2);
      }
      const __m256 wl = Load8<T>(pk, 0);
      const __m256 wh = Load8<T>(pk + 16, 0);
#pragma GCC unroll 3
      for (int i = 0; i < MI; ++i) {
        const __m256 xb = _mm256_broadcast_ss(x + i * cols + k);
        lo[i] = _mm256_fmadd_ps(wl, xb, lo[i]);
        hi[i] = _mm256_fmadd_ps(wh, xb, hi[i]);
      }
    }
    for (int i = 0; i < MI; ++i) {
      float* dst = y + i * w.rows + r0;
      __m256 a = lo[i];
      __m256 b = hi[i];
      if (k0 > 0) {
        alignas(32) float prev[16] = {};
        std::copy(dst, dst + nvalid, prev);
        a = _mm256_add_ps(a, _mm256_load_ps(prev));
        b = _mm256_add_ps(b, _mm256_load_ps(prev + 8));
      }
      StorePartial(dst, a, std::min(nvalid, 8));
      if (nvalid > 8) {
        StorePartial(dst + 8, b, nvalid - 8);
      }
    }
  }
}

template <GgmlType T>
void MatMulFloatPrepacked(const WeightView& w, const uint8_t* packed, const float* x, int64_t m,
                          float* y, base::ThreadPool& pool) {
  if (m > kGemvMaxM) {
    // The GEMM reads pairs of panels from the copy at up to
    // kFloatHalfMaxTiles activation tiles, else converts fp32 panels per call.
    GemmFloatPanels(w, x, m, y, pool, kFMr, KernelF32Tile, nullptr, packed, KernelHalfTile2<T>);
    return;
  }
  const int64_t n_panels = (w.rows + kF16PanelRows - 1) / kF16PanelRows;
  const int64_t panel_bytes = PrepackedFloatPanelBytes(w.cols);
  pool.ParallelFor(n_panels, 2, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint8_t* panel = packed + p * panel_bytes;
      const int64_t r0 = p * kF16PanelRows;
      switch (m) {
        case 1:
          GemvPrepacked16<T, 1>(w, panel, r0, x, y);
          break;
        case 2:
          GemvPrepacked16<T, 2>(w, panel, r0, x, y);
          break;
        default:
          GemvPrepacked16<T, 3>(w, panel, r0, x, y);
          break;
      }
    }
  });
}

}  // namespace

void PackFloatPanel16Avx2(const WeightView& w, int64_t r0, int64_t k0, int64_t kc, float* out) {
  switch (w.type) {
    case GgmlType::kF32:
      PackFloatPanel16<GgmlType::kF32>(w, r0, k0, kc, out);
      break;
    case GgmlType::kF16:
      PackFloatPanel16<GgmlType::kF16>(w, r0, k0, kc, out);
      break;
    default:
      PackFloatPanel16<GgmlType::kBF16>(w, r0, k0, kc, out);
      break;
  }
}

void ConvertFloatPanelAvx2(const WeightView& w, const uint8_t* packed, int64_t p, int64_t k0,
                           int64_t kc, float* out) {
  const uint8_t* src = packed + p * PrepackedFloatPanelBytes(w.cols) + k0 * kF16PanelRows * 2;
  const int64_t n = kc * kF16PanelRows;  // a multiple of 8
  if (w.type == GgmlType::kF16) {
    for (int64_t i = 0; i < n; i += 8) {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(src + 2 * i))));
    }
  } else {
    for (int64_t i = 0; i < n; i += 8) {
      const __m256i h = _mm256_cvtepu16_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
  }
}

void MatMulAvx2(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool,
                const uint8_t* packed) {
  if (IsLevelType(w.type)) {
    MatMulLevelsImpl(w, QuantizeActsParallel(x, m, w.cols, /*offset128=*/false, pool), m, y, pool,
                     packed);
    return;
  }
  switch (w.type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: {
      // The signed Q4_0 layout takes activations as x + 128 (u8).
      const bool offset = w.type == GgmlType::kQ4_0 && Q4LayoutFor(m) == Q4Layout::kSigned;
      MatMulQuantAvx2(w, QuantizeActsParallel(x, m, w.cols, offset, pool), m, y, pool, packed);
      return;
    }
    case GgmlType::kF32:
      MatMulFloat<GgmlType::kF32>(w, x, m, y, pool);
      return;
    case GgmlType::kF16:
      MatMulFloat<GgmlType::kF16>(w, x, m, y, pool);
      return;
    case GgmlType::kBF16:
      MatMulFloat<GgmlType::kBF16>(w, x, m, y, pool);
      return;
    default:
      LOG(FATAL) << "MatMulAvx2: type " << GgmlTypeName(w.type);
  }
}

int64_t PrepackedPanelBytesAvx2(GgmlType type, int64_t cols) {
  return PrepackedPanelBytes8(type, cols);
}

int64_t PrepackedAvx2Bytes(GgmlType type, int64_t rows, int64_t cols) {
  if (type == GgmlType::kF16 || type == GgmlType::kBF16) {
    return (rows + kF16PanelRows - 1) / kF16PanelRows * PrepackedFloatPanelBytes(cols);
  }
  return (rows + kPPRows - 1) / kPPRows * PrepackedPanelBytes8(type, cols);
}

void PrepackAvx2(const WeightView& w, uint8_t* out, base::ThreadPool& pool) {
  if (w.type == GgmlType::kF16 || w.type == GgmlType::kBF16) {
    const int64_t panel_bytes = PrepackedFloatPanelBytes(w.cols);
    pool.ParallelFor((w.rows + kF16PanelRows - 1) / kF16PanelRows, 4, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        PrepackFloatPanel(w, p, out + p * panel_bytes);
      }
    });
    return;
  }
  const int64_t panel_bytes = PrepackedPanelBytes8(w.type, w.cols);
  DCHECK_GT(panel_bytes, 0);
  const int64_t n_panels = (w.rows + kPPRows - 1) / kPPRows;
  pool.ParallelFor(n_panels, 8, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint8_t* rows[kPPRows];
      for (int r = 0; r < kPPRows; ++r) {
        // Rows past the end repeat the last one (their lanes are never stored).
        rows[r] = w.data + std::min(p * kPPRows + r, w.rows - 1) * w.row_bytes;
      }
      PrepackPanel8(w, rows, out + p * panel_bytes);
    }
  });
}

void MatMulPrepackedAvx2(const WeightView& w, const uint8_t* packed, const float* x, int64_t m,
                         float* y, base::ThreadPool& pool, bool q8_no_min) {
  if (w.type == GgmlType::kF16) {
    return MatMulFloatPrepacked<GgmlType::kF16>(w, packed, x, m, y, pool);
  }
  if (w.type == GgmlType::kBF16) {
    return MatMulFloatPrepacked<GgmlType::kBF16>(w, packed, x, m, y, pool);
  }
  QuantizedActs xa = QuantizeActsParallel(x, m, w.cols, /*offset128=*/false, pool);
  // Q8_0 at batch 1-2 without -128: |x| once per call for KernelQ8PrepackedAbsX
  // (BM_Decode Q8_0 batch 1 on Zen 3: 9-11 % less time per step).
  const bool abs_x = w.type == GgmlType::kQ8_0 && q8_no_min && m <= 2;
  if (abs_x) {
    static thread_local ScratchBuffer scratch;
    auto* xabs = static_cast<uint8_t*>(scratch.Get(m * w.cols));
    const auto* qs = reinterpret_cast<const uint8_t*>(xa.qs);
    for (int64_t i = 0; i < m * w.cols; i += kQBlock) {  // cols is a multiple of 32
      StoreU(xabs + i, _mm256_abs_epi8(LoadU(qs + i)));
    }
    xa.qabs = xabs;
  }
  PrepackedGemm(w, packed, xa, m, y, pool, kPPRows, PrepackedPanelBytes8(w.type, w.cols),
                PrepackedMr8(w.type), kPanelBudgetBytes, [&](int mr) -> PrepackedTileFn {
                  if (abs_x) {
                    return mr == 1 ? KernelQ8PrepackedAbsX<1> : KernelQ8PrepackedAbsX<2>;
                  }
                  return PrepackedTile8(w.type, mr);
                });
}

bool Q8NoMinQuant(const WeightView& w) {
  if (w.type != GgmlType::kQ8_0) {
    return false;
  }
  const int64_t nb = w.cols / kQBlock;
  const __m256i min = _mm256_set1_epi8(-128);
  __m256i any = _mm256_setzero_si256();
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      any = _mm256_or_si256(any, _mm256_cmpeq_epi8(LoadU(row + b * sizeof(BlockQ8_0) + 2), min));
    }
  }
  return _mm256_testz_si256(any, any) != 0;
}

// ---------------------------------------------------------------------------
// Norms, activations, attention
// ---------------------------------------------------------------------------

void RmsNormAvx2(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                 float* out) {
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * n;
    float* oi = out + i * n;
    __m256 s0 = _mm256_setzero_ps();
    __m256 s1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n8; j += 16) {
      const __m256 a = _mm256_loadu_ps(xi + j);
      const __m256 b = _mm256_loadu_ps(xi + j + 8);
      s0 = _mm256_fmadd_ps(a, a, s0);
      s1 = _mm256_fmadd_ps(b, b, s1);
    }
    for (; j < n8; j += 8) {
      const __m256 a = _mm256_loadu_ps(xi + j);
      s0 = _mm256_fmadd_ps(a, a, s0);
    }
    float ss = HsumPs(_mm256_add_ps(s0, s1));
    for (; j < n; ++j) {
      ss += xi[j] * xi[j];
    }
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    for (j = 0; j < n8; j += 8) {
      _mm256_storeu_ps(oi + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xi + j), vs),
                                             _mm256_loadu_ps(weight + j)));
    }
    for (; j < n; ++j) {
      oi[j] = xi[j] * scale * weight[j];
    }
  }
}

void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t n8 = n & ~int64_t{7};
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  auto eight = [&](const float* g8, const float* u8, float* o8) {
    const __m256 g = _mm256_loadu_ps(g8);
    const __m256 e = Exp256(_mm256_xor_ps(g, sign));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(o8, _mm256_mul_ps(silu, _mm256_loadu_ps(u8)));
  };
  int64_t i = 0;
  for (; i < n8; i += 8) {
    eight(gate + i, up + i, out + i);
  }
  if (i < n) {
    // The tail goes through the same vector code (padded), not std::exp:
    // an element's result must not depend on where it sits in the buffer,
    // which holds every token of the step (batch invariance).
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    eight(g, u, o);
    std::copy(o, o + (n - i), out + i);
  }
}

namespace {

template <GgmlType T>
inline __m256 LoadKv8(const void* base, int64_t idx) {
  if constexpr (T == GgmlType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + idx)));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
  }
}

template <GgmlType T>
inline float LoadKv1(const void* base, int64_t idx) {
  if constexpr (T == GgmlType::kF16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(base)[idx]);
  } else {
    return static_cast<const float*>(base)[idx];
  }
}

template <GgmlType T>
float DotKv(const float* q, const void* k, int64_t off, int head_dim) {
  const int d8 = head_dim & ~7;
  __m256 a = _mm256_setzero_ps();
  int d = 0;
  for (; d < d8; d += 8) {
    a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), LoadKv8<T>(k, off + d), a);
  }
  float s = HsumPs(a);
  for (; d < head_dim; ++d) {
    // An explicit fma (not left to contraction), so that the F16 and F32
    // instantiations compute the same bits from the same values.
    s = std::fma(q[d], LoadKv1<T>(k, off + d), s);
  }
  return s;
}

// Scores of keys [0, n) for one query head into p, four keys at a time when
// head_dim is a multiple of 8 (each key's dot one fma chain over d, reduced
// by Hsum4), the rest by DotKv. ScoresPair computes two heads' scores at
// once with the same chains (8 independent ones: the fma latency, not the
// loads, bounds this loop) and the key loads shared: the same bits.
template <GgmlType T>
void Scores(const float* qg, const void* k, int n, int head_dim, float* p) {
  int j = 0;
  if ((head_dim & 7) == 0) {
    for (; j + 4 <= n; j += 4) {
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
      const int64_t o = int64_t{j} * head_dim;
      for (int d = 0; d < head_dim; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qg + d);
        a0 = _mm256_fmadd_ps(qv, LoadKv8<T>(k, o + d), a0);
        a1 = _mm256_fmadd_ps(qv, LoadKv8<T>(k, o + head_dim + d), a1);
        a2 = _mm256_fmadd_ps(qv, LoadKv8<T>(k, o + 2 * head_dim + d), a2);
        a3 = _mm256_fmadd_ps(qv, LoadKv8<T>(k, o + 3 * head_dim + d), a3);
      }
      _mm_storeu_ps(p + j, Hsum4(a0, a1, a2, a3));
    }
  }
  for (; j < n; ++j) {
    p[j] = DotKv<T>(qg, k, int64_t{j} * head_dim, head_dim);
  }
}

template <GgmlType T>
void ScoresPair(const float* qg, const float* qh, const void* k, int n, int head_dim, float* pg,
                float* ph) {
  int j = 0;
  if ((head_dim & 7) == 0) {
    for (; j + 4 <= n; j += 4) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      const int64_t o = int64_t{j} * head_dim;
      for (int d = 0; d < head_dim; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qg + d);
        const __m256 rv = _mm256_loadu_ps(qh + d);
        const __m256 k0 = LoadKv8<T>(k, o + d);
        const __m256 k1 = LoadKv8<T>(k, o + head_dim + d);
        const __m256 k2 = LoadKv8<T>(k, o + 2 * head_dim + d);
        const __m256 k3 = LoadKv8<T>(k, o + 3 * head_dim + d);
        a0 = _mm256_fmadd_ps(qv, k0, a0);
        a1 = _mm256_fmadd_ps(qv, k1, a1);
        a2 = _mm256_fmadd_ps(qv, k2, a2);
        a3 = _mm256_fmadd_ps(qv, k3, a3);
        b0 = _mm256_fmadd_ps(rv, k0, b0);
        b1 = _mm256_fmadd_ps(rv, k1, b1);
        b2 = _mm256_fmadd_ps(rv, k2, b2);
        b3 = _mm256_fmadd_ps(rv, k3, b3);
      }
      _mm_storeu_ps(pg + j, Hsum4(a0, a1, a2, a3));
      _mm_storeu_ps(ph + j, Hsum4(b0, b1, b2, b3));
    }
  }
  for (; j < n; ++j) {
    pg[j] = DotKv<T>(qg, k, int64_t{j} * head_dim, head_dim);
    ph[j] = DotKv<T>(qh, k, int64_t{j} * head_dim, head_dim);
  }
}

template <GgmlType T>
void AttendBlock(const float* q, int group, const void* k, const void* v, int n, int head_dim,
                 float* m, float* l, float* acc) {
  alignas(32) float pbuf[2][64 + 8];
  DCHECK_LE(n, 64);
  const int d8 = head_dim & ~7;
  for (int g = 0; g < group; ++g) {
    const float* qg = q + g * head_dim;
    // Scores: heads in pairs (the second one's kept for the next g).
    float* p = pbuf[g & 1];
    if ((g & 1) == 0) {
      if (g + 1 < group) {
        ScoresPair<T>(qg, qg + head_dim, k, n, head_dim, p, pbuf[1]);
      } else {
        Scores<T>(qg, k, n, head_dim, p);
      }
    }
    int j;
    float block_max = -std::numeric_limits<float>::infinity();
    for (j = 0; j < n; ++j) {
      block_max = std::max(block_max, p[j]);
    }
    const float new_max = std::max(m[g], block_max);
    // The running max rarely changes after the first blocks: then the
    // rescale is exactly 1 and costs no exp.
    const float correction =
        new_max == m[g] ? 1.0f : _mm256_cvtss_f32(Exp256(_mm256_set1_ps(m[g] - new_max)));
    const __m256 vmax = _mm256_set1_ps(new_max);
    __m256 vsum = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
      const __m256 e = Exp256(_mm256_sub_ps(_mm256_loadu_ps(p + j), vmax));
      _mm256_storeu_ps(p + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    float sum = HsumPs(vsum);
    for (; j < n; ++j) {
      p[j] = std::exp(p[j] - new_max);
      sum += p[j];
    }
    l[g] = l[g] * correction + sum;
    m[g] = new_max;
    // acc = acc * correction + sum_j p[j] v[j], 64 dims at a time (8 chains),
    // then 32 (4), then 8: each 8 dims one fma chain over j, whatever the grouping.
    float* accg = acc + g * head_dim;
    const __m256 vc = _mm256_set1_ps(correction);
    int d = 0;
    for (; d + 64 <= d8; d += 64) {
      __m256 a[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        a[c] = _mm256_mul_ps(_mm256_loadu_ps(accg + d + 8 * c), vc);
      }
      for (j = 0; j < n; ++j) {
        const __m256 pj = _mm256_set1_ps(p[j]);
        const int64_t o = int64_t{j} * head_dim + d;
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          a[c] = _mm256_fmadd_ps(pj, LoadKv8<T>(v, o + 8 * c), a[c]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        _mm256_storeu_ps(accg + d + 8 * c, a[c]);
      }
    }
    for (; d + 32 <= d8; d += 32) {
      __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(accg + d), vc);
      __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(accg + d + 8), vc);
      __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(accg + d + 16), vc);
      __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(accg + d + 24), vc);
      for (j = 0; j < n; ++j) {
        const __m256 pj = _mm256_set1_ps(p[j]);
        const int64_t o = int64_t{j} * head_dim + d;
        a0 = _mm256_fmadd_ps(pj, LoadKv8<T>(v, o), a0);
        a1 = _mm256_fmadd_ps(pj, LoadKv8<T>(v, o + 8), a1);
        a2 = _mm256_fmadd_ps(pj, LoadKv8<T>(v, o + 16), a2);
        a3 = _mm256_fmadd_ps(pj, LoadKv8<T>(v, o + 24), a3);
      }
      _mm256_storeu_ps(accg + d, a0);
      _mm256_storeu_ps(accg + d + 8, a1);
      _mm256_storeu_ps(accg + d + 16, a2);
      _mm256_storeu_ps(accg + d + 24, a3);
    }
    for (; d < d8; d += 8) {
      __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(accg + d), vc);
      for (j = 0; j < n; ++j) {
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), LoadKv8<T>(v, int64_t{j} * head_dim + d), a0);
      }
      _mm256_storeu_ps(accg + d, a0);
    }
    for (; d < head_dim; ++d) {
      float a = accg[d] * correction;
      for (j = 0; j < n; ++j) {
        a = std::fma(p[j], LoadKv1<T>(v, int64_t{j} * head_dim + d), a);  // as DotKv
      }
      accg[d] = a;
    }
  }
}

}  // namespace

void AttendBlockAvx2(const float* q, int group, const void* k, const void* v, GgmlType dtype, int n,
                     int head_dim, float* m, float* l, float* acc, const KvBlockRef* ahead) {
  const int64_t bytes = int64_t{n} * head_dim * (dtype == GgmlType::kF16 ? 2 : 4);
  if (dtype == GgmlType::kF16 && group > 1) {
    // GQA: the group's query heads all read this block. Converted to fp32
    // once (exactly: the same values every head's loads would convert), the
    // heads' loops load it as floats instead of converting it again per
    // head; the sums are the same bits.
    static thread_local ScratchBuffer scratch;
    const int64_t elems = int64_t{n} * head_dim;
    auto* kf = static_cast<float*>(scratch.Get(2 * elems * sizeof(float)));
    float* vf = kf + elems;
    const auto* kh = static_cast<const uint8_t*>(k);
    const auto* vh = static_cast<const uint8_t*>(v);
    int64_t e = 0;
    if (ahead != nullptr) {
      // The later block's lines into L2, one K and one V line per 64 bytes
      // of this block converted (in a burst they stalled the conversion).
      const auto* ak = static_cast<const char*>(ahead->k);
      const auto* av = static_cast<const char*>(ahead->v);
      for (; e + 32 <= elems; e += 32) {
        PrefetchLine(ak + 2 * e, /*to_l2=*/true);
        PrefetchLine(av + 2 * e, /*to_l2=*/true);
#pragma GCC unroll 4
        for (int i = 0; i < 32; i += 8) {
          _mm256_storeu_ps(kf + e + i, Load8<GgmlType::kF16>(kh, e + i));
          _mm256_storeu_ps(vf + e + i, Load8<GgmlType::kF16>(vh, e + i));
        }
      }
    }
    for (; e + 8 <= elems; e += 8) {
      _mm256_storeu_ps(kf + e, Load8<GgmlType::kF16>(kh, e));
      _mm256_storeu_ps(vf + e, Load8<GgmlType::kF16>(vh, e));
    }
    for (; e < elems; ++e) {
      kf[e] = Load1<GgmlType::kF16>(kh, e);
      vf[e] = Load1<GgmlType::kF16>(vh, e);
    }
    AttendBlock<GgmlType::kF32>(q, group, kf, vf, n, head_dim, m, l, acc);
    return;
  }
  if (ahead != nullptr) {
    for (int64_t b = 0; b < bytes; b += 64) {
      PrefetchLine(static_cast<const char*>(ahead->k) + b, /*to_l2=*/true);
      PrefetchLine(static_cast<const char*>(ahead->v) + b, /*to_l2=*/true);
    }
  }
  if (dtype == GgmlType::kF16) {
    AttendBlock<GgmlType::kF16>(q, group, k, v, n, head_dim, m, l, acc);
  } else {
    AttendBlock<GgmlType::kF32>(q, group, k, v, n, head_dim, m, l, acc);
  }
}

}  // namespace tandem::engine::internal
