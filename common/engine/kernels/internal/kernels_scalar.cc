// Scalar reference kernels: the readable specification every SIMD path is
// tested against, and the fallback on CPUs without AVX2.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "common/base/logging.h"
#include "common/engine/kernels/internal/kernels_internal.h"

namespace tandem::engine::internal {

QuantizedActs AllocQuantizedActs(ScratchBuffer& buffer, int64_t m, int64_t cols) {
  QuantizedActs a;
  a.nb = cols / kQBlock;
  const size_t qs_bytes = (static_cast<size_t>(m * cols) + 63) & ~size_t{63};
  const size_t d_bytes = (static_cast<size_t>(m * a.nb) * 4 + 63) & ~size_t{63};
  auto* base = static_cast<uint8_t*>(buffer.Get(qs_bytes + 4 * d_bytes));
  a.qs = reinterpret_cast<int8_t*>(base);
  a.d = reinterpret_cast<float*>(base + qs_bytes);
  a.sum = reinterpret_cast<int32_t*>(base + qs_bytes + d_bytes);
  a.sum_lo = reinterpret_cast<int32_t*>(base + qs_bytes + 2 * d_bytes);
  a.dsum = reinterpret_cast<float*>(base + qs_bytes + 3 * d_bytes);
  return a;
}

void QuantizeActsScalar(const float* x, int64_t m, int64_t cols, const QuantizedActs& out) {
  const int64_t nb = cols / kQBlock;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + i * cols + b * kQBlock;
      float amax = 0.0f;
      for (int j = 0; j < kQBlock; ++j) {
        amax = std::max(amax, std::fabs(xb[j]));
      }
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      int8_t* q = out.qs + i * cols + b * kQBlock;
      int32_t sum = 0;
      for (int j = 0; j < kQBlock; ++j) {
        // nearbyint rounds half to even in the default mode, as the SIMD
        // float->int conversions do.
        q[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
        sum += q[j];
        if (j == kQBlock / 2 - 1) {
          out.sum_lo[i * nb + b] = sum;
        }
      }
      out.d[i * nb + b] = d;
      out.sum[i * nb + b] = sum;
      out.dsum[i * nb + b] = d * static_cast<float>(sum);
    }
  }
}

void DequantizeRowScalar(const WeightView& w, int64_t r, float* out) {
  const uint8_t* row = w.data + r * w.row_bytes;
  if (IsLevelType(w.type)) {
    DequantizeRow(w.type, row, out, w.cols);  // ggml's exact fp32 formulas
    return;
  }
  switch (w.type) {
    case GgmlType::kF32:
      std::memcpy(out, row, w.cols * sizeof(float));
      return;
    case GgmlType::kF16:
      for (int64_t c = 0; c < w.cols; ++c) {
        out[c] = HalfToFloat(LoadU16(row + 2 * c));
      }
      return;
    case GgmlType::kBF16:
      for (int64_t c = 0; c < w.cols; ++c) {
        out[c] = BfloatToFloat(LoadU16(row + 2 * c));
      }
      return;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < w.cols / kQBlock; ++b) {
        const uint8_t* blk = row + b * sizeof(BlockQ8_0);
        const float d = HalfToFloat(LoadU16(blk));
        for (int j = 0; j < kQBlock; ++j) {
          out[b * kQBlock + j] = d * static_cast<int8_t>(blk[2 + j]);
        }
      }
      return;
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < w.cols / kQBlock; ++b) {
        const uint8_t* blk = row + b * sizeof(BlockQ4_0);
        const float d = HalfToFloat(LoadU16(blk));
        for (int j = 0; j < kQBlock / 2; ++j) {
          out[b * kQBlock + j] = d * ((blk[2 + j] & 0x0F) - 8);
          out[b * kQBlock + j + kQBlock / 2] = d * ((blk[2 + j] >> 4) - 8);
        }
      }
      return;
    default:
      LOG(FATAL) << "DequantizeRowScalar: type " << GgmlTypeName(w.type);
  }
}

