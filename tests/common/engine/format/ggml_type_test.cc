// Tests for common/engine/format/ggml_type.h: type traits, fp16/bf16, Q8_0/Q4_0
// rows.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/format/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/engine/format/gguf_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine::testing {
namespace {

using ::tandem::testing::RequireTestDataFile;

uint32_t F32Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float BitsF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------
// ggml types

TEST(GgmlTypeTest, Traits) {
  EXPECT_EQ(GgmlBlockSize(GgmlType::kF32), 1);
  EXPECT_EQ(GgmlBlockSize(GgmlType::kQ4_0), 32);
  EXPECT_EQ(GgmlBlockSize(GgmlType::kQ8_0), 32);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kF32), 4);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kF16), 2);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kBF16), 2);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kQ4_0), 18);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kQ8_0), 34);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ4_0, 64), 36);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ8_0, 96), 102);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kBF16, 7), 14);
  EXPECT_EQ(GgmlTypeName(GgmlType::kQ8_0), "Q8_0");
  EXPECT_EQ(GgmlTypeName(GgmlType::kBF16), "BF16");
}

TEST(GgmlTypeTest, IdsAndNames) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ4_0, GgmlType::kQ4_1,
                     GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                     GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kBF16}) {
    EXPECT_THAT(GgmlTypeFromId(static_cast<uint32_t>(t)), ::tandem::testing::IsOk());
    EXPECT_EQ(*GgmlTypeFromId(static_cast<uint32_t>(t)), t);
    EXPECT_EQ(*GgmlTypeFromName(GgmlTypeName(t)), t);
  }
  EXPECT_EQ(*GgmlTypeFromName("q4_0"), GgmlType::kQ4_0);
  EXPECT_EQ(*GgmlTypeFromName("f16"), GgmlType::kF16);
  EXPECT_EQ(*GgmlTypeFromName("bf16"), GgmlType::kBF16);
  EXPECT_THAT(GgmlTypeFromId(99), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("99")));
  EXPECT_EQ(*GgmlTypeFromId(12), GgmlType::kQ4_K);
  EXPECT_EQ(*GgmlTypeFromName("q6_k"), GgmlType::kQ6_K);
  // Types of the format Tandem does not compute with (Q8_1, Q2_K, Q3_K, IQ*).
  for (uint32_t id : {4u, 5u, 9u, 10u, 11u, 15u, 16u}) {
    EXPECT_THAT(GgmlTypeFromId(id),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(absl::StrCat("type id ", id)), HasSubstr("12 Q4_K"))));
  }
  EXPECT_THAT(GgmlTypeFromName("Q3_K"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Q3_K")));
}

// Block layouts are ggml's (ggml-common.h): sizes and elements per block.
TEST(GgmlTypeTest, NewBlockLayouts) {
  struct Want {
    GgmlType type;
    int64_t block;
    int64_t bytes;
  };
  for (const Want& w : {Want{GgmlType::kQ4_1, 32, 20}, Want{GgmlType::kQ5_0, 32, 22},
                        Want{GgmlType::kQ5_1, 32, 24}, Want{GgmlType::kQ4_K, 256, 144},
                        Want{GgmlType::kQ5_K, 256, 176}, Want{GgmlType::kQ6_K, 256, 210}}) {
    EXPECT_EQ(GgmlBlockSize(w.type), w.block) << GgmlTypeName(w.type);
    EXPECT_EQ(GgmlTypeSize(w.type), w.bytes) << GgmlTypeName(w.type);
    EXPECT_EQ(GgmlRowBytes(w.type, 3 * w.block), 3 * w.bytes) << GgmlTypeName(w.type);
  }
}

// ---------------------------------------------------------------------------
// fp16 / bf16

TEST(Fp16Test, SpecialValues) {
  EXPECT_EQ(Fp32ToFp16(0.0f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xC000);
  EXPECT_EQ(Fp32ToFp16(0.5f), 0x3800);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);    // largest half
  EXPECT_EQ(Fp32ToFp16(65519.996f), 0x7BFF);  // just below the midpoint to 2^16
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);    // midpoint, 0x7BFF is odd: rounds up to inf
  EXPECT_EQ(Fp32ToFp16(1e10f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-1e10f), 0xFC00);
  EXPECT_EQ(Fp32ToFp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = Fp32ToFp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(Fp32ToFp16(BitsF32(0x7F800001)) & 0x03FF, 0);  // signalling NaN stays a NaN
  // Round to nearest even at 1.0 (half ulp = 2^-11).
  EXPECT_EQ(Fp32ToFp16(1.0f + 0x1p-11f), 0x3C00);             // tie, even stays
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * 0x1p-11f), 0x3C02);         // tie, odd rounds up
  EXPECT_EQ(Fp32ToFp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // above the tie
  // Subnormals: multiples of 2^-24.
  EXPECT_EQ(Fp32ToFp16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(Fp32ToFp16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(0x1p-25f), 0x0000);  // tie between 0 and 1: even
  EXPECT_EQ(Fp32ToFp16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(Fp32ToFp16(3 * 0x1p-25f), 0x0002);  // 1.5 ulp: tie, rounds to even 2
  EXPECT_EQ(Fp32ToFp16(-5 * 0x1p-24f), 0x8005);
  EXPECT_EQ(Fp32ToFp16(0x1p-14f - 0x1p-25f), 0x0400);  // tie at 1023.5 ulp rounds to the normal
  EXPECT_EQ(Fp32ToFp16(1e-40f), 0x0000);               // fp32 subnormal

  EXPECT_EQ(Fp16ToFp32(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), 0x1p-24f);
  EXPECT_EQ(Fp16ToFp32(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(Fp16ToFp32(0x8400), -0x1p-14f);
  EXPECT_EQ(Fp16ToFp32(0x3555), 0.333251953125f);
  EXPECT_EQ(F32Bits(Fp16ToFp32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(Fp16ToFp32(0x7C00)) && Fp16ToFp32(0x7C00) > 0);
  EXPECT_TRUE(std::isinf(Fp16ToFp32(0xFC00)) && Fp16ToFp32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7E00)));
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7C01)));
}

