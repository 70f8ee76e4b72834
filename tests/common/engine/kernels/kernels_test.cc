// Kernel tests: every ISA path (one test instance each, skipped with the
// missing ISA named where this CPU lacks it) against the scalar reference
// and against double-precision math on the dequantized weights. All inputs
// come from fixed seeds, printed (SCOPED_TRACE) on failure.
//
// Tolerances (u = 2^-24, the fp32 unit roundoff; S = sum_c |w_c * x_c|):
//  * Float weights (F32/F16/BF16 convert to fp32 exactly): any fp32 summation
//    order of K products satisfies |y - y_exact| <= K * u * S (recursive
//    summation bound gamma_K ~ K*u), so each path gets that bound and two paths
//    differ by at most twice it.
//  * Quantized weights: activations are quantized per 32-block with step
//    d = amax/127 and round-to-nearest, so |x_c - d*q_c| <= amax_b / 254, giving
//    |y - y_exact| <= Q = sum_b (amax_b/254) * sum_{c in b} |w_c|, plus fp32
//    rounding of the per-block terms (nb + 4) * u * (S + Q). Between ISA paths
//    the activation bits and the integer block sums are identical (tested by
//    the tight bound), so only the fp32 accumulation of nb block terms differs.
//  * Level types (Q4_1 ... Q6_K): as quantized weights, but a block's value
//    d * sc * q + m is summed as two terms (the integer dot times d * dx, and
//    m * dx * sum(q_x)) that may cancel, so the fp32 rounding bound uses
//    P = sum_c (|d * sc * q_c| + |m|) * |x_c| >= S in place of S, and the
//    kernels' d * sc * q differs from ggml's dequantized (d * sc) * q by one
//    rounding (<= u * P, inside the same bound).
// Within one ISA every path is batch-invariant: a row's output bits do not
// depend on m or on the row's position in the batch (checked bitwise).

#include "common/engine/kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/thread_pool.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/kernels/internal/kernels_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/smaps.h"
#include "tests/testing/status_matchers.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::StatusIs;

constexpr double kU = 1.0 / (1 << 24);

// Restores the active ISA when a test ends.
class IsaGuard {
 public:
  IsaGuard() : saved_(ActiveIsa()) {}
  ~IsaGuard() { SetActiveIsa(saved_); }

 private:
  Isa saved_;
};

// Every kernel path, scalar first. Each runs as its own test instance
// (Suite/Test/<isa>); on a CPU without the ISA that instance is SKIPPED
// naming the missing ISA, so a lost path shows in the report.
constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni,
                            Isa::kAvx512Amx};

// A test run with one ISA active (GetParam()); skipped where the CPU lacks it.
class PerIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(isa()) > static_cast<int>(DetectIsa())) {
      GTEST_SKIP() << "this CPU lacks " << IsaName(isa())
                   << " (best ISA detected: " << IsaName(DetectIsa()) << ")";
    }
    SetActiveIsa(isa());
    ASSERT_EQ(ActiveIsa(), isa());
  }
  Isa isa() const { return GetParam(); }

 private:
  IsaGuard guard_;
};

#define TANDEM_INSTANTIATE_PER_ISA(suite)                              \
  INSTANTIATE_TEST_SUITE_P(Isas, suite, ::testing::ValuesIn(kAllIsas), \
                           [](const auto& info) { return std::string(IsaName(info.param)); })

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) {
    f = dist(rng);
  }
  return v;
}

// Weights of `type` built from random floats (with a few outlier rows and a
// zero block to exercise scales), stored in GGUF layout.
bool IsKQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

// K-quant weights (Tandem has no K-quant quantizer yet): random super-blocks,
// every level and scale bit pattern, with finite fp16 d (and dmin) of random
// sign; row 1 has 50x larger scales and row 2 an all-zero first super-block.
std::vector<uint8_t> RandomKQuantWeights(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> scale(0.0f, 0.01f);
  const int64_t bytes = GgmlTypeSize(type);
  const int64_t per_row = cols / kQK_K;
  std::vector<uint8_t> data(rows * per_row * bytes);
  for (uint8_t& b : data) {
    b = static_cast<uint8_t>(rng());
  }
  const std::vector<int64_t> fp16_fields =
      type == GgmlType::kQ6_K ? std::vector<int64_t>{208} : std::vector<int64_t>{0, 2};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < per_row; ++k) {
      uint8_t* blk = data.data() + (r * per_row + k) * bytes;
      for (int64_t off : fp16_fields) {
        float v = scale(rng) * (r == 1 ? 50.0f : 1.0f);
        if (r == 2 && k == 0) {
          v = 0.0f;
        }
        const uint16_t h = Fp32ToFp16(v);
        std::memcpy(blk + off, &h, 2);
      }
    }
  }
  return data;
}

std::vector<uint8_t> MakeWeights(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  if (IsKQuant(type)) {
    return RandomKQuantWeights(type, rows, cols, seed);
  }
  std::vector<float> f = RandomFloats(rows * cols, seed, 0.5f);
  if (rows > 2) {
    for (int64_t c = 0; c < cols; ++c) {
      f[1 * cols + c] *= 50.0f;  // a large-scale row
    }
    for (int64_t c = 0; c < std::min<int64_t>(cols, 32); ++c) {
      f[2 * cols + c] = 0.0f;  // an all-zero block
    }
  }
  const int64_t row_bytes = GgmlRowBytes(type, cols);
  std::vector<uint8_t> data(rows * row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(type, f.data() + r * cols, data.data() + r * row_bytes, cols);
  }
  return data;
}

struct Reference {
  std::vector<double> y;      // exact math on dequantized weights
  std::vector<double> abs;    // S: sum |w x|
  std::vector<double> quant;  // Q: activation quantization bound (0 for float types)
  std::vector<double> parts;  // P: like S, with a level type's block terms apart
};

// sum_c (|d * sc * q_c| + |m|) * |x_c| over a level-type row (see the header).
double LevelParts(GgmlType type, const uint8_t* row, int64_t cols, const float* x) {
  double parts = 0.0;
  LevelBlock blk;
  for (int64_t b = 0; b < cols / 32; ++b) {
    UnpackLevelBlock(type, row, b, &blk);
    for (int j = 0; j < 32; ++j) {
      const double a = std::fabs(static_cast<double>(blk.d) * blk.sc[j / 16] * blk.q[j]);
      parts += (a + std::fabs(static_cast<double>(blk.m))) * std::fabs(x[b * 32 + j]);
    }
  }
  return parts;
}

bool IsQuantized(GgmlType t) { return internal::IsQuantizedType(t); }

// The types with a quantized-activation kernel, and the level types.
constexpr GgmlType kLevelTypes[] = {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                    GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// `raw` is w's data (GGUF layout).
Reference NaiveMatMul(const WeightMatrix& w, const uint8_t* raw, const std::vector<float>& x,
                      int64_t m) {
  const int64_t rows = w.rows();
  const int64_t cols = w.cols();
  const bool quantized = IsQuantized(w.type());
  Reference ref;
  ref.y.assign(m * rows, 0.0);
  ref.abs.assign(m * rows, 0.0);
  ref.quant.assign(m * rows, 0.0);
  ref.parts.assign(m * rows, 0.0);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    w.DequantizeRowTo(r, row.data());
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x.data() + i * cols;
      double acc = 0.0, abs = 0.0, quant = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        acc += static_cast<double>(row[c]) * xi[c];
        abs += std::fabs(static_cast<double>(row[c]) * xi[c]);
      }
      if (quantized) {
        for (int64_t b = 0; b < cols / 32; ++b) {
          double amax = 0.0, wsum = 0.0;
          for (int j = 0; j < 32; ++j) {
            amax = std::max(amax, std::fabs(static_cast<double>(xi[b * 32 + j])));
            wsum += std::fabs(static_cast<double>(row[b * 32 + j]));
          }
          quant += amax / 254.0 * wsum;
        }
      }
      ref.y[i * rows + r] = acc;
      ref.abs[i * rows + r] = abs;
      ref.parts[i * rows + r] =
          IsLevelType(w.type())
              ? LevelParts(w.type(), raw + r * GgmlRowBytes(w.type(), cols), cols, xi)
              : abs;
      ref.quant[i * rows + r] = quant;
    }
  }
  return ref;
}

