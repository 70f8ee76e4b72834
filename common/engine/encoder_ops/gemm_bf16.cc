// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (common/engine/CMakeLists.txt);
// everything here runs only when Bf16Supported() (encoder_ops.cc, compiled without ISA flags).

#include "common/engine/encoder_ops/gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "common/engine/format/ggml_type.h"

// GCC 12's avx512fintrin.h helpers start from _mm512_undefined_*, which -Wmaybe-uninitialized
// reports at every use (a false positive; as in kernels_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace tandem::engine::encoder_ops {
namespace {

constexpr int kRows = 16;  // weight rows per panel: one zmm of fp32 accumulators
constexpr int kMr = 12;    // activation rows per tile: 12 accumulators + weights in registers

template <int MR>
void Tile(const uint16_t* xb, int64_t cols, const uint16_t* panel, const float* bias, int nvalid,
          float* y, int64_t ldy) {
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_loadu_ps(bias);
  for (int64_t kp = 0; kp < cols / 2; ++kp) {
    const __m512bh w = (__m512bh)_mm512_loadu_si512(panel + kp * 2 * kRows);
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, xb + i * cols + 2 * kp, sizeof(pair));
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(pair), w);
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << nvalid) - 1);
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + i * ldy, mask, acc[i]);
}

template <int MR>
void TileOf(int mr, const uint16_t* xb, int64_t cols, const uint16_t* panel, const float* bias,
            int nvalid, float* y, int64_t ldy) {
  if constexpr (MR > 1) {
    if (mr < MR) {
      TileOf<MR - 1>(mr, xb, cols, panel, bias, nvalid, y, ldy);
      return;
    }
  }
  Tile<MR>(xb, cols, panel, bias, nvalid, y, ldy);
}

}  // namespace

PackedBf16 PackBf16(const float* w, const float* bias, int64_t rows, int64_t cols) {
  PackedBf16 m;
  m.rows = rows;
  m.cols = cols;
  const int64_t padded = (rows + kRows - 1) / kRows * kRows;
  m.panels.assign(padded * cols, 0);
  m.bias.assign(padded, 0.0f);
  std::copy(bias, bias + rows, m.bias.begin());
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* panel = &m.panels[(r / kRows) * kRows * cols];
    for (int64_t k = 0; k < cols; ++k) {
      panel[(k / 2) * 2 * kRows + (r % kRows) * 2 + k % 2] = Fp32ToBf16(w[r * cols + k]);
    }
  }
  return m;
}

void ToBf16(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, (__m512i)v);
  }
  for (; i < n; ++i) out[i] = Fp32ToBf16(x[i]);
}

void GemmBf16Panels(const uint16_t* xb, int64_t m, const PackedBf16& w, int64_t p0, int64_t p1,
                    float* y) {
  if (w.cols % 32 == 0 && AmxSupported()) {
    GemmAmxPanels(xb, m, w, p0, p1, y);
    return;
  }
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r0 = p * kRows;
    const int nvalid = static_cast<int>(std::min<int64_t>(kRows, w.rows - r0));
    const uint16_t* panel = w.panels.data() + r0 * w.cols;
    for (int64_t i0 = 0; i0 < m; i0 += kMr) {
      const int mr = static_cast<int>(std::min<int64_t>(kMr, m - i0));
      TileOf<kMr>(mr, xb + i0 * w.cols, w.cols, panel, w.bias.data() + r0, nvalid,
                  y + i0 * w.rows + r0, w.rows);
    }
  }
}

}  // namespace tandem::engine::encoder_ops