TEST(Fp16Test, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = Fp32ToFp16(f);
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
      ASSERT_TRUE((back & 0x7C00) == 0x7C00 && (back & 0x3FF) != 0) << std::hex << h;
      continue;
    }
    ASSERT_EQ(Fp32ToFp16(f), h) << std::hex << h;
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareFp16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

// CPUID leaf 1, ECX bit 29. (clang 14's __builtin_cpu_supports has no "f16c".)
bool CpuHasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

TEST(Fp16Test, MatchesF16cHardwareConversion) {
  if (!CpuHasF16c()) {
    GTEST_SKIP() << "no F16C on this CPU";
  }
  const uint32_t seed = 20240611;
  std::mt19937 rng(seed);
  // Random bit patterns with exponents around the half range, plus every
  // midpoint between adjacent halves and its neighbours.
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = rng();
    const uint32_t exp = 95 + rng() % 60;  // 2^-32 .. 2^27
    bits = (bits & 0x807FFFFF) | (exp << 23);
    const float f = BitsF32(bits);
    ASSERT_EQ(Fp32ToFp16(f), HardwareFp16(f)) << "seed " << seed << " bits " << std::hex << bits;
  }
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float lo = Fp16ToFp32(static_cast<uint16_t>(h));
    const float hi = Fp16ToFp32(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact in fp32
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid}) {
      ASSERT_EQ(Fp32ToFp16(f), HardwareFp16(f)) << std::hex << h << " " << F32Bits(f);
    }
  }
  for (float f : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  BitsF32(0x7FC12345), BitsF32(0xFF800001)}) {
    EXPECT_EQ(Fp32ToFp16(f), HardwareFp16(f)) << std::hex << F32Bits(f);
  }
}
#endif

