#include "common/engine/format/ggml_type.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace tandem::engine {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF files and ggml blocks are little-endian; big-endian hosts are not supported");

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof(v)); }

// Float -> small integer conversions below keep ggml's results for every finite
// input while staying defined for inf/NaN (where ggml's casts are undefined):
// NaN maps to 0, out-of-range values saturate.
int8_t RoundToInt8(float x) {
  const float r = std::roundf(x);
  if (r >= 127.0f) {
    return 127;
  }
  if (r <= -128.0f) {
    return -128;
  }
  if (!(r == r)) {
    return 0;
  }
  return static_cast<int8_t>(r);
}

// ggml: MIN(max, (int8_t)t), truncation toward zero, where t = x + 8.5f (Q4_0),
// x + 16.5f (Q5_0) or (x - min) * id + 0.5f (Q4_1, Q5_1) is >= 0 for every
// in-range input.
uint8_t TruncQ(float t, int max) {
  if (t >= static_cast<float>(max)) {
    return static_cast<uint8_t>(max);
  }
  if (t > 0.0f) {
    return static_cast<uint8_t>(t);
  }
  return 0;  // also NaN
}

uint8_t Q4Nibble(float x) { return TruncQ(x + 8.5f, 15); }

// The value of largest magnitude among 32, with its sign (the first on ties).
float SignedAbsMax(const float* xb) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(xb[j])) {
      amax = std::fabs(xb[j]);
      max = xb[j];
    }
  }
  return max;
}

void QuantizeRowQ8_0(const float* x, uint8_t* dst, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float a = std::fabs(xb[j]);
      amax = amax > a ? amax : a;  // ggml's MAX(amax, a)
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 block;
    block.d = Fp32ToFp16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      block.qs[j] = RoundToInt8(xb[j] * id);
    }
    std::memcpy(dst + b * sizeof(BlockQ8_0), &block, sizeof(block));
  }
}

void QuantizeRowQ4_0(const float* x, uint8_t* dst, int64_t n) {
  const int64_t nb = n / kQK4_0;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQK4_0;
    // The signed value of largest magnitude maps to -8, so the full [-8, 7]
    // range is used on its side.
    const float d = SignedAbsMax(xb) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 block;
    block.d = Fp32ToFp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const uint8_t lo = Q4Nibble(xb[j] * id);
      const uint8_t hi = Q4Nibble(xb[kQK4_0 / 2 + j] * id);
      block.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    std::memcpy(dst + b * sizeof(BlockQ4_0), &block, sizeof(block));
  }
}

void DequantizeRowQ8_0(const uint8_t* src, float* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ8_0 block;
    std::memcpy(&block, src + b * sizeof(BlockQ8_0), sizeof(block));
    const float d = Fp16ToFp32(block.d);
    for (int j = 0; j < kQK8_0; ++j) {
      y[b * kQK8_0 + j] = block.qs[j] * d;
    }
  }
}

void DequantizeRowQ4_0(const uint8_t* src, float* y, int64_t n) {
  const int64_t nb = n / kQK4_0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ4_0 block;
    std::memcpy(&block, src + b * sizeof(BlockQ4_0), sizeof(block));
    const float d = Fp16ToFp32(block.d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int x0 = (block.qs[j] & 0x0F) - 8;
      const int x1 = (block.qs[j] >> 4) - 8;
      y[b * kQK4_0 + j] = x0 * d;
      y[b * kQK4_0 + j + kQK4_0 / 2] = x1 * d;
    }
  }
}

// Q4_1 / Q5_1 (ggml quantize_row_q4_1_ref / q5_1_ref): min and max of the
// block, d = (max - min) / (2^bits - 1), q = trunc((x - min) / d + 0.5).
// Writes the fp16 d and m and the 32 levels.
void MinMaxLevels(const float* xb, int max_q, uint16_t* d_out, uint16_t* m_out, uint8_t* q) {
  float min = std::numeric_limits<float>::max();
  float max = -std::numeric_limits<float>::max();
  for (int j = 0; j < 32; ++j) {
    min = xb[j] < min ? xb[j] : min;
    max = xb[j] > max ? xb[j] : max;
  }
  const float d = (max - min) / static_cast<float>(max_q);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = Fp32ToFp16(d);
  *m_out = Fp32ToFp16(min);
  for (int j = 0; j < 32; ++j) {
    q[j] = TruncQ((xb[j] - min) * id + 0.5f, max_q);
  }
}