struct MatMulCase {
  GgmlType type;
  int64_t rows;
  int64_t cols;
  int64_t m;
};

std::string CaseName(const MatMulCase& c) {
  return absl::StrCat(GgmlTypeName(c.type), " rows=", c.rows, " cols=", c.cols, " m=", c.m);
}

// Checks `isa` (which the CPU has) on `c` with weights `data` (GGUF layout)
// and activations x, and against the scalar path.
void CheckMatMulOn(Isa isa, const MatMulCase& c, const std::vector<uint8_t>& data,
                   const std::vector<float>& x) {
  IsaGuard guard;
  ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(c.type, data.data(), c.rows, c.cols));
  const Reference ref = NaiveMatMul(w, data.data(), x, c.m);
  const bool quantized = IsQuantized(c.type);
  const double nb = static_cast<double>(c.cols) / 32.0;
  auto bound_exact = [&](int64_t j) {
    return quantized ? ref.quant[j] + (nb + 4) * kU * (ref.parts[j] + ref.quant[j])
                     : c.cols * kU * ref.abs[j] + 1e-30;
  };
  auto bound_paths = [&](int64_t j) {
    return quantized ? 2 * (nb + 4) * kU * (ref.parts[j] + ref.quant[j]) + 1e-30
                     : 2 * c.cols * kU * ref.abs[j] + 1e-30;
  };

  base::ThreadPool pool1(1);
  base::ThreadPool pool3(3);
  std::vector<float> y_scalar(c.m * c.rows, -4.0f);
  if (isa != Isa::kScalar) {
    SetActiveIsa(Isa::kScalar);
    MatMul(w, x.data(), c.m, y_scalar.data(), pool3);
  }
  SetActiveIsa(isa);
  ASSERT_EQ(ActiveIsa(), isa);
  std::vector<float> y(c.m * c.rows, -1.0f);
  MatMul(w, x.data(), c.m, y.data(), pool3);
  // The result does not depend on the thread count (fixed reduction order).
  std::vector<float> y1(c.m * c.rows, -2.0f);
  MatMul(w, x.data(), c.m, y1.data(), pool1);
  ASSERT_EQ(y, y1);
  // Batch invariance: a row's result is bitwise the same whatever else
  // shares the call (alone, or at another position of a smaller batch), so
  // a sequence's tokens do not depend on the serving batch.
  for (int64_t i0 : {int64_t{0}, c.m / 2, c.m - 1}) {
    for (int64_t n : {int64_t{1}, c.m - i0}) {
      std::vector<float> ys(n * c.rows, -3.0f);
      MatMul(w, x.data() + i0 * c.cols, n, ys.data(), pool3);
      ASSERT_TRUE(std::equal(ys.begin(), ys.end(), y.begin() + i0 * c.rows))
          << "rows [" << i0 << ", " << i0 + n << ") of the batch differ from the batch of " << c.m;
    }
  }
  for (int64_t j = 0; j < c.m * c.rows; ++j) {
    ASSERT_LE(std::fabs(y[j] - ref.y[j]), bound_exact(j))
        << "i=" << j / c.rows << " r=" << j % c.rows << " got " << y[j] << " want " << ref.y[j];
  }
  if (isa != Isa::kScalar) {
    for (int64_t j = 0; j < c.m * c.rows; ++j) {
      ASSERT_LE(std::fabs(y[j] - y_scalar[j]), bound_paths(j))
          << "vs scalar: i=" << j / c.rows << " r=" << j % c.rows;
    }
  }
}

// CheckMatMulOn with random weights (MakeWeights) and activations (one
// all-zero activation block when m > 1).
void CheckMatMul(Isa isa, const MatMulCase& c, uint32_t seed) {
  SCOPED_TRACE(absl::StrCat(CaseName(c), " seed=", seed, " ", IsaName(isa)));
  const std::vector<uint8_t> data = MakeWeights(c.type, c.rows, c.cols, seed);
  std::vector<float> x = RandomFloats(c.m * c.cols, seed + 1);
  if (c.m > 1) {
    for (int64_t k = 0; k < std::min<int64_t>(c.cols, 32); ++k) {
      x[c.cols + k] = 0.0f;  // an all-zero activation block (scale 0)
    }
  }
  CheckMatMulOn(isa, c, data, x);
}

class MatMulTest : public PerIsaTest {};
TANDEM_INSTANTIATE_PER_ISA(MatMulTest);

TEST_P(MatMulTest, AllTypesOddShapes) {
  uint32_t seed = 1000;
  for (GgmlType type :
       {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    const bool quantized = type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0;
    const std::vector<int64_t> col_set =
        quantized ? std::vector<int64_t>{32, 96, 288} : std::vector<int64_t>{8, 37, 96, 300};
    for (int64_t rows : {1, 7, 13, 33, 69}) {
      for (int64_t cols : col_set) {
        for (int64_t m : {1, 2, 3, 5, 17, 64}) {
          CheckMatMul(isa(), {type, rows, cols, m}, ++seed);
        }
      }
    }
  }
}

TEST_P(MatMulTest, LargerShapesCrossPanelAndChunkBoundaries) {
  // cols spans several float K-chunks (256) and quantized panel groups.
  uint32_t seed = 5000;
  for (GgmlType type :
       {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    CheckMatMul(isa(), {type, 203, 1056, 1}, ++seed);
    CheckMatMul(isa(), {type, 203, 1056, 19}, ++seed);
    CheckMatMul(isa(), {type, 517, 640, 64}, ++seed);
  }
}

TEST_P(MatMulTest, LevelTypesOddShapes) {
  uint32_t seed = 7000;
  for (GgmlType type : kLevelTypes) {
    const std::vector<int64_t> col_set =
        IsKQuant(type) ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 288};
    for (int64_t rows : {1, 7, 33}) {
      for (int64_t cols : col_set) {
        for (int64_t m : {1, 2, 3, 5, 17}) {
          CheckMatMul(isa(), {type, rows, cols, m}, ++seed);
        }
      }
    }
  }
}

TEST_P(MatMulTest, LevelTypesTinyLlamaShapes) {
  // TinyLlama's 2048 -> 256 (k/v) and 5632 -> 2048 (ffn_down) columns, cut
  // to few rows; decode (m = 1) and a prefill-sized batch.
  uint32_t seed = 8000;
  for (GgmlType type : kLevelTypes) {
    CheckMatMul(isa(), {type, 40, 2048, 1}, ++seed);
    CheckMatMul(isa(), {type, 19, 5632, 9}, ++seed);
    CheckMatMul(isa(), {type, 70, 512, 64}, ++seed);
  }
}

// Every level at its largest stored value (15, 31 or 63; Q5_0's and Q6_K's
// offsets make that +15 and +31) times activations that all quantize to
// +127 or -127: the largest integer block dots and vpmaddubsw pair sums the
// kernels can meet (the AVX2 path sums pairs in int16, up to 32004; see
// kernels_levels.inc). Factors: fp16 d = dmin = 2^-8, Q4_K/Q5_K 6-bit scales
// and mins 63, Q6_K int8 scales 127 or -128.
std::vector<uint8_t> MaxLevelWeights(GgmlType type, int64_t rows, int64_t cols) {
  const int64_t block_bytes = GgmlTypeSize(type);
  std::vector<uint8_t> data(rows * (cols / GgmlBlockSize(type)) * block_bytes, 0xFF);
  const uint16_t d = Fp32ToFp16(1.0f / 256.0f);
  for (int64_t b = 0; b < static_cast<int64_t>(data.size()) / block_bytes; ++b) {
    uint8_t* blk = data.data() + b * block_bytes;
    switch (type) {
      case GgmlType::kQ6_K:
        // int8 scales: 127 for the even 16-halves, -128 for the odd ones.
        for (int j = 0; j < 16; ++j) {
          blk[kQK_K / 2 + kQK_K / 4 + j] = j % 2 == 0 ? 0x7F : 0x80;
        }
        std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
        break;
      case GgmlType::kQ5_0:
        std::memcpy(blk, &d, 2);
        break;
      default:  // Q4_1, Q5_1 (d, m); Q4_K, Q5_K (d, dmin)
        std::memcpy(blk, &d, 2);
        std::memcpy(blk + 2, &d, 2);
        break;
    }
  }
  return data;
}

TEST_P(MatMulTest, LevelTypesLargestLevelsAndActivations) {
  for (GgmlType type : kLevelTypes) {
    const int64_t rows = 21;
    const int64_t cols = 512;
    for (int64_t m : {1, 2, 9}) {
      // Row i: all +1 (i % 3 == 0), all -1 (1), or the sign alternating by block (2).
      std::vector<float> x(m * cols);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < cols; ++c) {
          const bool neg = i % 3 == 1 || (i % 3 == 2 && (c / 32) % 2 == 1);
          x[i * cols + c] = neg ? -1.0f : 1.0f;
        }
      }
      const MatMulCase mc{type, rows, cols, m};
      SCOPED_TRACE(absl::StrCat(CaseName(mc), " ", IsaName(isa())));
      CheckMatMulOn(isa(), mc, MaxLevelWeights(type, rows, cols), x);
    }
  }
}