TEST(Bf16Test, SpecialValues) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Fp32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToBf16(1.0f + 0x1p-8f), 0x3F80);             // tie, even stays
  EXPECT_EQ(Fp32ToBf16(1.0f + 3 * 0x1p-8f), 0x3F82);         // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);  // above the tie
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Fp32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(Fp32ToBf16(BitsF32(0x7F800001)), 0x7FC0);  // signalling NaN: quieted, not inf
  EXPECT_EQ(Fp32ToBf16(BitsF32(0x00012345)), 0x0001);  // subnormals kept, not flushed
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFp32(0xC040), -3.0f);
  EXPECT_TRUE(std::isnan(Bf16ToFp32(0x7FC0)));
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    if ((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0) {
      continue;  // NaN
    }
    ASSERT_EQ(Fp32ToBf16(Bf16ToFp32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

// ---------------------------------------------------------------------------
// Q8_0 / Q4_0

BlockQ8_0 QuantizeQ8Block(const std::vector<float>& x) {
  BlockQ8_0 b;
  QuantizeRow(GgmlType::kQ8_0, x.data(), &b, kQK8_0);
  return b;
}

BlockQ4_0 QuantizeQ4Block(const std::vector<float>& x) {
  BlockQ4_0 b;
  QuantizeRow(GgmlType::kQ4_0, x.data(), &b, kQK4_0);
  return b;
}

TEST(QuantizeTest, Q8_0HandComputedBlocks) {
  // amax 127 -> d = 127/127 = 1 (fp16 0x3C00), id = 1, q = roundf(x): halves
  // round away from zero.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) {
    x[j] = static_cast<float>(j - 16);
  }
  x[0] = 127.0f;
  x[1] = -126.5f;  // -> -127
  x[2] = 2.5f;     // -> 3
  x[3] = -2.5f;    // -> -3
  x[4] = 0.4999f;  // -> 0
  x[5] = 1.5f;     // -> 2
  x[6] = -0.5f;    // -> -1
  BlockQ8_0 b = QuantizeQ8Block(x);
  EXPECT_EQ(b.d, 0x3C00);
  std::vector<int> q(b.qs, b.qs + 32);
  std::vector<int> want = {127, -127, 3, -3, 0, 2, -1};
  for (int j = 7; j < 32; ++j) {
    want.push_back(j - 16);
  }
  EXPECT_EQ(q, want);

  // amax 63.5 -> d = 0.5 (fp16 0x3800), id = 2, q = roundf(2x).
  std::vector<float> y(32, 0.0f);
  y[0] = 0.25f;   // 0.5 -> 1
  y[1] = -0.75f;  // -1.5 -> -2
  y[2] = 63.5f;   // 127
  y[3] = -63.5f;  // -127
  y[4] = 10.2f;   // 20.4 -> 20
  y[31] = -0.2f;  // -0.4 -> 0
  b = QuantizeQ8Block(y);
  EXPECT_EQ(b.d, 0x3800);
  EXPECT_EQ(b.qs[0], 1);
  EXPECT_EQ(b.qs[1], -2);
  EXPECT_EQ(b.qs[2], 127);
  EXPECT_EQ(b.qs[3], -127);
  EXPECT_EQ(b.qs[4], 20);
  EXPECT_EQ(b.qs[5], 0);
  EXPECT_EQ(b.qs[31], 0);
  float out[32];
  DequantizeRow(GgmlType::kQ8_0, &b, out, 32);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[2], 63.5f);
  EXPECT_EQ(out[4], 10.0f);

  // All zeros: d = 0 (amax 0), id = 0, every q 0.
  b = QuantizeQ8Block(std::vector<float>(32, 0.0f));
  EXPECT_EQ(b.d, 0x0000);
  EXPECT_THAT(std::vector<int>(b.qs, b.qs + 32), ::testing::Each(0));
}

TEST(QuantizeTest, Q4_0HandComputedBlocks) {
  // The first value of largest magnitude is -8 -> max = -8, d = max / -8 = 1
  // (fp16 0x3C00), id = 1, q = min(15, trunc(x + 8.5)).
  std::vector<float> x(32, 0.0f);  // 0 -> trunc(8.5) = 8
  x[0] = -8.0f;                    // 0.5 -> 0
  x[1] = 7.0f;                     // 15.5 -> 15
  x[2] = 7.4f;                     // 15.9 -> 15
  x[3] = 8.0f;                     // |8| ties the max but comes later: 16.5 -> 16 -> clamped to 15
  x[4] = 0.5f;                     // 9.0 -> 9
  x[5] = 0.49f;                    // 8.99 -> 8
  x[6] = -0.5f;                    // 8.0 -> 8
  x[7] = -0.51f;                   // 7.99 -> 7
  x[8] = -7.6f;                    // 0.9 -> 0
  x[16] = -3.0f;                   // 5.5 -> 5 (high nibble of qs[0])
  x[17] = 3.0f;                    // 11.5 -> 11
  x[31] = -1.0f;                   // 7.5 -> 7
  BlockQ4_0 b = QuantizeQ4Block(x);
  EXPECT_EQ(b.d, 0x3C00);
  // qs[j] = q[j] | q[j + 16] << 4; q[18..30] = 8.
  EXPECT_EQ(b.qs[0], 0x50);  // q0 = 0, q16 = 5
  EXPECT_EQ(b.qs[1], 0xBF);  // q1 = 15, q17 = 11
  EXPECT_EQ(b.qs[2], 0x8F);
  EXPECT_EQ(b.qs[3], 0x8F);
  EXPECT_EQ(b.qs[4], 0x89);
  EXPECT_EQ(b.qs[5], 0x88);
  EXPECT_EQ(b.qs[6], 0x88);
  EXPECT_EQ(b.qs[7], 0x87);
  EXPECT_EQ(b.qs[8], 0x80);
  EXPECT_EQ(b.qs[9], 0x88);
  EXPECT_EQ(b.qs[15], 0x78);  // q15 = 8, q31 = 7
  float out[32];
  DequantizeRow(GgmlType::kQ4_0, &b, out, 32);
  EXPECT_EQ(out[0], -8.0f);
  EXPECT_EQ(out[3], 7.0f);  // the clamped value: error 1 = d
  EXPECT_EQ(out[4], 1.0f);
  EXPECT_EQ(out[16], -3.0f);
  EXPECT_EQ(out[31], -1.0f);

  // Positive max 16 at index 3 -> d = -2 (fp16 0xC000), id = -0.5.
  std::vector<float> y(32, 0.0f);  // 0 -> 8
  y[3] = 16.0f;                    // -8 + 8.5 = 0.5 -> 0, dequant (0 - 8) * -2 = 16
  y[0] = -16.0f;                   // later? no: earlier, but |-16| == 16 and index 0 comes first
  b = QuantizeQ4Block(y);
  // index 0 (-16) is the first of largest magnitude: max = -16, d = 2, id = 0.5.
  EXPECT_EQ(b.d, 0x4000);
  EXPECT_EQ(b.qs[0] & 0x0F, 0);   // -16 * 0.5 + 8.5 = 0.5 -> 0
  EXPECT_EQ(b.qs[3] & 0x0F, 15);  // 16 * 0.5 + 8.5 = 16.5 -> 16 -> 15
  y[0] = 1.0f;                    // now 16 at index 3 is the max
  y[1] = -15.5f;                  // 7.75 + 8.5 = 16.25 -> 16 -> 15: dequant (15 - 8) * -2 = -14
  y[2] = 3.0f;                    // -1.5 + 8.5 = 7: dequant 2
  y[4] = 0.9f;                    // -0.45 + 8.5 = 8.05 -> 8
  b = QuantizeQ4Block(y);
  EXPECT_EQ(b.d, 0xC000);
  EXPECT_EQ(b.qs[0], 0x88);  // 1 * -0.5 + 8.5 = 8 -> 8
  EXPECT_EQ(b.qs[1], 0x8F);
  EXPECT_EQ(b.qs[2], 0x87);
  EXPECT_EQ(b.qs[3], 0x80);
  EXPECT_EQ(b.qs[4], 0x88);
  DequantizeRow(GgmlType::kQ4_0, &b, out, 32);
  EXPECT_EQ(out[3], 16.0f);
  EXPECT_EQ(out[1], -14.0f);
  EXPECT_EQ(out[2], 2.0f);

  // All zeros: ggml starts from max = +0, so d = 0 / -8 = -0 (fp16 0x8000);
  // every q = trunc(0 + 8.5) = 8.
  b = QuantizeQ4Block(std::vector<float>(32, 0.0f));
  EXPECT_EQ(b.d, 0x8000);
  EXPECT_THAT(std::vector<int>(b.qs, b.qs + 16), ::testing::Each(0x88));
}

// A random row of 64 blocks at `scale` (x), quantized to `type` (q) and back (y).
template <typename Block>
struct QuantizedRow {
  std::vector<float> x;
  std::vector<Block> q;
  std::vector<float> y;
};

template <typename Block>
QuantizedRow<Block> RandomQuantizedRow(GgmlType type, std::mt19937& rng, float scale) {
  const int64_t n = 32 * 64;
  QuantizedRow<Block> row{RandomRow(rng, n, scale), std::vector<Block>(n / 32),
                          std::vector<float>(n)};
  QuantizeRow(type, row.x.data(), row.q.data(), n);
  DequantizeRow(type, row.q.data(), row.y.data(), n);
  return row;
}

// Q8_0: q = round(x / d) with d = amax / 127, so |x - q d| <= d / 2; the
// stored scale is fp16(d), which adds |q| |d - fp16(d)| <= 127 |d - fp16(d)|.
TEST(QuantizeTest, Q8_0ErrorBound) {
  const uint32_t seed = 1234;
  std::mt19937 rng(seed);
  for (float scale : {1e-4f, 0.02f, 1.0f, 300.0f}) {
    const auto [x, q, y] = RandomQuantizedRow<BlockQ8_0>(GgmlType::kQ8_0, rng, scale);
    for (size_t b = 0; b < q.size(); ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) {
        amax = std::max(amax, std::fabs(x[b * 32 + j]));
      }
      const float d = amax / 127;
      ASSERT_EQ(q[b].d, Fp32ToFp16(d));
      const float d16 = Fp16ToFp32(q[b].d);
      const float bound = d / 2 + 127 * std::fabs(d - d16) + 1e-6f * amax;
      for (int j = 0; j < 32; ++j) {
        ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound)
            << "seed " << seed << " scale " << scale << " block " << b << " j " << j;
      }
    }
  }
}