// Q5_0 (ggml quantize_row_q5_0_ref): d = max / -16 (the signed value of
// largest magnitude), q = trunc(x / d + 16.5) in [0, 31].
void SignedMaxLevels(const float* xb, uint16_t* d_out, uint8_t* q) {
  const float d = SignedAbsMax(xb) / -16;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = Fp32ToFp16(d);
  for (int j = 0; j < 32; ++j) {
    q[j] = TruncQ(xb[j] * id + 16.5f, 31);
  }
}

// Packs 32 levels as ggml's 4/5-bit blocks: nibbles of j and j + 16 share
// qs[j]; bit 4 of level j goes to bit j of qh (when qh is not null).
void PackLevels(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    h |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  if (qh != nullptr) {
    std::memcpy(qh, &h, 4);
  }
}

void QuantizeRowLowBit(GgmlType type, const float* x, uint8_t* dst, int64_t n) {
  uint8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    if (type == GgmlType::kQ4_1) {
      BlockQ4_1 block;
      MinMaxLevels(xb, 15, &block.d, &block.m, q);
      PackLevels(q, block.qs, nullptr);
      std::memcpy(dst + b * sizeof(block), &block, sizeof(block));
    } else if (type == GgmlType::kQ5_1) {
      BlockQ5_1 block;
      MinMaxLevels(xb, 31, &block.d, &block.m, q);
      PackLevels(q, block.qs, block.qh);
      std::memcpy(dst + b * sizeof(block), &block, sizeof(block));
    } else {
      BlockQ5_0 block;
      SignedMaxLevels(xb, &block.d, q);
      PackLevels(q, block.qs, block.qh);
      std::memcpy(dst + b * sizeof(block), &block, sizeof(block));
    }
  }
}

// --- K-quant quantizers (ggml's quantize_row_q{4,5,6}_K_ref, no imatrix) ---