// The SIMD activation quantizer gives the scalar one's bits, with the
// per-block extras the level kernels use: the sum of the first 16 q and
// d * float(sum).
TEST(QuantizeActsTest, Avx2MatchesScalarWithHalfSums) {
  if (DetectIsa() == Isa::kScalar) {
    GTEST_SKIP() << "this CPU lacks avx2";
  }
  const int64_t m = 3;
  const int64_t cols = 256;
  std::vector<float> x = RandomFloats(m * cols, 31);
  for (int64_t k = 0; k < 32; ++k) {
    x[cols + 64 + k] = 0.0f;  // an all-zero block
  }
  internal::ScratchBuffer buf_scalar;
  internal::ScratchBuffer buf_avx2;
  const internal::QuantizedActs s = internal::AllocQuantizedActs(buf_scalar, m, cols);
  const internal::QuantizedActs a = internal::AllocQuantizedActs(buf_avx2, m, cols);
  internal::QuantizeActsScalar(x.data(), m, cols, s);
  internal::QuantizeActsAvx2(x.data(), m, cols, /*offset128=*/false, a);
  ASSERT_EQ(s.nb, cols / 32);
  EXPECT_TRUE(std::equal(s.qs, s.qs + m * cols, a.qs));
  for (int64_t j = 0; j < m * s.nb; ++j) {
    int32_t lo = 0;
    int32_t all = 0;
    for (int k = 0; k < 32; ++k) {
      all += s.qs[j * 32 + k];
      lo += k < 16 ? s.qs[j * 32 + k] : 0;
    }
    EXPECT_EQ(s.sum[j], all) << "block " << j;
    EXPECT_EQ(s.sum_lo[j], lo) << "block " << j;
    EXPECT_EQ(s.dsum[j], s.d[j] * static_cast<float>(all)) << "block " << j;
    EXPECT_EQ(a.d[j], s.d[j]) << "block " << j;
    EXPECT_EQ(a.sum[j], s.sum[j]) << "block " << j;
    EXPECT_EQ(a.sum_lo[j], s.sum_lo[j]) << "block " << j;
    EXPECT_EQ(a.dsum[j], s.dsum[j]) << "block " << j;
  }
}

// The quantized kernels sum exact integer dots (of each block, or of each
// block's 16-halves for the level types) and add the fp32 block terms in one
// fixed order, so the AVX2 (vpmaddubsw) and VNNI (vpdpbusd) paths agree bit
// for bit, fused (m <= 2) or panelled, in either Q4_0 layout. (Matrices
// without a load-time copy: these are the per-call paths.)
TEST(LevelKernelsTest, Avx2AndVnniAgreeBitwise) {
  if (DetectIsa() < Isa::kAvx512Vnni) {
    GTEST_SKIP() << "this CPU lacks avx512vnni (best ISA detected: " << IsaName(DetectIsa()) << ")";
  }
  IsaGuard guard;
  base::ThreadPool pool(2);
  uint32_t seed = 9000;
  std::vector<GgmlType> types(std::begin(kLevelTypes), std::end(kLevelTypes));
  types.push_back(GgmlType::kQ4_0);
  types.push_back(GgmlType::kQ8_0);
  for (GgmlType type : types) {
    const int64_t rows = 37;
    const int64_t cols = 512;
    const std::vector<uint8_t> data = MakeWeights(type, rows, cols, ++seed);
    ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(type, data.data(), rows, cols,
                                                              /*repack=*/false));
    for (int64_t m : {1, 2, 3, 11, 40}) {
      const std::vector<float> x = RandomFloats(m * cols, ++seed);
      std::vector<float> y_avx2(m * rows), y_vnni(m * rows);
      SetActiveIsa(Isa::kAvx2);
      MatMul(w, x.data(), m, y_avx2.data(), pool);
      SetActiveIsa(Isa::kAvx512Vnni);
      MatMul(w, x.data(), m, y_vnni.data(), pool);
      EXPECT_EQ(y_avx2, y_vnni) << GgmlTypeName(type) << " m=" << m;
    }
  }
}

// The AMX-INT8 GEMM forms the same exact integer block dots on tiles as
// vpdpbusd in zmm lanes and runs the VNNI kernels' fp32 epilogue on them, so
// it equals the VNNI path bit for bit: every quantized type, tiles of 1 to 16
// activation rows (m = 17: 9 + 8; m = 40: 14 + 13 + 13), a partial last panel
// (37 rows), an odd block count (480 columns: the single-block tail), panels
// gathered from the GGUF rows and filled from the load-time copy, 1 and 2
// threads.
TEST(LevelKernelsTest, AmxAndVnniAgreeBitwise) {
  if (DetectIsa() < Isa::kAvx512Amx) {
    GTEST_SKIP() << "this CPU lacks avx512amx (best ISA detected: " << IsaName(DetectIsa()) << ")";
  }
  IsaGuard guard;
  base::ThreadPool pool1(1), pool2(2);
  uint32_t seed = 9500;
  std::vector<GgmlType> types(std::begin(kLevelTypes), std::end(kLevelTypes));
  types.push_back(GgmlType::kQ4_0);
  types.push_back(GgmlType::kQ8_0);
  for (GgmlType type : types) {
    // 16, 15, 14 and 13 blocks: LevelKernelAmx's pipeline of two-block steps
    // ends on an odd or an even step, whole or a lone block.
    for (int64_t cols : {int64_t{512}, int64_t{480}, int64_t{448}, int64_t{416}}) {
      if (cols % GgmlBlockSize(type) != 0) {
        continue;  // K-quants: 256-element super-blocks
      }
      const int64_t rows = 37;
      const std::vector<uint8_t> data = MakeWeights(type, rows, cols, ++seed);
      SetActiveIsa(Isa::kAvx512Vnni);
      ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(type, data.data(), rows, cols,
                                                                /*repack=*/false));
      SetActiveIsa(Isa::kAvx512Amx);
      ASSERT_OK_AND_ASSIGN(WeightMatrix w_copy, WeightMatrix::Create(type, data.data(), rows, cols,
                                                                     /*repack=*/true));
      for (int64_t m : {3, 16, 17, 40}) {
        const std::vector<float> x = RandomFloats(m * cols, ++seed);
        std::vector<float> y_vnni(m * rows), y_amx(m * rows), y_amx_copy(m * rows);
        SetActiveIsa(Isa::kAvx512Vnni);
        MatMul(w, x.data(), m, y_vnni.data(), pool2);
        SetActiveIsa(Isa::kAvx512Amx);
        MatMul(w, x.data(), m, y_amx.data(), m == 17 ? pool1 : pool2);
        MatMul(w_copy, x.data(), m, y_amx_copy.data(), pool2);
        EXPECT_EQ(y_vnni, y_amx) << GgmlTypeName(type) << " cols=" << cols << " m=" << m;
        EXPECT_EQ(y_vnni, y_amx_copy)
            << GgmlTypeName(type) << " cols=" << cols << " m=" << m << " (copy)";
      }
    }
  }
}

// Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16 and BF16 weights created
// while AVX2 is active are repacked once into a layout as large as the GGUF data (Q4_K, Q5_K:
// scales unpacked, +4 bytes per super-block); MatMul with that copy gives the same
// bits as the per-call AVX2 paths (a matrix created while another ISA was
// active has no copy: Q4_0's fused rows at m <= 2 and its two panel layouts,
// Q8_0's panels, the level types' fused rows at m <= 2 and panels), at every
// batch size, thread count and shape (odd rows: a partial last panel; odd
// block counts: unaligned panels; m past one tile and past the panel-group
// threshold).
//
// Matrices created while an AVX-512 ISA is active get the same AVX2 copy,
// which must equal that ISA's per-call paths (VNNI vpdpbusd panels for the
// quantized types, the 512-bit float GEMM above batch 3) bit for bit too.
class PrepackedTest : public ::testing::TestWithParam<Isa> {};
INSTANTIATE_TEST_SUITE_P(Isas, PrepackedTest,
                         ::testing::Values(Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni,
                                           Isa::kAvx512Amx),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

TEST_P(PrepackedTest, EqualsPerCallPathsBitwise) {
  const Isa isa = GetParam();
  if (static_cast<int>(DetectIsa()) < static_cast<int>(isa)) {
    GTEST_SKIP() << "this CPU lacks " << IsaName(isa)
                 << " (best ISA detected: " << IsaName(DetectIsa()) << ")";
  }
  IsaGuard guard;
  base::ThreadPool pool1(1);
  base::ThreadPool pool3(3);
  uint32_t seed = 11000;
  for (GgmlType type :
       {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kF16, GgmlType::kBF16}) {
    const bool is_float = type == GgmlType::kF16 || type == GgmlType::kBF16;
    const std::vector<std::pair<int64_t, int64_t>> shapes =
        IsKQuant(type) ? std::vector<std::pair<int64_t, int64_t>>{{37, 256}, {8, 768}, {203, 1024},
                                                                  {520, 2048}}
        : is_float     ? std::vector<std::pair<int64_t, int64_t>>{{37, 37}, {16, 8}, {203, 300},
                                                                  {520, 2048}, {17, 1056}}
                       : std::vector<std::pair<int64_t, int64_t>>{{37, 96}, {8, 32}, {203, 1056},
                                                                  {520, 2048}};
    for (auto [rows, cols] : shapes) {
      SCOPED_TRACE(absl::StrCat(GgmlTypeName(type), " rows=", rows, " cols=", cols));
      const std::vector<uint8_t> data = MakeWeights(type, rows, cols, ++seed);
      SetActiveIsa(Isa::kScalar);
      ASSERT_OK_AND_ASSIGN(WeightMatrix plain, WeightMatrix::Create(type, data.data(), rows, cols));
      EXPECT_FALSE(plain.prepacked());
      SetActiveIsa(isa);
      ASSERT_OK_AND_ASSIGN(WeightMatrix packed, WeightMatrix::Create(type, data.data(), rows, cols));
      ASSERT_TRUE(packed.prepacked());
      const int64_t row_bytes =
          GgmlRowBytes(type, cols) +
          (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K ? cols / 256 * 4 : 0);
      const int64_t panel_rows = is_float ? 16 : 8;
      EXPECT_EQ(packed.prepacked_bytes(), (rows + panel_rows - 1) / panel_rows * panel_rows * row_bytes);
      for (int64_t m : {1, 2, 3, 4, 6, 7, 13, 16, 17, 32, 40}) {
        std::vector<float> x = RandomFloats(m * cols, ++seed);
        if (m > 1) {  // a zero block
          std::fill(x.begin() + cols, x.begin() + cols + std::min<int64_t>(cols, 32), 0.0f);
        }
        std::vector<float> want(m * rows, -1.0f);
        MatMul(plain, x.data(), m, want.data(), pool3);
        // Either prefetch level (which changes the copy's kernels' loops, not
        // their arithmetic).
        for (StreamPrefetch prefetch : {StreamPrefetch::kL1, StreamPrefetch::kL2}) {
          SetStreamPrefetch(prefetch);
          std::vector<float> got(m * rows, -2.0f), got1(m * rows, -3.0f);
          MatMul(packed, x.data(), m, got.data(), pool3);
          MatMul(packed, x.data(), m, got1.data(), pool1);
          EXPECT_EQ(got, want) << "m=" << m << ", prefetch " << StreamPrefetchName(prefetch);
          EXPECT_EQ(got1, want) << "m=" << m << ", 1 thread, prefetch "
                                << StreamPrefetchName(prefetch);
        }
        SetStreamPrefetch(DetectStreamPrefetch());
      }
      // Another ISA made active after creation reads the borrowed data.
      SetActiveIsa(Isa::kScalar);
      const std::vector<float> x = RandomFloats(cols, ++seed);
      std::vector<float> want(rows), got(rows);
      MatMul(plain, x.data(), 1, want.data(), pool3);
      MatMul(packed, x.data(), 1, got.data(), pool3);
      EXPECT_EQ(got, want);
    }
  }
}

// Q8_0 quants of -128 (legal in GGUF, never written by ggml's quantizer):
// batch 1-2 on the copy normally moves the sign trick onto the weights
// (sign(w, x) * |x|), where -w wraps for w = -128. A matrix holding one must
// still give the per-call path's bits, on every row, with both signs of x.
TEST_P(PrepackedTest, Q8MinusOneTwentyEightStaysExact) {
  const Isa isa = GetParam();
  if (static_cast<int>(DetectIsa()) < static_cast<int>(isa)) {
    GTEST_SKIP() << "this CPU lacks " << IsaName(isa);
  }
  IsaGuard guard;
  base::ThreadPool pool(2);
  constexpr int64_t kRows = 37, kCols = 256;
  std::vector<uint8_t> data = MakeWeights(GgmlType::kQ8_0, kRows, kCols, 12001);
  const int64_t row_bytes = GgmlRowBytes(GgmlType::kQ8_0, kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t b = 0; b < kCols / 32; ++b) {
      data[r * row_bytes + b * 34 + 2 + (r * 7 + b * 5) % 32] = 0x80;  // quant -128
    }
  }
  SetActiveIsa(Isa::kScalar);
  ASSERT_OK_AND_ASSIGN(WeightMatrix plain,
                       WeightMatrix::Create(GgmlType::kQ8_0, data.data(), kRows, kCols));
  SetActiveIsa(isa);
  ASSERT_OK_AND_ASSIGN(WeightMatrix packed,
                       WeightMatrix::Create(GgmlType::kQ8_0, data.data(), kRows, kCols));
  ASSERT_TRUE(packed.prepacked());
  for (int64_t m : {1, 2, 3}) {
    std::vector<float> x = RandomFloats(m * kCols, 12100 + m);
    std::vector<float> want(m * kRows, -1.0f), got(m * kRows, -2.0f);
    MatMul(plain, x.data(), m, want.data(), pool);
    MatMul(packed, x.data(), m, got.data(), pool);
    EXPECT_EQ(got, want) << "m=" << m;
  }
}