// Q4_0: t = x / d with d = max / -8 lies in [-8, 8]; q - 8 = floor(t + 0.5)
// clamped to 7, so |x - (q - 8) d| <= |d| / 2 when t < 7.5 and <= |d| when the
// clamp applies (x opposite in sign to max and |x| >= 15/16 amax); plus
// |q - 8| |d - fp16(d)| <= 8 |d - fp16(d)| for the fp16 scale.
TEST(QuantizeTest, Q4_0ErrorBound) {
  const uint32_t seed = 99;
  std::mt19937 rng(seed);
  int clamped = 0;
  for (float scale : {1e-4f, 0.02f, 1.0f, 300.0f}) {
    const auto [x, q, y] = RandomQuantizedRow<BlockQ4_0>(GgmlType::kQ4_0, rng, scale);
    for (size_t b = 0; b < q.size(); ++b) {
      float amax = 0;
      float max = 0;
      for (int j = 0; j < 32; ++j) {
        if (amax < std::fabs(x[b * 32 + j])) {
          amax = std::fabs(x[b * 32 + j]);
          max = x[b * 32 + j];
        }
      }
      const float d = max / -8;
      ASSERT_EQ(q[b].d, Fp32ToFp16(d));
      const float d16 = Fp16ToFp32(q[b].d);
      const float slack = 8 * std::fabs(d - d16) + 1e-6f * amax;
      for (int j = 0; j < 32; ++j) {
        const float t = x[b * 32 + j] / d;
        const bool clamp = t >= 7.5f;
        clamped += clamp;
        const float bound = (clamp ? std::fabs(d) : std::fabs(d) / 2) + slack;
        ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound)
            << "seed " << seed << " scale " << scale << " block " << b << " j " << j;
      }
    }
  }
  EXPECT_GT(clamped, 0);  // the data did exercise the clamp
}

