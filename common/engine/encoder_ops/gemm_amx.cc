// Compiled with -mamx-tile -mamx-bf16 (common/engine/CMakeLists.txt); runs only when
// AmxSupported() (encoder_ops.cc, compiled without ISA flags, asks the kernel for the tile
// state first).
//
// The BF16 GEMM on AMX tiles. PackBf16's panels are already AMX's B layout: a panel's k pairs
// [16 ks, 16 ks + 16) are 16 rows of 16 outputs x 2 bf16 (64 bytes each, contiguous), so one
// TDPBF16PS multiplies up to 16 activation rows (an A tile of 16 rows x 32 bf16, read in place
// from xb) by 32 k of one panel into a 16 x 16 fp32 C tile. Up to four panels share each A
// tile load (C tiles 0-3, A tile 4, B tiles 5 and 6).

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/engine/encoder_ops/gemm_bf16.h"

namespace tandem::engine::encoder_ops {
namespace {

constexpr int kRows = 16;       // outputs per panel (a C tile's columns)
constexpr int kKStep = 32;      // k per tile step (a tile row: 64 bytes of bf16)
constexpr int kPanelsPerA = 4;  // C tiles sharing an A tile

// LDTILECFG's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

void Configure(int mr) {
  TileConfig cfg;
  for (int t = 0; t < kPanelsPerA; ++t) {  // C: mr rows of 16 fp32
    cfg.rows[t] = static_cast<uint8_t>(mr);
    cfg.colsb[t] = 64;
  }
  cfg.rows[4] = static_cast<uint8_t>(mr);  // A: mr rows of 32 bf16
  cfg.colsb[4] = 64;
  for (int t = 5; t <= 6; ++t) {  // B: 16 k pairs of 16 x 2 bf16
    cfg.rows[t] = kKStep / 2;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// C tiles 0..NP-1 = A (mr rows of xb from `a`, stride lda bytes) x panels b, b + stride, ...
// over `ksteps` steps of 32 k; stored to c[NP][16][16].
template <int NP>
void Block(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t panel_stride,
           int64_t ksteps, float* c) {
  static_assert(NP >= 1 && NP <= kPanelsPerA);
  _tile_zero(0);
  if constexpr (NP > 1) _tile_zero(1);
  if constexpr (NP > 2) _tile_zero(2);
  if constexpr (NP > 3) _tile_zero(3);
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
  constexpr int64_t kC = kRows * kRows;
  _tile_stored(0, c, 64);
  if constexpr (NP > 1) _tile_stored(1, c + kC, 64);
  if constexpr (NP > 2) _tile_stored(2, c + 2 * kC, 64);
  if constexpr (NP > 3) _tile_stored(3, c + 3 * kC, 64);
}

}  // namespace

void GemmAmxPanels(const uint16_t* xb, int64_t m, const PackedBf16& w, int64_t p0, int64_t p1,
                   float* y) {
  const int64_t ksteps = w.cols / kKStep;
  const int64_t panel_stride = kRows * w.cols;  // elements between panels
  const int64_t lda = w.cols * static_cast<int64_t>(sizeof(uint16_t));
  alignas(64) float c[kPanelsPerA][kRows][kRows];
  int configured = 0;
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const int mr = static_cast<int>(std::min<int64_t>(kRows, m - i0));
    if (mr != configured) {
      Configure(mr);
      configured = mr;
    }
    const uint16_t* a = xb + i0 * w.cols;
    for (int64_t p = p0; p < p1; p += kPanelsPerA) {
      const int np = static_cast<int>(std::min<int64_t>(kPanelsPerA, p1 - p));
      const uint16_t* b = w.panels.data() + p * panel_stride;
      switch (np) {
        case 1: Block<1>(a, lda, b, panel_stride, ksteps, &c[0][0][0]); break;
        case 2: Block<2>(a, lda, b, panel_stride, ksteps, &c[0][0][0]); break;
        case 3: Block<3>(a, lda, b, panel_stride, ksteps, &c[0][0][0]); break;
        default: Block<4>(a, lda, b, panel_stride, ksteps, &c[0][0][0]); break;
      }
      for (int j = 0; j < np; ++j) {
        const int64_t r0 = (p + j) * kRows;
        const int nvalid = static_cast<int>(std::min<int64_t>(kRows, w.rows - r0));
        const float* bias = w.bias.data() + r0;
        for (int i = 0; i < mr; ++i) {
          float* out = y + (i0 + i) * w.rows + r0;
          for (int n = 0; n < nvalid; ++n) out[n] = c[j][i][n] + bias[n];
        }
      }
    }
  }
  if (configured != 0) {
    _tile_release();  // no tile state kept dirty between calls (context switches stay cheap)
  }
}

}  // namespace tandem::engine::encoder_ops