// ggml's nearest_int: round half to even through the fp32 mantissa
// (|x| < 2^22, which holds for every level and scale computed here).
int NearestInt(float x) {
  const float v = x + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

// ggml's make_qkx2_quants: levels L in [0, nmax] and (scale, min) for
// x ~ scale * L - min, minimizing the weighted squared error over a small
// search of scales; returns the scale and sets *the_min (>= 0).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* levels,
                     float* the_min, uint8_t* aux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = x[i] < min ? x[i] : min;
    max = x[i] > max ? x[i] : max;
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) {
    min = 0;
  }
  if (max == min) {
    std::memset(levels, 0, n);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    levels[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * levels[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, NearestInt(iscale * (x[i] - min))));
      aux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * aux[i] + this_min - x[i];
        cur_error += weights[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        std::memcpy(levels, aux, n);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K / Q5_K super-block: per sub-block of 32 (weights av_x + |x|) a scale
// and min from MakeQkx2Quants, both quantized to 6 bits against the block's
// largest, then every level recomputed from the stored (fp16, 6-bit) values.
void QuantizeSuperBlockQ45K(bool q5, const float* x, uint8_t* dst) {
  const int nmax = q5 ? 31 : 15;
  uint8_t levels[kQK_K];
  uint8_t aux[32];
  float weights[32];
  float scales[8];
  float mins[8];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) {
      sum_x2 += xj[l] * xj[l];
    }
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) {
      weights[l] = av_x + std::fabs(xj[l]);
    }
    scales[j] = MakeQkx2Quants(32, nmax, xj, weights, levels + 32 * j, &mins[j], aux,
                               q5 ? -0.5f : -1.0f, 0.1f, q5 ? 15 : 20);
    max_scale = scales[j] > max_scale ? scales[j] : max_scale;
    max_min = mins[j] > max_min ? mins[j] : max_min;
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t packed[kKScaleSize] = {};
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = static_cast<uint8_t>(std::min(63, NearestInt(inv_scale * scales[j])));
    const uint8_t lm = static_cast<uint8_t>(std::min(63, NearestInt(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  const uint16_t d16 = Fp32ToFp16(max_scale / 63.0f);
  const uint16_t dmin16 = Fp32ToFp16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    KQuantScaleMin(j, packed, &sc, &m);
    const float d = Fp16ToFp32(d16) * sc;
    if (d == 0.0f) {
      continue;
    }
    const float dm = Fp16ToFp32(dmin16) * m;
    for (int l = 0; l < 32; ++l) {
      const int q = NearestInt((x[32 * j + l] + dm) / d);
      levels[32 * j + l] = static_cast<uint8_t>(std::max(0, std::min(nmax, q)));
    }
  }
  StoreU16(dst, d16);
  StoreU16(dst + 2, dmin16);
  std::memcpy(dst + 4, packed, kKScaleSize);
  uint8_t* qh = dst + 4 + kKScaleSize;
  uint8_t* qs = q5 ? qh + kQK_K / 8 : qh;
  if (q5) {
    std::memset(qh, 0, kQK_K / 8);
  }
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = levels[64 * g + l];
      const uint8_t hi = levels[64 * g + 32 + l];
      qs[32 * g + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (q5) {
        qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
      }
    }
  }
}

// ggml's make_qx_quants with rmse_type 1 (weights x^2), no imatrix: signed
// levels L + nmax in [0, 2 nmax) and the scale, from a search of 19 scales.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* levels) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {  // GROUP_MAX_EPS
    std::memset(levels, 0, n);
    return 0.0f;
  }
  auto sums = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, NearestInt(iscale * x[i])));
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  auto store = [&](float iscale) {
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, NearestInt(iscale * x[i])));
      levels[i] = static_cast<int8_t>(l + nmax);
    }
  };
  float iscale = -nmax / max;
  float sumlx, suml2;
  sums(iscale, &sumlx, &suml2);
  store(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) {
      continue;
    }
    iscale = -(nmax + 0.1f * is) / max;
    sums(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      store(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q6_K super-block: per sub-block of 16 a scale from MakeQxQuants, the
// scales quantized to int8 against the largest, levels recomputed.
void QuantizeSuperBlockQ6K(const float* x, uint8_t* dst) {
  int8_t levels[kQK_K];
  float scales[16];
  float max_scale = 0;
  float max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = MakeQxQuants(16, 32, x + 16 * ib, levels + 16 * ib);
    if (std::fabs(scales[ib]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  BlockQ6_K block = {};
  if (max_abs_scale < 1e-15f) {
    std::memcpy(dst, &block, sizeof(block));  // all zero, d = +0
    return;
  }
  const float iscale = -128.0f / max_scale;
  block.d = Fp32ToFp16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    block.scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  }
  for (int j = 0; j < 16; ++j) {
    const float d = Fp16ToFp32(block.d) * block.scales[j];
    if (d == 0.0f) {
      continue;
    }
    for (int l = 0; l < 16; ++l) {
      const int q = NearestInt(x[16 * j + l] / d);
      levels[16 * j + l] = static_cast<int8_t>(std::max(-32, std::min(31, q)) + 32);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* lv = levels + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q1 = lv[l];
      const int q2 = lv[l + 32];
      const int q3 = lv[l + 64];
      const int q4 = lv[l + 96];
      block.ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      block.ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      block.qh[32 * h + l] =
          static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
  std::memcpy(dst, &block, sizeof(block));
}

void QuantizeRowK(GgmlType type, const float* x, uint8_t* dst, int64_t n) {
  const int64_t bytes = GgmlTypeSize(type);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    if (type == GgmlType::kQ6_K) {
      QuantizeSuperBlockQ6K(x + b * kQK_K, dst + b * bytes);
    } else {
      QuantizeSuperBlockQ45K(type == GgmlType::kQ5_K, x + b * kQK_K, dst + b * bytes);
    }
  }
}

// Q4_1 ... Q6_K (ggml dequantize_row_*, gguf-py): (d * sc) * q, plus m for
// the types with a min (adding m = -0 to a type without one could turn a
// -0 into +0).
void DequantizeRowLevels(GgmlType type, const uint8_t* src, float* y, int64_t n) {
  const bool has_min = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1 ||
                       type == GgmlType::kQ4_K || type == GgmlType::kQ5_K;
  LevelBlock blk;
  for (int64_t b = 0; b < n / 32; ++b) {
    UnpackLevelBlock(type, src, b, &blk);
    for (int j = 0; j < 32; ++j) {
      const float v = (blk.d * static_cast<float>(blk.sc[j / 16])) * static_cast<float>(blk.q[j]);
      y[b * 32 + j] = has_min ? v + blk.m : v;
    }
  }
}

}  // namespace

namespace {

struct TypeInfo {
  GgmlType type;
  const char* name;
  int64_t block_size;
  int64_t type_size;
};

constexpr TypeInfo kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", kQK4_0, sizeof(BlockQ4_0)},
    {GgmlType::kQ4_1, "Q4_1", kQK4_1, sizeof(BlockQ4_1)},
    {GgmlType::kQ5_0, "Q5_0", kQK5_0, sizeof(BlockQ5_0)},
    {GgmlType::kQ5_1, "Q5_1", kQK5_1, sizeof(BlockQ5_1)},
    {GgmlType::kQ8_0, "Q8_0", kQK8_0, sizeof(BlockQ8_0)},
    {GgmlType::kQ4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K)},
    {GgmlType::kQ5_K, "Q5_K", kQK_K, sizeof(BlockQ5_K)},
    {GgmlType::kQ6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K)},
    {GgmlType::kBF16, "BF16", 1, 2},
};

const TypeInfo* Info(GgmlType type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) {
      return &t;
    }
  }
  return nullptr;
}