TEST(QuantizeTest, FloatTypesConvertPerElement) {
  std::mt19937 rng(5);
  std::vector<float> x = RandomRow(rng, 100, 3.0f);
  x[0] = 1e-6f;
  x[1] = 70000.0f;
  std::vector<uint16_t> h(100);
  std::vector<float> y(100);
  QuantizeRow(GgmlType::kF16, x.data(), h.data(), 100);
  DequantizeRow(GgmlType::kF16, h.data(), y.data(), 100);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(h[i], Fp32ToFp16(x[i]));
    ASSERT_EQ(y[i], Fp16ToFp32(h[i]));
  }
  QuantizeRow(GgmlType::kBF16, x.data(), h.data(), 100);
  DequantizeRow(GgmlType::kBF16, h.data(), y.data(), 100);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(h[i], Fp32ToBf16(x[i]));
    ASSERT_EQ(y[i], Bf16ToFp32(h[i]));
  }
  std::vector<float> f(100);
  QuantizeRow(GgmlType::kF32, x.data(), f.data(), 100);
  DequantizeRow(GgmlType::kF32, f.data(), y.data(), 100);
  EXPECT_EQ(y, x);
}

// Where ggml's casts are undefined (inf, NaN, fp32 subnormal blocks whose
// inverse scale overflows) we must still be defined (UBSan build).
TEST(QuantizeTest, NonFiniteInputsAreDefined) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::vector<float> x :
       {std::vector<float>(32, nan), std::vector<float>(32, inf), std::vector<float>(32, 1e-40f),
        std::vector<float>{inf, -inf, nan, 1.0f, 3e38f, -3e38f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                           0,   0,    0,   0,    0,     0,      0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}) {
    BlockQ8_0 b8 = QuantizeQ8Block(x);
    BlockQ4_0 b4 = QuantizeQ4Block(x);
    float y[32];
    DequantizeRow(GgmlType::kQ8_0, &b8, y, 32);
    DequantizeRow(GgmlType::kQ4_0, &b4, y, 32);
  }
}