TEST_P(MatMulTest, ZeroActivationsGiveZero) {
  base::ThreadPool pool(2);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                        GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    const std::vector<uint8_t> data = MakeWeights(type, 9, 64, 7);
    ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(type, data.data(), 9, 64));
    std::vector<float> x(2 * 64, 0.0f);
    std::vector<float> y(2 * 9, 1.0f);
    MatMul(w, x.data(), 2, y.data(), pool);
    for (float v : y) {
      EXPECT_EQ(v, 0.0f) << GgmlTypeName(type);
    }
  }
}

TEST(WeightMatrixTest, CreateValidates) {
  std::vector<uint8_t> data(1024);
  EXPECT_THAT(WeightMatrix::Create(GgmlType::kQ8_0, data.data(), 2, 33),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("multiple")));
  EXPECT_THAT(WeightMatrix::Create(GgmlType::kF32, data.data(), 0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("shape")));
  EXPECT_THAT(WeightMatrix::Create(GgmlType::kF32, nullptr, 1, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("null")));
  EXPECT_THAT(WeightMatrix::Create(static_cast<GgmlType>(10), data.data(), 1, 256),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("type")));
  EXPECT_THAT(WeightMatrix::Create(GgmlType::kQ4_K, data.data(), 1, 288),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("cols 288 not a multiple of the Q4_K block size 256")));
  ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(GgmlType::kQ4_0, data.data(), 3, 64));
  EXPECT_EQ(w.rows(), 3);
  EXPECT_EQ(w.cols(), 64);
  EXPECT_EQ(w.bytes(), 3 * 2 * 18);
}

TEST(WeightMatrixTest, DequantizeRowMatchesGgml) {
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const int64_t cols = IsKQuant(type) ? 512 : 96;
    const std::vector<uint8_t> data = MakeWeights(type, 5, cols, 11);
    ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(type, data.data(), 5, cols));
    std::vector<float> got(cols), want(cols);
    for (int64_t r = 0; r < 5; ++r) {
      w.DequantizeRowTo(r, got.data());
      DequantizeRow(type, data.data() + r * GgmlRowBytes(type, cols), want.data(), cols);
      EXPECT_EQ(got, want) << GgmlTypeName(type) << " row " << r;
    }
  }
}

// The load-time copies lie in memory advised for transparent huge pages,
// small matrices sharing them (base::HugePageArena): a decode step streams
// every copy, and 4 KiB pages cost the 4-bit kernels 1.3-1.5x.
TEST(WeightMatrixTest, CopiesLieInHugePagesSmallOnesShared) {
  if (DetectIsa() < Isa::kAvx2) {
    const std::vector<uint8_t> data = MakeWeights(GgmlType::kQ4_0, 8, 64, 1);
    ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(GgmlType::kQ4_0, data.data(), 8, 64));
    EXPECT_FALSE(w.prepacked());  // no copy without AVX2
    return;
  }
  std::vector<WeightMatrix> kept;
  const uint8_t* previous = nullptr;
  int64_t previous_bytes = 0;
  for (GgmlType type :
       {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kF16}) {
    const int64_t rows = 24, cols = IsKQuant(type) ? 512 : 128;
    const std::vector<uint8_t> data = MakeWeights(type, rows, cols, 3);
    ASSERT_OK_AND_ASSIGN(WeightMatrix w, WeightMatrix::Create(type, data.data(), rows, cols));
    ASSERT_TRUE(w.prepacked()) << GgmlTypeName(type);
    const uint8_t* p = w.prepacked_data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << GgmlTypeName(type);
    EXPECT_TRUE(tandem::testing::AdvisedHugePages(p)) << GgmlTypeName(type);
    EXPECT_TRUE(tandem::testing::AdvisedHugePages(p + w.prepacked_bytes() - 1));
    // Each small copy right after the one before (this test runs in a
    // process of its own, so the first opened the arena's chunk).
    if (previous != nullptr) {
      EXPECT_EQ(p, previous + (previous_bytes + 63) / 64 * 64) << GgmlTypeName(type);
    }
    previous = p;
    previous_bytes = w.prepacked_bytes();
    kept.push_back(std::move(w));
  }
}

TEST(IsaTest, SetActiveIsaClampsToDetected) {
  IsaGuard guard;
  SetActiveIsa(Isa::kAvx512Amx);
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectIsa()));
  SetActiveIsa(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  EXPECT_STREQ(IsaName(Isa::kAvx2), "avx2");
}

// The decode kernels prefetch into L2 on Intel CPUs and into L1 on others,
// read here from the kernel's own report of the vendor (/proc/cpuinfo).
TEST(StreamPrefetchTest, L2OnIntelL1Elsewhere) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, vendor;
  while (vendor.empty() && std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "vendor_id")) {
      vendor = std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
    }
  }
  if (vendor.empty()) {
    GTEST_SKIP() << "no vendor_id in /proc/cpuinfo";
  }
  EXPECT_EQ(DetectStreamPrefetch(),
            vendor == "GenuineIntel" ? StreamPrefetch::kL2 : StreamPrefetch::kL1)
      << vendor;
  EXPECT_EQ(ActiveStreamPrefetch(), DetectStreamPrefetch());
  SetStreamPrefetch(StreamPrefetch::kL1);
  EXPECT_EQ(ActiveStreamPrefetch(), StreamPrefetch::kL1);
  SetStreamPrefetch(StreamPrefetch::kL2);
  EXPECT_EQ(ActiveStreamPrefetch(), StreamPrefetch::kL2);
  SetStreamPrefetch(DetectStreamPrefetch());
  EXPECT_STREQ(StreamPrefetchName(StreamPrefetch::kL2), "l2");
}

// The pieces a kernel prefetches a chunk's lines in (PrefetchPartSpan): over
// every chunk and piece each 64-byte line of the stream exactly once, for the
// strides and piece counts the kernels use and any alignment of the panel.
template <int64_t kStride, int kParts>
void ExpectPiecesCoverLinesOnce() {
  SCOPED_TRACE(absl::StrCat("stride=", kStride, " parts=", kParts));
  constexpr int64_t kChunks = 40;
  for (int64_t base : {0, 1, 8, 37, 63}) {
    std::vector<int> seen(static_cast<size_t>((base + kChunks * kStride) / 64 + 2), 0);
    for (int64_t c = 0; c < kChunks; ++c) {
      for (int p = 0; p < kParts; ++p) {
        const internal::PrefetchSpan span = internal::PrefetchPartSpan<kStride, kParts>(c, p);
        ASSERT_LE(span.lo, span.hi);
        for (int64_t a = (base + span.lo + 63) / 64 * 64; a < base + span.hi; a += 64) {
          ++seen[static_cast<size_t>(a / 64)];
        }
      }
    }
    const int64_t first = (base + 63) / 64, end = (base + kChunks * kStride + 63) / 64;
    for (int64_t line = 0; line < static_cast<int64_t>(seen.size()); ++line) {
      EXPECT_EQ(seen[static_cast<size_t>(line)], line >= first && line < end ? 1 : 0)
          << "base " << base << " line " << line;
    }
  }
}

