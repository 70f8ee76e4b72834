// Compiled with -mamx-tile -mamx-bf16 (common/engine/CMakeLists.txt); runs only when
// AmxSupported() (encoder_ops.cc, compiled without ISA flags, asks the kernel for the tile
// state first).
//
// The BF16 GEMM on AMX tiles. PackBf16's panels are already AMX's B layout: a panel's k pairs
// [16 ks, 16 ks + 16) are 16 rows of 16 outputs x 2 bf16 (64 bytes each, contiguous), so one
// TDPBF16PS multiplies up to 16 activation rows (an A tile of 16 rows x 32 bf16, read in place
// from xb) by 32 k of one panel into a 16 x 16 fp32 C tile. Up to four panels share each A
// tile load (C tiles 0-3, A tile 4, B tiles 5 and 6). Panels outside, row blocks inside:
// a group of panels is loaded from memory once and reused from L2 by every row block.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/engine/encoder_ops/gemm_bf16.h"
#include "common/engine/kernels/internal/kernels_internal.h"

namespace tandem::engine::encoder_ops {
namespace {

constexpr int kRows = 16;       // outputs per panel (a C tile's columns)
constexpr int kKStep = 32;      // k per tile step (a tile row: 64 bytes of bf16)
constexpr int kPanelsPerA = 4;  // C tiles sharing an A tile

// Tiles 0-6, each 16 rows x 64 bytes: C 0-3 (16 x 16 fp32), A 4 (16 rows x 32 bf16), B 5-6
// (16 k pairs x 16 outputs x 2 bf16).
void Configure() {
  internal::AmxTileConfig cfg;  // zero-initialized: tiles 7..15 stay off
  for (int t = 0; t <= 6; ++t) {
    cfg.rows[t] = kRows;
    cfg.colsb[t] = 64;
  }
  internal::LoadAmxTileConfig(cfg);
}

// C tiles 0..NP-1 = bias (panel j's at bias + 16 j, on every row: a tile load of stride 0)
// + A (16 rows of xb from `a`, stride lda bytes) x panels b, b + panel_stride, ... over
// `ksteps` steps of 32 k; panel j's 16 x 16 outputs stored at out + 16 j, rows ldo bytes apart.
template <int NP>
void Block(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t panel_stride,
           int64_t ksteps, const float* bias, float* out, int64_t ldo) {
  static_assert(NP >= 1 && NP <= kPanelsPerA);
  _tile_loadd(0, bias, 0);
  if constexpr (NP > 1) _tile_loadd(1, bias + kRows, 0);
  if constexpr (NP > 2) _tile_loadd(2, bias + 2 * kRows, 0);
  if constexpr (NP > 3) _tile_loadd(3, bias + 3 * kRows, 0);
  for (int64_t ks = 0; ks < ksteps; ++ks) {
    const uint16_t* bk = b + ks * kKStep * kRows;
    _tile_loadd(4, a + ks * kKStep, lda);
    _tile_loadd(5, bk, 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NP > 1) {
      _tile_loadd(6, bk + panel_stride, 64);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NP > 2) {
      _tile_loadd(5, bk + 2 * panel_stride, 64);
      _tile_dpbf16ps(2, 4, 5);
    }
    if constexpr (NP > 3) {
      _tile_loadd(6, bk + 3 * panel_stride, 64);
      _tile_dpbf16ps(3, 4, 6);
    }
  }
  _tile_stored(0, out, ldo);
  if constexpr (NP > 1) _tile_stored(1, out + kRows, ldo);
  if constexpr (NP > 2) _tile_stored(2, out + 2 * kRows, ldo);
  if constexpr (NP > 3) _tile_stored(3, out + 3 * kRows, ldo);
}

}  // namespace

void GemmAmxPanels(const uint16_t* xb, int64_t m, const PackedBf16& w, int64_t p0, int64_t p1,
                   float* y) {
  if (m <= 0 || p0 >= p1) return;
  const int64_t ksteps = w.cols / kKStep;
  const int64_t panel_stride = kRows * w.cols;  // elements between panels
  const int64_t lda = w.cols * static_cast<int64_t>(sizeof(uint16_t));
  // The last block of rows, zero-padded to a whole tile: one tile shape for every block, so
  // the panels (up to 4 x 16 x cols bf16, L2-resident) stay put while every block of
  // activation rows passes over them: each weight is read from memory once per call.
  const int64_t full = m / kRows * kRows;
  static thread_local std::vector<uint16_t> tail;
  if (full < m) {
    tail.resize(kRows * w.cols);
    const int64_t copied = (m - full) * w.cols;
    std::memcpy(tail.data(), xb + full * w.cols, copied * sizeof(uint16_t));
    std::fill(tail.begin() + copied, tail.end(), uint16_t{0});
  }
  Configure();
  alignas(64) float c[kRows][kPanelsPerA * kRows];  // blocks that do not fill y's tile
  for (int64_t p = p0; p < p1; p += kPanelsPerA) {
    const int np = static_cast<int>(std::min<int64_t>(kPanelsPerA, p1 - p));
    const uint16_t* b = w.panels.data() + p * panel_stride;
    const int64_t r0 = p * kRows;
    const int64_t cols_out = std::min<int64_t>(np * kRows, w.rows - r0);  // valid outputs
    const float* bias = w.bias.data() + r0;
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kRows, m - i0));
      const uint16_t* a = i0 < full ? xb + i0 * w.cols : tail.data();
      // Whole tiles go straight to y; a partial one (last rows or outputs) through c.
      const bool whole = mr == kRows && cols_out == np * kRows;
      float* out = whole ? y + i0 * w.rows + r0 : &c[0][0];
      const int64_t ldo = (whole ? w.rows : kPanelsPerA * kRows) * int64_t{sizeof(float)};
      switch (np) {
        case 1: Block<1>(a, lda, b, panel_stride, ksteps, bias, out, ldo); break;
        case 2: Block<2>(a, lda, b, panel_stride, ksteps, bias, out, ldo); break;
        case 3: Block<3>(a, lda, b, panel_stride, ksteps, bias, out, ldo); break;
        default: Block<4>(a, lda, b, panel_stride, ksteps, bias, out, ldo); break;
      }
      if (!whole) {
        for (int i = 0; i < mr; ++i) {
          std::memcpy(y + (i0 + i) * w.rows + r0, c[i], cols_out * sizeof(float));
        }
      }
    }
  }
  _tile_release();  // no tile state kept dirty between calls (context switches stay cheap)
}

}  // namespace tandem::engine::encoder_ops