// K-quants (ggml's *_K_ref, no imatrix). There is no independent quantizer to
// compare with (gguf-py only dequantizes K-quants), so these check what the
// format guarantees: round trips through our bit-exact dequantizer land
// within the error the bits allow, ordered by bits per weight as in ggml
// (relative RMS errors measured on this N(0, 1) data: Q4_0 0.0869, Q4_K
// 0.0714, Q5_K 0.0362, Q6_K 0.0178; the bounds leave ~10 %), and degenerate
// blocks come back exactly or within a level.
TEST(QuantizeTest, KQuantRoundTripErrors) {
  std::mt19937 rng(4242);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 64 * kQK_K;
  std::vector<float> x(n);
  for (float& v : x) {
    v = normal(rng);
  }
  auto rel_rms = [&](GgmlType type) {
    std::vector<uint8_t> q(GgmlRowBytes(type, n));
    std::vector<float> y(n);
    QuantizeRow(type, x.data(), q.data(), n);
    DequantizeRow(type, q.data(), y.data(), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
      ref += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(err / ref);
  };
  const double q4_0 = rel_rms(GgmlType::kQ4_0);
  const double q4_k = rel_rms(GgmlType::kQ4_K);
  const double q5_k = rel_rms(GgmlType::kQ5_K);
  const double q6_k = rel_rms(GgmlType::kQ6_K);
  EXPECT_LT(q4_k, 0.078);
  EXPECT_LT(q5_k, 0.040);
  EXPECT_LT(q6_k, 0.020);
  EXPECT_LT(q4_k, q4_0);
  EXPECT_LT(q5_k, 0.55 * q4_k);
  EXPECT_LT(q6_k, 0.55 * q5_k);
}

TEST(QuantizeTest, KQuantDegenerateBlocks) {
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(GgmlTypeName(type));
    // All zero: zero bytes' values back exactly.
    std::vector<float> x(kQK_K, 0.0f), y(kQK_K, 1.0f);
    std::vector<uint8_t> q(GgmlTypeSize(type), 0xAB);
    QuantizeRow(type, x.data(), q.data(), kQK_K);
    DequantizeRow(type, q.data(), y.data(), kQK_K);
    EXPECT_EQ(y, x);
    // One sub-block of constant 1 among zeros: within a level of the block.
    for (int l = 0; l < 32; ++l) {
      x[96 + l] = 1.0f;
    }
    QuantizeRow(type, x.data(), q.data(), kQK_K);
    DequantizeRow(type, q.data(), y.data(), kQK_K);
    for (int i = 0; i < kQK_K; ++i) {
      EXPECT_NEAR(y[i], x[i], 1.0 / 30) << "element " << i;
    }
  }
}