TEST(StreamPrefetchTest, PiecesCoverEachLineOnce) {
  ExpectPiecesCoverLinesOnce<144, 2>();  // Q4_0
  ExpectPiecesCoverLinesOnce<272, 4>();  // Q8_0
  ExpectPiecesCoverLinesOnce<160, 2>();  // Q4_1
  ExpectPiecesCoverLinesOnce<176, 2>();  // Q5_0
  ExpectPiecesCoverLinesOnce<192, 2>();  // Q5_1
  constexpr int64_t kQ4K = internal::kQ4KLevelBytes8 + internal::kQ4KFactorBytes8;
  constexpr int64_t kQ5K = internal::kQ5KLevelBytes8 + internal::kQ5KFactorBytes8;
  constexpr int64_t kQ6K = internal::kQ6KLevelBytes8 + internal::kQ6KFactorBytes8;
  ExpectPiecesCoverLinesOnce<kQ4K, 16>();
  ExpectPiecesCoverLinesOnce<kQ5K, 16>();
  ExpectPiecesCoverLinesOnce<kQ6K, 16>();
  ExpectPiecesCoverLinesOnce<kQ6K, 32>();  // the 512-bit kernel
}

// A tile call's `ahead` in `parts` pieces (one per kernel step): every line
// that starts in the range goes out once, in order, and nothing else.
TEST(StreamPrefetchTest, AheadPartsCoverEachLineOnce) {
  alignas(64) static uint8_t bytes[4096];
  for (int64_t offset : {0, 1, 63, 64, 200}) {
    for (int64_t size : {0, 1, 64, 100, 1000, 3000}) {
      for (int64_t parts : {1, 2, 7, 24, 140}) {
        SCOPED_TRACE(absl::StrCat("offset ", offset, " size ", size, " parts ", parts));
        const internal::AheadBytes ahead{bytes + offset, size};
        std::vector<int64_t> lines;
        for (int64_t part = 0; part < parts; ++part) {
          const internal::PrefetchSpan span = internal::AheadPartLines(ahead, part, parts);
          EXPECT_EQ(span.lo % 64, 0);
          for (int64_t a = span.lo; a < span.hi; a += 64) {
            lines.push_back(a - reinterpret_cast<intptr_t>(bytes));
          }
        }
        std::vector<int64_t> want;
        for (int64_t a = (offset + 63) / 64 * 64; a < offset + size; a += 64) {
          want.push_back(a);
        }
        EXPECT_EQ(lines, want);
      }
    }
  }
}