namespace {

// Dot product of a level-type weight row with quantized activation row i:
// per block, the exact integer sum sc0 * sum_{j<16} q x + sc1 * sum_{j>=16} q x
// times d * dx, plus m * dx * sum(x).
float DotLevels(GgmlType type, const uint8_t* row, const QuantizedActs& xa, int64_t i) {
  const int8_t* xq = xa.qs + i * xa.nb * kQBlock;
  float acc = 0.0f;
  float macc = 0.0f;
  LevelBlock blk;
  for (int64_t b = 0; b < xa.nb; ++b) {
    UnpackLevelBlock(type, row, b, &blk);
    int32_t half[2] = {0, 0};
    for (int j = 0; j < kQBlock; ++j) {
      half[j / 16] += blk.q[j] * xq[b * kQBlock + j];
    }
    const int32_t isum = blk.sc[0] * half[0] + blk.sc[1] * half[1];
    const float dx = xa.d[i * xa.nb + b];
    acc += static_cast<float>(isum) * (blk.d * dx);
    macc += blk.m * (dx * static_cast<float>(xa.sum[i * xa.nb + b]));
  }
  return acc + macc;
}

// Dot product of quantized weight row `row` with quantized activation row i.
float DotQuantized(GgmlType type, const uint8_t* row, const QuantizedActs& xa, int64_t i) {
  const int8_t* xq = xa.qs + i * xa.nb * kQBlock;
  float acc = 0.0f;
  for (int64_t b = 0; b < xa.nb; ++b) {
    int32_t isum = 0;
    float dw;
    if (type == GgmlType::kQ8_0) {
      const uint8_t* blk = row + b * sizeof(BlockQ8_0);
      dw = HalfToFloat(LoadU16(blk));
      for (int j = 0; j < kQBlock; ++j) {
        isum += static_cast<int8_t>(blk[2 + j]) * xq[b * kQBlock + j];
      }
    } else {
      const uint8_t* blk = row + b * sizeof(BlockQ4_0);
      dw = HalfToFloat(LoadU16(blk));
      for (int j = 0; j < kQBlock / 2; ++j) {
        isum += ((blk[2 + j] & 0x0F) - 8) * xq[b * kQBlock + j];
        isum += ((blk[2 + j] >> 4) - 8) * xq[b * kQBlock + j + kQBlock / 2];
      }
    }
    acc += static_cast<float>(isum) * xa.d[i * xa.nb + b] * dw;
  }
  return acc;
}

}  // namespace

void MatMulScalar(const WeightView& w, const float* x, int64_t m, float* y, base::ThreadPool& pool) {
  if (IsQuantizedType(w.type)) {
    static thread_local ScratchBuffer scratch;
    const QuantizedActs xa = AllocQuantizedActs(scratch, m, w.cols);
    QuantizeActsScalar(x, m, w.cols, xa);
    pool.ParallelFor(w.rows, 8, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const uint8_t* row = w.data + r * w.row_bytes;
        for (int64_t i = 0; i < m; ++i) {
          y[i * w.rows + r] = IsLevelType(w.type) ? DotLevels(w.type, row, xa, i)
                                                  : DotQuantized(w.type, row, xa, i);
        }
      }
    });
    return;
  }
  pool.ParallelFor(w.rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> row(w.cols);
    for (int64_t r = begin; r < end; ++r) {
      DequantizeRowScalar(w, r, row.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * w.cols;
        float acc = 0.0f;
        for (int64_t c = 0; c < w.cols; ++c) {
          acc += row[c] * xi[c];
        }
        y[i * w.rows + r] = acc;
      }
    }
  });
}

void RmsNormScalar(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                   float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * n;
    float ss = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      ss += xi[j] * xi[j];
    }
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (int64_t j = 0; j < n; ++j) {
      out[i * n + j] = xi[j] * scale * weight[j];
    }
  }
}

void SwiGluScalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AttendBlockScalar(const float* q, int group, const void* k, const void* v, GgmlType dtype,
                       int n, int head_dim, float* m, float* l, float* acc,
                       const KvBlockRef* /*ahead*/) {
  auto load = [dtype](const void* base, int64_t idx) {
    return dtype == GgmlType::kF16 ? HalfToFloat(static_cast<const uint16_t*>(base)[idx])
                                   : static_cast<const float*>(base)[idx];
  };
  float scores[256];
  DCHECK_LE(n, 256);
  for (int g = 0; g < group; ++g) {
    const float* qg = q + g * head_dim;
    float block_max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int d = 0; d < head_dim; ++d) {
        s += qg[d] * load(k, int64_t{j} * head_dim + d);
      }
      scores[j] = s;
      block_max = std::max(block_max, s);
    }
    const float new_max = std::max(m[g], block_max);
    const float correction = std::exp(m[g] - new_max);  // 0 on the first block (m = -inf)
    float* accg = acc + g * head_dim;
    for (int d = 0; d < head_dim; ++d) {
      accg[d] *= correction;
    }
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      const float p = std::exp(scores[j] - new_max);
      sum += p;
      for (int d = 0; d < head_dim; ++d) {
        accg[d] += p * load(v, int64_t{j} * head_dim + d);
      }
    }
    l[g] = l[g] * correction + sum;
    m[g] = new_max;
  }
}

}  // namespace tandem::engine::internal