// ---------------------------------------------------------------------------
// Golden data from gguf-py (tests/reference/make_quant_golden.py)

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Dequantization is a defined fp32 computation (an fp16 scale times a small
// integer, at most one more product and one subtraction, each rounded once,
// in the same order as ggml and gguf-py), so it must match bit for bit.
TEST(GoldenQuantTest, DequantizeMatchesGgufPy) {
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                        GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::string name(GgmlTypeName(type));
    SCOPED_TRACE(name);
    const std::vector<uint8_t> blocks =
        ReadBytes(RequireTestDataFile(absl::StrCat("quants/", name, ".bin")));
    ASSERT_OK_AND_ASSIGN(NpyArray want,
                         ReadNpy(RequireTestDataFile(absl::StrCat("quants/", name, ".npy"))));
    ASSERT_EQ(want.shape.size(), 2u);
    const int64_t rows = want.shape[0];
    const int64_t cols = want.shape[1];
    ASSERT_EQ(static_cast<int64_t>(blocks.size()), rows * GgmlRowBytes(type, cols));
    std::vector<float> got(cols);
    int64_t compared = 0;
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(type, blocks.data() + r * GgmlRowBytes(type, cols), got.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(F32Bits(got[c]), F32Bits(want.data[r * cols + c]))
            << "row " << r << " col " << c << ": got " << got[c] << " want "
            << want.data[r * cols + c];
        ++compared;
      }
    }
    EXPECT_EQ(compared, 1024);
  }
}

// QuantizeRow rounds as ggml's quantize_row_*_ref (= gguf-py's quantizers).
TEST(GoldenQuantTest, QuantizeMatchesGgufPy) {
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    const std::string name(GgmlTypeName(type));
    SCOPED_TRACE(name);
    ASSERT_OK_AND_ASSIGN(
        NpyArray in, ReadNpy(RequireTestDataFile(absl::StrCat("quants/", name, ".quant_in.npy"))));
    const std::vector<uint8_t> want =
        ReadBytes(RequireTestDataFile(absl::StrCat("quants/", name, ".quant_out.bin")));
    const int64_t n = static_cast<int64_t>(in.data.size());
    ASSERT_EQ(static_cast<int64_t>(want.size()), GgmlRowBytes(type, n));
    std::vector<uint8_t> got(want.size());
    QuantizeRow(type, in.data.data(), got.data(), n);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "byte " << i << " (block " << i / GgmlTypeSize(type) << ")";
    }
  }
}

}  // namespace
}  // namespace tandem::engine::testing