// QuantGemmPanels with a source (at most kAheadMaxTiles activation tiles):
// every tile call's `ahead` lies in the source of the next panel its thread
// packs (the bytes that pack will read), no byte is handed out twice, each
// panel's source is covered whole or not at all (not: the first panel of a
// task), and most are covered; every (tile, panel) runs once with its
// balanced tile size. Past kAheadMaxTiles tiles, or without a source,
// `ahead` stays empty.
TEST(QuantGemmPanelsTest, AheadHandsOutTheNextPackSourceOnce) {
  constexpr int64_t kCols = 64, kPanelRows = 16, kMrMax = 16, kSource = 1000;
  // Past one tile, groups of 2 panels (budget 2 * kPanelBytes), tasks of
  // several groups (101 panels).
  constexpr int64_t kPanelBytes = 100;
  for (int64_t rows : {kPanelRows * 100 + 5, kPanelRows * 3}) {
    for (int64_t m : {1, 16, 17, 40, 64, 65}) {
      for (int threads : {1, 2}) {
        for (bool with_source : {true, false}) {
          SCOPED_TRACE(absl::StrCat("rows=", rows, " m=", m, " threads=", threads,
                                    with_source ? "" : " no source"));
          const int64_t n_panels = (rows + kPanelRows - 1) / kPanelRows;
          const int64_t n_tiles = (m + kMrMax - 1) / kMrMax;
          const bool ahead_expected = with_source && n_tiles <= internal::kAheadMaxTiles;
          // The last panel's source clipped by `end`.
          std::vector<uint8_t> source(n_panels * kSource - 300);
          internal::PanelSource src;
          if (with_source) {
            src = {source.data(), kSource, source.data() + source.size()};
          }
          const internal::WeightView w{GgmlType::kQ4_0, nullptr, rows, kCols, 0};
          internal::ScratchBuffer act_buffer;
          const internal::QuantizedActs xa = internal::AllocQuantizedActs(act_buffer, m, kCols);
          std::vector<float> y(m * rows);
          struct Event {
            int64_t pack_panel;  // -1: a tile call
            int64_t lo, hi;      // its ahead, as offsets into `source`
          };
          std::mutex mu;
          std::map<std::thread::id, std::vector<Event>> log;
          std::vector<int> runs(n_tiles * n_panels, 0);
          base::ThreadPool pool(threads);
          internal::QuantGemmPanels(
              w, xa, m, y.data(), pool, kPanelRows, kPanelBytes, kMrMax, 2 * kPanelBytes,
              [&](int64_t r0, uint8_t* /*out*/) {
                std::lock_guard<std::mutex> lock(mu);
                log[std::this_thread::get_id()].push_back({r0 / kPanelRows, 0, 0});
              },
              [&](int mr, const uint8_t* /*panel*/, const internal::QuantizedActs& xi, float* yt,
                  int nvalid, internal::AheadBytes ahead) {
                std::lock_guard<std::mutex> lock(mu);
                const int64_t off = yt - y.data();
                const int64_t i0 = off / rows, p = off % rows / kPanelRows;
                int64_t t = 0;
                for (int64_t at = 0; at < i0; at += internal::BalancedTile(m, n_tiles, t++)) {
                }
                EXPECT_EQ(mr, internal::BalancedTile(m, n_tiles, t));
                EXPECT_EQ(xi.qs, xa.qs + i0 * kCols);
                EXPECT_EQ(nvalid, std::min<int64_t>(kPanelRows, rows - p * kPanelRows));
                ++runs[t * n_panels + p];
                int64_t lo = 0, hi = 0;
                if (ahead.bytes > 0) {
                  lo = ahead.p - source.data();
                  hi = lo + ahead.bytes;
                }
                log[std::this_thread::get_id()].push_back({-1, lo, hi});
              },
              src);
          EXPECT_THAT(runs, ::testing::Each(1));
          std::vector<int> covered(source.size(), 0);
          for (const auto& [thread, events] : log) {
            for (size_t e = 0; e < events.size(); ++e) {
              if (events[e].pack_panel >= 0 || events[e].hi == events[e].lo) {
                continue;
              }
              ASSERT_TRUE(ahead_expected);
              size_t next = e + 1;
              while (next < events.size() && events[next].pack_panel < 0) {
                ++next;
              }
              ASSERT_LT(next, events.size()) << "an ahead with no pack after it on its thread";
              const int64_t p = events[next].pack_panel;
              EXPECT_GE(events[e].lo, p * kSource);
              EXPECT_LE(events[e].hi,
                        std::min<int64_t>((p + 1) * kSource, static_cast<int64_t>(source.size())));
              for (int64_t b = events[e].lo; b < events[e].hi; ++b) {
                ++covered[b];
              }
            }
          }
          EXPECT_THAT(covered, ::testing::Each(::testing::Le(1)));
          int64_t whole = 0;
          for (int64_t p = 0; p < n_panels; ++p) {
            const auto begin = covered.begin() + p * kSource;
            const auto end = covered.begin() + std::min<int64_t>((p + 1) * kSource, source.size());
            const int64_t n = std::count(begin, end, 1);
            EXPECT_TRUE(n == 0 || n == end - begin) << "panel " << p << ": " << n << " bytes";
            whole += n > 0 ? 1 : 0;
          }
          if (ahead_expected && n_panels > 3) {
            EXPECT_GE(2 * whole, n_panels);
          } else if (!ahead_expected) {
            EXPECT_EQ(whole, 0);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// RmsNorm, SwiGlu, Rope
// ---------------------------------------------------------------------------

class RmsNormTest : public PerIsaTest {};
TANDEM_INSTANTIATE_PER_ISA(RmsNormTest);

TEST_P(RmsNormTest, MatchesDouble) {
  for (int64_t n : {1, 7, 64, 100, 2048}) {
    const uint32_t seed = 300 + static_cast<uint32_t>(n);
    SCOPED_TRACE(absl::StrCat("n=", n, " seed=", seed));
    const int64_t rows = 3;
    std::vector<float> x = RandomFloats(rows * n, seed, 3.0f);
    std::vector<float> weight = RandomFloats(n, seed + 1);
    const float eps = 1e-5f;
    std::vector<float> out(rows * n);
    RmsNorm(x.data(), weight.data(), rows, n, eps, out.data());
    for (int64_t i = 0; i < rows; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) {
        ss += static_cast<double>(x[i * n + j]) * x[i * n + j];
      }
      const double scale = 1.0 / std::sqrt(ss / n + eps);
      for (int64_t j = 0; j < n; ++j) {
        const double want = x[i * n + j] * scale * weight[j];
        // Sum of squares: n*u relative; sqrt, divide and two products a few u.
        const double tol = (n + 8) * kU * std::fabs(want) + 1e-30;
        ASSERT_LE(std::fabs(out[i * n + j] - want), tol) << " j=" << j;
      }
    }
  }
}

// Elementwise for real: an element's result does not depend on its place
// in the buffer (vector body or tail), which holds every token of a step.
class SwiGluTest : public PerIsaTest {};
TANDEM_INSTANTIATE_PER_ISA(SwiGluTest);

TEST_P(SwiGluTest, ElementResultIndependentOfPosition) {
  std::vector<float> gate = RandomFloats(37, 5, 3.0f), up = RandomFloats(37, 6);
  std::vector<float> all(37);
  SwiGlu(gate.data(), up.data(), 37, all.data());
  for (int64_t j = 0; j < 37; ++j) {
    float one;
    SwiGlu(gate.data() + j, up.data() + j, 1, &one);
    ASSERT_EQ(one, all[j]) << "element " << j;
  }
}

TEST_P(SwiGluTest, MatchesDouble) {
  const uint32_t seed = 42;
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::vector<float> gate = RandomFloats(1001, seed, 4.0f);
  std::vector<float> up = RandomFloats(1001, seed + 1);
  gate[0] = -100.0f;
  gate[1] = 100.0f;
  gate[2] = 0.0f;
  gate[3] = -87.0f;
  std::vector<float> out(gate.size());
  SwiGlu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double want = g / (1.0 + std::exp(-g)) * up[i];
    // exp is a polynomial with a few ulp error; the rest is 3 roundings.
    ASSERT_LE(std::fabs(out[i] - want), 16 * kU * std::fabs(want) + 1e-30)
        << "i=" << i << " gate=" << g;
  }
}

TEST(RopeTest, BothStylesMatchDirectFormula) {
  const int n_heads = 3;
  const int head_dim = 16;
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (int rot_dim : {16, 8}) {
      for (int32_t pos : {0, 1, 17, 4095}) {
        const uint32_t seed = 77 + pos + rot_dim;
        SCOPED_TRACE(absl::StrCat("style=", static_cast<int>(style), " rot_dim=", rot_dim,
                                  " pos=", pos, " seed=", seed));
        std::vector<float> inv_freq(rot_dim / 2);
        for (int i = 0; i < rot_dim / 2; ++i) {
          inv_freq[i] = std::pow(10000.0f, -2.0f * i / rot_dim);
        }
        const std::vector<float> x = RandomFloats(n_heads * head_dim, seed);
        std::vector<float> y = x;
        Rope(y.data(), n_heads, head_dim, rot_dim, pos, inv_freq.data(), style);
        for (int h = 0; h < n_heads; ++h) {
          const float* xh = x.data() + h * head_dim;
          const float* yh = y.data() + h * head_dim;
          for (int i = 0; i < rot_dim / 2; ++i) {
            const int a = style == RopeStyle::kNormal ? 2 * i : i;
            const int b = style == RopeStyle::kNormal ? 2 * i + 1 : i + rot_dim / 2;
            const double theta = static_cast<float>(pos) * inv_freq[i];  // fp32 angle, as ggml
            const double want_a = xh[a] * std::cos(theta) - xh[b] * std::sin(theta);
            const double want_b = xh[a] * std::sin(theta) + xh[b] * std::cos(theta);
            // fp32 cos/sin (1 ulp) and 3 roundings per output.
            const double tol = 8 * kU * (std::fabs(xh[a]) + std::fabs(xh[b]));
            EXPECT_LE(std::fabs(yh[a] - want_a), tol) << "h=" << h << " i=" << i;
            EXPECT_LE(std::fabs(yh[b] - want_b), tol) << "h=" << h << " i=" << i;
          }
          for (int d = rot_dim; d < head_dim; ++d) {
            EXPECT_EQ(yh[d], xh[d]) << "dims past rot_dim are untouched";
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// KV writes and paged attention
// ---------------------------------------------------------------------------

TEST(WriteKvTest, RoundTripsF32AndF16) {
  for (GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    PagedKv kv;
    kv.dtype = dtype;
    kv.block_size = 4;
    kv.n_kv_heads = 2;
    kv.head_dim = 8;
    const int64_t elems = 3 * 2 * 4 * 8;
    const int64_t elt = dtype == GgmlType::kF16 ? 2 : 4;
    std::vector<uint8_t> k(elems * elt, 0), v(elems * elt, 0);
    kv.k = k.data();
    kv.v = v.data();
    const std::vector<float> kin = RandomFloats(16, 5);
    const std::vector<float> vin = RandomFloats(16, 6);
    WriteKv(kv, /*block=*/2, /*slot=*/3, kin.data(), vin.data());
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 8; ++d) {
        const int64_t idx = ((2 * 2 + h) * 4 + 3) * 8 + d;
        if (dtype == GgmlType::kF16) {
          EXPECT_EQ(reinterpret_cast<uint16_t*>(k.data())[idx], Fp32ToFp16(kin[h * 8 + d]));
          EXPECT_EQ(reinterpret_cast<uint16_t*>(v.data())[idx], Fp32ToFp16(vin[h * 8 + d]));
        } else {
          EXPECT_EQ(reinterpret_cast<float*>(k.data())[idx], kin[h * 8 + d]);
          EXPECT_EQ(reinterpret_cast<float*>(v.data())[idx], vin[h * 8 + d]);
        }
      }
    }
  }
}

struct AttentionCase {
  GgmlType dtype;
  int n_kv_heads;
  int ratio;  // query heads per KV head
  int head_dim;
  int block_size;
};

// With the active ISA.
void CheckPagedAttention(const AttentionCase& c, uint32_t seed) {
  SCOPED_TRACE(absl::StrCat("dtype=", GgmlTypeName(c.dtype), " kv_heads=", c.n_kv_heads,
                            " ratio=", c.ratio, " head_dim=", c.head_dim, " block=", c.block_size,
                            " seed=", seed));
  std::mt19937 rng(seed);
  const int n_heads = c.n_kv_heads * c.ratio;
  const int hd = c.head_dim;
  // Three sequences of different lengths, blocks from one shuffled pool.
  const std::vector<int> seq_len = {1, 2 * c.block_size + 3, 5 * c.block_size};
  int total_blocks = 0;
  for (int len : seq_len) {
    total_blocks += (len + c.block_size - 1) / c.block_size;
  }
  const int num_blocks = total_blocks + 5;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables;
  int next = 0;
  for (int len : seq_len) {
    std::vector<int32_t> t;
    for (int b = 0; b < (len + c.block_size - 1) / c.block_size; ++b) {
      t.push_back(ids[next++]);
    }
    tables.push_back(t);
  }

  PagedKv kv;
  kv.dtype = c.dtype;
  kv.block_size = c.block_size;
  kv.n_kv_heads = c.n_kv_heads;
  kv.head_dim = hd;
  const int64_t elt = c.dtype == GgmlType::kF16 ? 2 : 4;
  const int64_t pool_elems = int64_t{num_blocks} * c.n_kv_heads * c.block_size * hd;
  std::vector<uint8_t> kpool(pool_elems * elt, 0xFF), vpool(pool_elems * elt, 0xFF);  // NaN fill
  kv.k = kpool.data();
  kv.v = vpool.data();
  // Contiguous copies of what the pool holds, for the naive reference.
  std::vector<std::vector<float>> kseq(seq_len.size()), vseq(seq_len.size());
  for (size_t s = 0; s < seq_len.size(); ++s) {
    for (int p = 0; p < seq_len[s]; ++p) {
      std::vector<float> k = RandomFloats(c.n_kv_heads * hd, rng());
      std::vector<float> v = RandomFloats(c.n_kv_heads * hd, rng());
      WriteKv(kv, tables[s][p / c.block_size], p % c.block_size, k.data(), v.data());
      for (int j = 0; j < c.n_kv_heads * hd; ++j) {
        if (c.dtype == GgmlType::kF16) {
          k[j] = Fp16ToFp32(Fp32ToFp16(k[j]));
          v[j] = Fp16ToFp32(Fp32ToFp16(v[j]));
        }
      }
      kseq[s].insert(kseq[s].end(), k.begin(), k.end());
      vseq[s].insert(vseq[s].end(), v.begin(), v.end());
    }
  }
  // Query tokens: every position of every sequence (a prefill chunk mixed with
  // decode tokens), in interleaved order.
  std::vector<int32_t> positions;
  std::vector<const int32_t*> token_tables;
  std::vector<int> token_seq;
  for (int p = 0; p < seq_len.back(); ++p) {
    for (size_t s = 0; s < seq_len.size(); ++s) {
      if (p < seq_len[s]) {
        positions.push_back(p);
        token_tables.push_back(tables[s].data());
        token_seq.push_back(static_cast<int>(s));
      }
    }
  }
  const int64_t n_tokens = static_cast<int64_t>(positions.size());
  const std::vector<float> q = RandomFloats(n_tokens * n_heads * hd, rng(), 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Naive: full softmax in double over the gathered contiguous KV.
  std::vector<double> want(n_tokens * n_heads * hd);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int s = token_seq[t];
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / c.ratio;
      const float* qh = q.data() + (t * n_heads + h) * hd;
      std::vector<double> score(positions[t] + 1);
      double mx = -1e300;
      for (int p = 0; p <= positions[t]; ++p) {
        const float* kp = kseq[s].data() + (int64_t{p} * c.n_kv_heads + kvh) * hd;
        double dot = 0;
        for (int d = 0; d < hd; ++d) {
          dot += static_cast<double>(qh[d]) * kp[d];
        }
        score[p] = dot * scale;
        mx = std::max(mx, score[p]);
      }
      double denom = 0;
      for (double& sc : score) {
        sc = std::exp(sc - mx);
        denom += sc;
      }
      for (int d = 0; d < hd; ++d) {
        double o = 0;
        for (int p = 0; p <= positions[t]; ++p) {
          o += score[p] * vseq[s][(int64_t{p} * c.n_kv_heads + kvh) * hd + d];
        }
        want[(t * n_heads + h) * hd + d] = o / denom;
      }
    }
  }
  base::ThreadPool pool(3);
  std::vector<float> out(n_tokens * n_heads * hd, -7.0f);
  PagedAttention(q.data(), n_tokens, positions.data(), token_tables.data(), kv, n_heads, scale,
                 out.data(), pool);
  for (int64_t j = 0; j < n_tokens * n_heads * hd; ++j) {
    // Outputs are convex combinations of V entries (|v| < ~5 here). A score
    // carries at most hd*u*sum|q k| ~ 1e-5 absolute error, the polynomial
    // exp a few ulp and the running rescales a few more, so each weight is
    // off by ~2e-5 relative: 1e-4 absolute leaves margin without hiding a
    // wrong key (which shifts outputs by ~0.1).
    ASSERT_NEAR(out[j], want[j], 1e-4)
        << "token " << j / (n_heads * hd) << " pos " << positions[j / (n_heads * hd)] << " head "
        << (j / hd) % n_heads << " dim " << j % hd;
  }
  if (c.ratio == 1) {
    return;
  }
  // A query head's result does not depend on how many heads share its KV
  // head (the GQA paths share loads and conversions between the heads of a
  // group, never an operation of one head's sums): the same cache with every
  // KV head repeated `ratio` times (plain multi-head attention) gives the
  // same bits.
  PagedKv mha = kv;
  mha.n_kv_heads = n_heads;
  const int64_t mha_elems = int64_t{num_blocks} * n_heads * c.block_size * hd;
  std::vector<uint8_t> kpool2(mha_elems * elt, 0xFF), vpool2(mha_elems * elt, 0xFF);
  mha.k = kpool2.data();
  mha.v = vpool2.data();
  for (size_t sq = 0; sq < seq_len.size(); ++sq) {
    for (int p = 0; p < seq_len[sq]; ++p) {
      std::vector<float> k(n_heads * hd), v(n_heads * hd);
      for (int h = 0; h < n_heads; ++h) {
        const int64_t from = (int64_t{p} * c.n_kv_heads + h / c.ratio) * hd;
        std::copy(kseq[sq].begin() + from, kseq[sq].begin() + from + hd, k.begin() + h * hd);
        std::copy(vseq[sq].begin() + from, vseq[sq].begin() + from + hd, v.begin() + h * hd);
      }
      WriteKv(mha, tables[sq][p / c.block_size], p % c.block_size, k.data(), v.data());
    }
  }
  std::vector<float> out_mha(out.size(), -8.0f);
  PagedAttention(q.data(), n_tokens, positions.data(), token_tables.data(), mha, n_heads, scale,
                 out_mha.data(), pool);
  ASSERT_EQ(out, out_mha) << "GQA (group " << c.ratio << ") and the same heads as MHA differ";
}

class PagedAttentionTest : public PerIsaTest {};
TANDEM_INSTANTIATE_PER_ISA(PagedAttentionTest);

TEST_P(PagedAttentionTest, MatchesNaiveSoftmax) {
  uint32_t seed = 9000;
  for (GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    for (int ratio : {1, 2, 3, 4, 7}) {
      CheckPagedAttention({dtype, 2, ratio, 64, 16}, ++seed);
    }
    CheckPagedAttention({dtype, 2, 6, 128, 16}, ++seed);  // Qwen2.5-1.5B's heads (8 zmm each)
    CheckPagedAttention({dtype, 1, 2, 20, 16}, ++seed);  // head_dim not a multiple of 8
    CheckPagedAttention({dtype, 2, 2, 32, 8}, ++seed);   // other block size
    CheckPagedAttention({dtype, 1, 1, 16, 80}, ++seed);  // block larger than one chunk
  }
}

}  // namespace
}  // namespace tandem::engine