std::string SupportedList(bool with_ids) {
  std::string out;
  for (const TypeInfo& t : kTypes) {
    absl::StrAppend(&out, out.empty() ? "" : ", ");
    if (with_ids) {
      absl::StrAppend(&out, static_cast<uint32_t>(t.type), " ");
    }
    absl::StrAppend(&out, t.name);
  }
  return out;
}

}  // namespace

bool IsLevelType(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void UnpackLevelBlock(GgmlType type, const uint8_t* row, int64_t b, LevelBlock* out) {
  out->sc[0] = out->sc[1] = 1;
  out->m = 0.0f;
  if (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1) {
    // d, [m], [qh: bit j = 5th bit of element j], nibbles (j < 16 low, then high).
    const uint8_t* blk = row + b * GgmlTypeSize(type);
    out->d = Fp16ToFp32(LoadU16(blk));
    const bool has_m = type != GgmlType::kQ5_0;
    const uint8_t* p = blk + (has_m ? 4 : 2);
    uint32_t qh = 0;
    if (type != GgmlType::kQ4_1) {
      std::memcpy(&qh, p, 4);
      p += 4;
    }
    for (int j = 0; j < 32; ++j) {
      const int nib = j < 16 ? (p[j] & 0x0F) : (p[j - 16] >> 4);
      const int q = nib | static_cast<int>(((qh >> j) & 1) << 4);
      out->q[j] = static_cast<int8_t>(type == GgmlType::kQ5_0 ? q - 16 : q);
    }
    if (has_m) {
      out->m = Fp16ToFp32(LoadU16(blk + 2));
    }
    return;
  }
  const int s = static_cast<int>(b % 8);
  const uint8_t* blk = row + b / 8 * GgmlTypeSize(type);
  if (type == GgmlType::kQ6_K) {
    // Sub-block s is quarter k of half h (see BlockQ6_K).
    const int h = s / 4;
    const int k = s % 4;
    const uint8_t* ql = blk + 64 * h + 32 * (k % 2);
    const uint8_t* qh = blk + kQK_K / 2 + 32 * h;
    const auto* scales = reinterpret_cast<const int8_t*>(blk + kQK_K / 2 + kQK_K / 4);
    for (int l = 0; l < 32; ++l) {
      const int nib = k < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
      out->q[l] = static_cast<int8_t>((nib | (((qh[l] >> (2 * k)) & 3) << 4)) - 32);
    }
    out->sc[0] = scales[8 * h + 2 * k];
    out->sc[1] = scales[8 * h + 2 * k + 1];
    out->d = Fp16ToFp32(LoadU16(blk + offsetof(BlockQ6_K, d)));
    return;
  }
  // Q4_K / Q5_K: sub-block s is nibble half s % 2 of qs[32 * (s / 2)..].
  const bool q5 = type == GgmlType::kQ5_K;
  const uint8_t* qh = blk + 4 + kKScaleSize;
  const uint8_t* qs = (q5 ? qh + kQK_K / 8 : qh) + 32 * (s / 2);
  for (int l = 0; l < 32; ++l) {
    int q = (qs[l] >> (4 * (s % 2))) & 0x0F;
    if (q5) {
      q |= ((qh[l] >> s) & 1) << 4;
    }
    out->q[l] = static_cast<int8_t>(q);
  }
  uint8_t sc, mn;
  KQuantScaleMin(s, blk + 4, &sc, &mn);
  out->sc[0] = out->sc[1] = sc;
  out->d = Fp16ToFp32(LoadU16(blk));
  out->m = -(Fp16ToFp32(LoadU16(blk + 2)) * static_cast<float>(mn));
}

absl::StatusOr<GgmlType> GgmlTypeFromId(uint32_t id) {
  if (Info(static_cast<GgmlType>(id)) != nullptr) {
    return static_cast<GgmlType>(id);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tensor type id ", id, " (supported: ", SupportedList(true), ")"));
}

absl::string_view GgmlTypeName(GgmlType type) {
  const TypeInfo* t = Info(type);
  return t != nullptr ? t->name : "UNKNOWN";
}

absl::StatusOr<GgmlType> GgmlTypeFromName(absl::string_view name) {
  for (const TypeInfo& t : kTypes) {
    if (absl::EqualsIgnoreCase(name, t.name)) {
      return t.type;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tensor type '", name, "' (valid: ", SupportedList(false), ")"));
}

int64_t GgmlBlockSize(GgmlType type) {
  const TypeInfo* t = Info(type);
  return t != nullptr ? t->block_size : 1;
}

int64_t GgmlTypeSize(GgmlType type) {
  const TypeInfo* t = Info(type);
  return t != nullptr ? t->type_size : 0;
}

int64_t GgmlRowBytes(GgmlType type, int64_t n) {
  return n / GgmlBlockSize(type) * GgmlTypeSize(type);
}

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 0x1F) {
    // Inf or NaN; the payload moves to the top of the fp32 mantissa.
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

uint16_t Fp32ToFp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) {
    // NaN: keep it quiet and keep the top payload bits.
    return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
  }
  if (abs >= 0x477FF000) {
    // >= 65520 (halfway between 65504 and 2^16) rounds to infinity; so does inf.
    return static_cast<uint16_t>(sign | 0x7C00);
  }
  if (abs >= 0x38800000) {
    // Normal half (>= 2^-14): rebias and round the 13 dropped bits to nearest
    // even; a carry into the exponent is the correct result.
    const uint32_t rebiased = abs - ((127u - 15u) << 23);
    const uint32_t rounded = rebiased + 0xFFF + ((rebiased >> 13) & 1);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal half: value / 2^-24 rounded to nearest even.
  const uint32_t e = abs >> 23;
  if (e < 102) {
    // < 2^-25 (fp32 subnormals included): rounds to zero.
    return sign;
  }
  const uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) {
    ++q;  // may carry into the smallest normal (0x400), which is right
  }
  return static_cast<uint16_t>(sign | q);
}

float Bf16ToFp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t Fp32ToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) {
    return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN: force quiet
  }
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  CHECK_EQ(n % GgmlBlockSize(type), 0) << "row of " << n << " elements of " << GgmlTypeName(type);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::kF32:
      if (n > 0) {
        std::memcpy(dst, s, n * sizeof(float));
      }
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = Fp16ToFp32(LoadU16(s + 2 * i));
      }
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = Bf16ToFp32(LoadU16(s + 2 * i));
      }
      return;
    case GgmlType::kQ8_0:
      DequantizeRowQ8_0(s, dst, n);
      return;
    case GgmlType::kQ4_0:
      DequantizeRowQ4_0(s, dst, n);
      return;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      DequantizeRowLevels(type, s, dst, n);
      return;
  }
  LOG(FATAL) << "DequantizeRow: bad type " << static_cast<uint32_t>(type);
}

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  CHECK_EQ(n % GgmlBlockSize(type), 0) << "row of " << n << " elements of " << GgmlTypeName(type);
  uint8_t* d = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::kF32:
      if (n > 0) {
        std::memcpy(d, src, n * sizeof(float));
      }
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        StoreU16(d + 2 * i, Fp32ToFp16(src[i]));
      }
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        StoreU16(d + 2 * i, Fp32ToBf16(src[i]));
      }
      return;
    case GgmlType::kQ8_0:
      QuantizeRowQ8_0(src, d, n);
      return;
    case GgmlType::kQ4_0:
      QuantizeRowQ4_0(src, d, n);
      return;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
      QuantizeRowLowBit(type, src, d, n);
      return;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      QuantizeRowK(type, src, d, n);
      return;
  }
  LOG(FATAL) << "QuantizeRow: bad type " << static_cast<uint32_t>(type);
}

}  // namespace tandem::engine
