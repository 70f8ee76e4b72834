// Tests for common/engine/format/ggml_type.h (type traits, fp16/bf16, Q8_0/Q4_0) and
// common/engine/format/gguf.h (reader, writer, quantizer).
//
// The bad-input tests and the mutation fuzz loop are meant to run under
// AddressSanitizer too (-DTANDEM_ASAN=ON): FromBuffer copies into an exactly
// sized buffer, so any read past the image is reported.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/format/gguf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::RequireSharedFile;
using ::tandem::testing::StatusIs;
using ::tandem::testing::TempDir;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kStories[] = "models/stories260K/stories260K.gguf";
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

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

// Hand-assembled GGUF images for the hostile-input tests.
class Raw {
 public:
  Raw& U8(uint8_t v) { return Put(v); }
  Raw& U32(uint32_t v) { return Put(v); }
  Raw& U64(uint64_t v) { return Put(v); }
  Raw& F32(float v) { return Put(v); }
  Raw& Str(const std::string& s) {
    U64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  Raw& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bytes_.insert(bytes_.end(), {'G', 'G', 'U', 'F'});
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  Raw& KvU32(const std::string& key, uint32_t v) {
    return Str(key).U32(static_cast<uint32_t>(GgufValueType::kUint32)).U32(v);
  }
  Raw& TensorInfo(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                  uint64_t offset) {
    Str(name).U32(dims.size());
    for (uint64_t d : dims) {
      U64(d);
    }
    return U32(type).U64(offset);
  }
  Raw& PadTo(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Raw& Zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  template <typename T>
  Raw& Put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromBuffer(bytes);
}

// One F32 tensor of n floats at offset 0 after a header with the given kvs.
std::vector<uint8_t> OneTensorFile(const std::string& name, const std::vector<uint64_t>& dims,
                                   uint32_t type, uint64_t offset, size_t data_bytes) {
  Raw r;
  r.Header(3, 1, 0).TensorInfo(name, dims, type, offset).PadTo(32).Zeros(data_bytes);
  return r.bytes();
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
  for (GgmlType t :
       {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kBF16}) {
    EXPECT_THAT(GgmlTypeFromId(static_cast<uint32_t>(t)), ::tandem::testing::IsOk());
    EXPECT_EQ(*GgmlTypeFromId(static_cast<uint32_t>(t)), t);
    EXPECT_EQ(*GgmlTypeFromName(GgmlTypeName(t)), t);
  }
  EXPECT_EQ(*GgmlTypeFromName("q4_0"), GgmlType::kQ4_0);
  EXPECT_EQ(*GgmlTypeFromName("f16"), GgmlType::kF16);
  EXPECT_EQ(*GgmlTypeFromName("bf16"), GgmlType::kBF16);
  EXPECT_THAT(GgmlTypeFromId(99), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("99")));
  EXPECT_THAT(GgmlTypeFromId(3), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3")));
  EXPECT_THAT(GgmlTypeFromName("Q5_K"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Q5_K")));
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

std::vector<float> RandomRow(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) {
    v = normal(rng);
  }
  return x;
}

// Q8_0: q = round(x / d) with d = amax / 127, so |x - q d| <= d / 2; the
// stored scale is fp16(d), which adds |q| |d - fp16(d)| <= 127 |d - fp16(d)|.
TEST(QuantizeTest, Q8_0ErrorBound) {
  const uint32_t seed = 1234;
  std::mt19937 rng(seed);
  for (float scale : {1e-4f, 0.02f, 1.0f, 300.0f}) {
    const int64_t n = 32 * 64;
    std::vector<float> x = RandomRow(rng, n, scale);
    std::vector<BlockQ8_0> q(n / 32);
    std::vector<float> y(n);
    QuantizeRow(GgmlType::kQ8_0, x.data(), q.data(), n);
    DequantizeRow(GgmlType::kQ8_0, q.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
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
    const int64_t n = 32 * 64;
    std::vector<float> x = RandomRow(rng, n, scale);
    std::vector<BlockQ4_0> q(n / 32);
    std::vector<float> y(n);
    QuantizeRow(GgmlType::kQ4_0, x.data(), q.data(), n);
    DequantizeRow(GgmlType::kQ4_0, q.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
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

// ---------------------------------------------------------------------------
// Real files

TEST(GgufRealFileTest, Stories260K) {
  const std::string path = RequireSharedFile(kStories);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(f->metadata_keys().size(), 19u);
  EXPECT_EQ(f->metadata_keys().front(), "tokenizer.ggml.tokens");
  EXPECT_EQ(f->metadata_keys().back(), "llama.attention.layer_norm_rms_epsilon");
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->data_offset(), 14176u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->Find("general.alignment"), nullptr);

  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*f->GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*f->GetInt("llama.feed_forward_length"), 172);
  EXPECT_EQ(*f->GetInt("llama.block_count"), 5);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f->GetInt("llama.rope.dimension_count"), 8);
  EXPECT_EQ(*f->GetInt("llama.context_length"), 2048);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.padding_token_id"), 4294967295);
  EXPECT_NEAR(*f->GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_NEAR(*f->GetFloat("llama.embedding_length"), 64.0, 0);  // ints read as floats

  ASSERT_OK_AND_ASSIGN(std::vector<std::string> tokens, f->GetStringArray("tokenizer.ggml.tokens"));
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[258], "<0xFF>");
  ASSERT_OK_AND_ASSIGN(std::vector<double> scores, f->GetFloatArray("tokenizer.ggml.scores"));
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_EQ(scores[259], 0.0);
  EXPECT_EQ(scores[260], -1.0);
  EXPECT_EQ(scores[511], -252.0);
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> types, f->GetIntArray("tokenizer.ggml.token_type"));
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[3], 6);

  // Typed getter errors name the key and the actual type.
  EXPECT_THAT(f->GetString("llama.block_count"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("llama.block_count"), HasSubstr("uint32"))));
  EXPECT_THAT(f->GetInt("general.architecture"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("string")));
  EXPECT_THAT(f->GetBool("llama.block_count"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a bool")));
  EXPECT_THAT(f->GetIntArray("tokenizer.ggml.scores"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<float32>")));
  EXPECT_THAT(f->GetStringArray("llama.block_count"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an array")));
  EXPECT_THAT(f->GetInt("no.such.key"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no.such.key")));

  // Shapes (PROVENANCE.md), all F32, data inside the file.
  const uint64_t file_size = ReadBytes(path).size();
  EXPECT_EQ(file_size, 1185376u);
  auto expect_tensor = [&](const std::string& name, std::vector<int64_t> dims) {
    const GgufTensorInfo* t = f->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dims, dims) << name;
    EXPECT_EQ(t->type, GgmlType::kF32) << name;
    int64_t n = 1;
    for (int64_t d : dims) {
      n *= d;
    }
    EXPECT_EQ(t->num_elements, n) << name;
    EXPECT_EQ(t->num_bytes, 4 * n) << name;
    EXPECT_EQ(t->offset % 32, 0u) << name;
    EXPECT_LE(f->data_offset() + t->offset + t->num_bytes, file_size) << name;
  };
  expect_tensor("token_embd.weight", {64, 512});
  expect_tensor("output_norm.weight", {64});
  expect_tensor("output.weight", {64, 512});
  for (int l = 0; l < 5; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    expect_tensor(p + "attn_q.weight", {64, 64});
    expect_tensor(p + "attn_k.weight", {64, 32});
    expect_tensor(p + "attn_v.weight", {64, 32});
    expect_tensor(p + "attn_output.weight", {64, 64});
    expect_tensor(p + "attn_norm.weight", {64});
    expect_tensor(p + "ffn_gate.weight", {64, 172});
    expect_tensor(p + "ffn_up.weight", {64, 172});
    expect_tensor(p + "ffn_down.weight", {172, 64});
    expect_tensor(p + "ffn_norm.weight", {64});
  }
  EXPECT_EQ(f->FindTensor("blk.5.attn_q.weight"), nullptr);
  // llama2.c ties the classifier to the embedding: the bytes are identical.
  const GgufTensorInfo* embd = f->FindTensor("token_embd.weight");
  const GgufTensorInfo* out = f->FindTensor("output.weight");
  EXPECT_EQ(std::memcmp(embd->data, out->data, embd->num_bytes), 0);

  // FromBuffer parses the same image the same way.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> g, Parse(ReadBytes(path)));
  EXPECT_EQ(g->metadata_keys(), f->metadata_keys());
  ASSERT_EQ(g->tensors().size(), f->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    EXPECT_EQ(g->tensors()[i].name, f->tensors()[i].name);
    EXPECT_EQ(g->tensors()[i].offset, f->tensors()[i].offset);
  }
}

TEST(GgufRealFileTest, VocabOnlyFiles) {
  struct Case {
    std::string file;
    size_t n_kv;
    std::string model;
    size_t n_tokens;
  };
  for (const Case& c : {Case{"ggml-vocab-llama-spm.gguf", 22, "llama", 32000},
                        Case{"ggml-vocab-gpt-2.gguf", 16, "gpt2", 50257},
                        Case{"ggml-vocab-bert-bge.gguf", 20, "bert", 30522}}) {
    SCOPED_TRACE(c.file);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f,
                         GgufFile::Open(RequireSharedFile("models/ggml-vocab/" + c.file)));
    EXPECT_THAT(f->version(), AnyOf(2u, 3u));
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->metadata().size(), c.n_kv);
    EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), c.model);
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> tokens,
                         f->GetStringArray("tokenizer.ggml.tokens"));
    EXPECT_EQ(tokens.size(), c.n_tokens);
  }
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<GgufFile> gpt2,
      GgufFile::Open(RequireSharedFile("models/ggml-vocab/ggml-vocab-gpt-2.gguf")));
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> merges,
                       gpt2->GetStringArray("tokenizer.ggml.merges"));
  EXPECT_EQ(merges.size(), 50000u);
  EXPECT_EQ(*gpt2->GetInt("tokenizer.ggml.bos_token_id"), 50256);
}

TEST(GgufRealFileTest, OpenErrors) {
  EXPECT_THAT(GgufFile::Open(TempDir() + "/does-not-exist.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does-not-exist.gguf")));
  EXPECT_THAT(GgufFile::Open(TempDir()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  const std::string empty = TempDir() + "/empty.gguf";
  std::ofstream(empty).close();
  EXPECT_THAT(
      GgufFile::Open(empty),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("empty.gguf"), HasSubstr("0 bytes"))));
}

// ---------------------------------------------------------------------------
// Writer

GgufValue Scalar(GgufValueType type, int64_t i = 0, double f = 0, std::string s = "") {
  GgufValue v;
  v.type = type;
  v.i = i;
  v.f = f;
  v.str = std::move(s);
  return v;
}

GgufValue Array(GgufValueType elem, std::vector<GgufValue> elems) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.array_type = elem;
  v.array = std::move(elems);
  return v;
}

void ExpectSameValue(const GgufValue& got, const GgufValue& want, const std::string& where) {
  ASSERT_EQ(got.type, want.type) << where;
  switch (want.type) {
    case GgufValueType::kUint64:
      EXPECT_EQ(got.u, want.u) << where;
      break;
    case GgufValueType::kFloat32:
      EXPECT_EQ(got.f, static_cast<float>(want.f)) << where;
      break;
    case GgufValueType::kFloat64:
      EXPECT_EQ(got.f, want.f) << where;
      break;
    case GgufValueType::kString:
      EXPECT_EQ(got.str, want.str) << where;
      break;
    case GgufValueType::kBool:
      EXPECT_EQ(got.i != 0, want.i != 0) << where;
      break;
    case GgufValueType::kArray:
      ASSERT_EQ(got.array_type, want.array_type) << where;
      ASSERT_EQ(got.array.size(), want.array.size()) << where;
      for (size_t k = 0; k < want.array.size(); ++k) {
        ExpectSameValue(got.array[k], want.array[k], absl::StrCat(where, "[", k, "]"));
      }
      break;
    default:
      EXPECT_EQ(got.i, want.i) << where;
  }
}

// Every scalar type at its extremes, strings with NULs and UTF-8, arrays of
// each type, empty and nested arrays.
std::vector<std::pair<std::string, GgufValue>> AllValueKinds() {
  using T = GgufValueType;
  GgufValue u64max = Scalar(T::kUint64);
  u64max.u = kU64Max;
  GgufValue u64small = Scalar(T::kUint64);
  u64small.u = 42;
  u64small.i = 42;
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"t.u8", Scalar(T::kUint8, 255)},
      {"t.i8", Scalar(T::kInt8, -128)},
      {"t.u16", Scalar(T::kUint16, 65535)},
      {"t.i16", Scalar(T::kInt16, -32768)},
      {"t.u32", Scalar(T::kUint32, 4294967295)},
      {"t.i32", Scalar(T::kInt32, std::numeric_limits<int32_t>::min())},
      {"t.u64", u64max},
      {"t.u64small", u64small},
      {"t.i64", Scalar(T::kInt64, std::numeric_limits<int64_t>::min())},
      {"t.f32", Scalar(T::kFloat32, 0, 1.5)},
      {"t.f64", Scalar(T::kFloat64, 0, -2.25e300)},
      {"t.true", Scalar(T::kBool, 1)},
      {"t.false", Scalar(T::kBool, 0)},
      {"t.str", Scalar(T::kString, 0, 0, std::string("a\0b \xC3\xA9\xF0\x9F\x98\x80", 10))},
      {"t.empty_str", Scalar(T::kString)},
      {"", Scalar(T::kUint8, 7)},  // empty key is legal
      {"a.u8", Array(T::kUint8, {Scalar(T::kUint8, 0), Scalar(T::kUint8, 255)})},
      {"a.i8", Array(T::kInt8, {Scalar(T::kInt8, -1)})},
      {"a.u16", Array(T::kUint16, {Scalar(T::kUint16, 1), Scalar(T::kUint16, 2)})},
      {"a.i16", Array(T::kInt16, {Scalar(T::kInt16, -300)})},
      {"a.u32", Array(T::kUint32, {Scalar(T::kUint32, 70000)})},
      {"a.i32", Array(T::kInt32, {Scalar(T::kInt32, -5), Scalar(T::kInt32, 6)})},
      {"a.u64", Array(T::kUint64, {u64max, u64small})},
      {"a.i64", Array(T::kInt64, {Scalar(T::kInt64, -(int64_t{1} << 40))})},
      {"a.f32", Array(T::kFloat32, {Scalar(T::kFloat32, 0, 0.25), Scalar(T::kFloat32, 0, -1)})},
      {"a.f64", Array(T::kFloat64, {Scalar(T::kFloat64, 0, 1e-300)})},
      {"a.bool", Array(T::kBool, {Scalar(T::kBool, 1), Scalar(T::kBool, 0)})},
      {"a.str", Array(T::kString, {Scalar(T::kString, 0, 0, "x"), Scalar(T::kString),
                                   Scalar(T::kString, 0, 0, "<0xFF>")})},
      {"a.empty", Array(T::kFloat32, {})},
      {"a.nested",
       Array(T::kArray, {Array(T::kInt32, {Scalar(T::kInt32, 1), Scalar(T::kInt32, 2)}),
                         Array(T::kInt32, {}), Array(T::kInt32, {Scalar(T::kInt32, 3)})})},
      {"a.nested_str", Array(T::kArray, {Array(T::kString, {Scalar(T::kString, 0, 0, "deep")}),
                                         Array(T::kString, {})})},
      {"a.nested3",
       Array(T::kArray, {Array(T::kArray, {Array(T::kUint8, {Scalar(T::kUint8, 9)})})})},
  };
  return kv;
}

TEST(GgufWriterTest, RoundTripsEveryMetadataType) {
  GgufWriter w;
  const auto kv = AllValueKinds();
  for (const auto& [k, v] : kv) {
    w.SetValue(k, v);
  }
  w.SetString("s.string", "hello");
  w.SetUint32("s.u32", 7);
  w.SetInt32("s.i32", -7);
  w.SetUint64("s.u64", uint64_t{1} << 63);
  w.SetFloat32("s.f32", 0.1f);
  w.SetBool("s.bool", true);
  w.SetStringArray("s.strs", {"a", "", "ccc"});
  w.SetFloat32Array("s.floats", {1.0f, -2.5f});
  w.SetInt32Array("s.ints", {-1, 0, 1});
  w.SetUint32("s.u32", 8);  // replaces in place, keeps the first position
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> bytes, w.Serialize());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(bytes));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_TRUE(f->tensors().empty());

  std::vector<std::string> want_keys;
  for (const auto& [k, v] : kv) {
    want_keys.push_back(k);
  }
  for (const char* k :
       {"s.string", "s.u32", "s.i32", "s.u64", "s.f32", "s.bool", "s.strs", "s.floats", "s.ints"}) {
    want_keys.push_back(k);
  }
  EXPECT_EQ(f->metadata_keys(), want_keys);
  for (const auto& [k, v] : kv) {
    const GgufValue* got = f->Find(k);
    ASSERT_NE(got, nullptr) << k;
    ExpectSameValue(*got, v, k);
  }

  EXPECT_EQ(*f->GetString("s.string"), "hello");
  EXPECT_EQ(*f->GetInt("s.u32"), 8);
  EXPECT_EQ(*f->GetInt("s.i32"), -7);
  EXPECT_EQ(*f->GetInt("t.u32"), 4294967295);
  EXPECT_EQ(*f->GetInt("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->GetInt("t.u64small"), 42);
  EXPECT_EQ(f->Find("s.u64")->u, uint64_t{1} << 63);
  EXPECT_THAT(f->GetInt("s.u64"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit int64")));
  EXPECT_EQ(*f->GetFloat("s.f32"), 0.1f);
  EXPECT_EQ(*f->GetFloat("t.f64"), -2.25e300);
  EXPECT_EQ(*f->GetFloat("t.i16"), -32768.0);
  EXPECT_TRUE(*f->GetBool("s.bool"));
  EXPECT_FALSE(*f->GetBool("t.false"));
  EXPECT_THAT(*f->GetStringArray("s.strs"), ElementsAre("a", "", "ccc"));
  EXPECT_THAT(*f->GetFloatArray("s.floats"), ElementsAre(1.0, -2.5));
  EXPECT_THAT(*f->GetFloatArray("a.i32"), ElementsAre(-5.0, 6.0));
  EXPECT_THAT(*f->GetIntArray("s.ints"), ElementsAre(-1, 0, 1));
  EXPECT_THAT(*f->GetIntArray("a.u16"), ElementsAre(1, 2));
  EXPECT_THAT(f->GetIntArray("a.u64"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("element 0")));
  EXPECT_THAT(f->GetIntArray("s.floats"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<float32>")));
  EXPECT_THAT(f->GetStringArray("a.nested"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<array>")));
  EXPECT_THAT(*f->GetFloatArray("a.empty"), ::testing::IsEmpty());
  EXPECT_THAT(f->GetIntArray("a.empty"),  // the element type decides, even when empty
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<float32>")));

  // Writing what was read gives the same bytes (SetValue copies everything).
  GgufWriter copy;
  for (const std::string& k : f->metadata_keys()) {
    copy.SetValue(k, *f->Find(k));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> again, copy.Serialize());
  EXPECT_EQ(again, bytes);
}

TEST(GgufWriterTest, RoundTripsAllTensorTypes) {
  std::mt19937 rng(3);
  GgufWriter w;
  w.SetString("general.architecture", "test");
  w.SetAlignment(64);
  struct Spec {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
  };
  const std::vector<Spec> specs = {
      {"f32", GgmlType::kF32, {4, 3}},          {"f16", GgmlType::kF16, {7}},
      {"bf16", GgmlType::kBF16, {2, 2, 2}},     {"q8_0", GgmlType::kQ8_0, {64, 2}},
      {"q4_0", GgmlType::kQ4_0, {32, 3, 1, 2}}, {"empty", GgmlType::kF32, {0, 5}},
  };
  std::vector<std::vector<float>> values;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.dims) {
      n *= d;
    }
    values.push_back(RandomRow(rng, n, 2.0f));
    ASSERT_OK(w.AddTensorFromF32(s.name, s.type, s.dims, values.back()));
  }
  std::vector<uint8_t> raw = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_OK(w.AddTensor("raw.f16", GgmlType::kF16, {2, 2}, raw));

  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> bytes, w.Serialize());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(bytes));
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(*f->GetInt("general.alignment"), 64);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  ASSERT_EQ(f->tensors().size(), specs.size() + 1);
  for (size_t i = 0; i < specs.size(); ++i) {
    const GgufTensorInfo& t = f->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.dims, specs[i].dims);
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ(t.num_elements, static_cast<int64_t>(values[i].size()));
    EXPECT_EQ(t.num_bytes,
              GgmlRowBytes(t.type, t.dims[0]) * (t.dims[0] ? t.num_elements / t.dims[0] : 0));
    EXPECT_EQ(f->FindTensor(specs[i].name), &t);
    // Data equals QuantizeRow of the input.
    std::vector<uint8_t> want(t.num_bytes);
    if (t.dims[0] > 0) {
      for (int64_t r = 0; r < t.num_elements / t.dims[0]; ++r) {
        QuantizeRow(t.type, values[i].data() + r * t.dims[0],
                    want.data() + r * GgmlRowBytes(t.type, t.dims[0]), t.dims[0]);
      }
    }
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.num_bytes), want);
  }
  const GgufTensorInfo* r = f->FindTensor("raw.f16");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(r->data, r->data + r->num_bytes), raw);
  // Tensors are laid out back to back, each padded to the alignment.
  EXPECT_EQ(f->tensors()[0].offset, 0u);
  EXPECT_EQ(f->tensors()[1].offset, 64u);  // 48 bytes of F32 padded to 64
  EXPECT_EQ(bytes.size() % 64, 0u);

  // WriteFile streams the same bytes.
  const std::string path = TempDir() + "/all_types.gguf";
  ASSERT_OK(w.WriteFile(path));
  EXPECT_EQ(ReadBytes(path), bytes);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> opened, GgufFile::Open(path));
  EXPECT_EQ(opened->tensors().size(), specs.size() + 1);
}

TEST(GgufWriterTest, EmptyFile) {
  GgufWriter w;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> bytes, w.Serialize());
  EXPECT_EQ(bytes.size(), 32u);  // 24-byte header padded to 32
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(bytes));
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->data_offset(), 32u);
  // A file with no tensor data may end right after the header.
  bytes.resize(24);
  EXPECT_OK(Parse(bytes).status());
}

TEST(GgufWriterTest, RejectsBadInput) {
  GgufWriter w;
  const std::vector<float> f32(64, 1.0f);
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {4}, std::vector<uint8_t>(15)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs 16 bytes, got 15")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_dims 5")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_dims 0")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {-1}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {int64_t{1} << 40, int64_t{1} << 40}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
  EXPECT_THAT(w.AddTensorFromF32("t", GgmlType::kQ8_0, {16, 4}, f32),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("row length 16 is not a multiple of the Q8_0 block size 32")));
  EXPECT_THAT(w.AddTensorFromF32("t", GgmlType::kF32, {65}, f32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hold 65 elements, got 64")));
  EXPECT_THAT(w.AddTensor("", GgmlType::kF32, {1}, std::vector<uint8_t>(4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor name")));
  EXPECT_THAT(w.AddTensor(std::string(64, 'x'), GgmlType::kF32, {1}, std::vector<uint8_t>(4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("64 bytes")));
  ASSERT_OK(w.AddTensorFromF32("t", GgmlType::kF32, {64}, f32));
  EXPECT_THAT(w.AddTensorFromF32("t", GgmlType::kF32, {64}, f32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate tensor name 't'")));

  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter bad;
    bad.SetAlignment(a);
    EXPECT_THAT(bad.Serialize(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr(absl::StrCat("general.alignment ", a))));
  }
  GgufWriter bad_alignment_type;
  bad_alignment_type.SetString("general.alignment", "32");
  EXPECT_THAT(bad_alignment_type.Serialize(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an integer")));

  GgufWriter mixed;
  mixed.SetValue("k", Array(GgufValueType::kInt32,
                            {Scalar(GgufValueType::kInt32, 1), Scalar(GgufValueType::kString)}));
  EXPECT_THAT(mixed.Serialize(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'k'"), HasSubstr("array element 1 is string"))));
  GgufWriter range;
  range.SetValue("k", Scalar(GgufValueType::kUint8, 300));
  EXPECT_THAT(range.Serialize(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("value 300 out of range for uint8")));
  EXPECT_THAT(range.WriteFile(TempDir() + "/never.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("300")));
  GgufWriter ok;
  EXPECT_THAT(ok.WriteFile(TempDir() + "/no/such/dir/x.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("x.gguf")));
}

// ---------------------------------------------------------------------------
// Bad input

// A writer-made file with every metadata kind and every tensor type.
std::vector<uint8_t> SampleFile() {
  std::mt19937 rng(11);
  GgufWriter w;
  for (const auto& [k, v] : AllValueKinds()) {
    w.SetValue(k, v);
  }
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hello", "world"});
  EXPECT_OK(w.AddTensorFromF32("a.weight", GgmlType::kF32, {8, 2}, RandomRow(rng, 16, 1)));
  EXPECT_OK(w.AddTensorFromF32("b.weight", GgmlType::kQ8_0, {64, 2}, RandomRow(rng, 128, 1)));
  EXPECT_OK(w.AddTensorFromF32("c.weight", GgmlType::kQ4_0, {32, 2}, RandomRow(rng, 64, 1)));
  EXPECT_OK(w.AddTensorFromF32("d.weight", GgmlType::kF16, {5}, RandomRow(rng, 5, 1)));
  EXPECT_OK(w.AddTensorFromF32("e.weight", GgmlType::kBF16, {3, 1, 1, 2}, RandomRow(rng, 6, 1)));
  absl::StatusOr<std::vector<uint8_t>> bytes = w.Serialize();
  EXPECT_OK(bytes.status());
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

// End of the last byte any tensor needs: every shorter prefix must fail.
uint64_t DataEnd(const GgufFile& f) {
  uint64_t end = f.data_offset();
  for (const GgufTensorInfo& t : f.tensors()) {
    end = std::max<uint64_t>(end, f.data_offset() + t.offset + t.num_bytes);
  }
  return end;
}

// Cuts at every byte below `dense_until`, then every `header_stride` bytes up
// to the data section and every `data_stride` bytes in it.
void ExpectEveryTruncationFails(const std::vector<uint8_t>& bytes, uint64_t dense_until,
                                uint64_t header_stride, uint64_t data_stride) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> whole, Parse(bytes));
  const uint64_t end = DataEnd(*whole);
  ASSERT_LE(end, bytes.size());
  int checked = 0;
  for (uint64_t cut = 0; cut < end; cut += cut < dense_until            ? 1
                                           : cut < whole->data_offset() ? header_stride
                                                                        : data_stride) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + cut);
    absl::StatusOr<std::unique_ptr<GgufFile>> f = Parse(prefix);
    ASSERT_THAT(f, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("offset")))
        << "truncated at " << cut << " of " << bytes.size();
    ++checked;
  }
  // The last byte matters too.
  std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + end - 1);
  EXPECT_THAT(Parse(prefix), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("past end of file")));
  EXPECT_GT(checked, 0);
}

TEST(GgufBadInputTest, EveryTruncationOfStoriesFails) {
  const std::vector<uint8_t> bytes = ReadBytes(RequireSharedFile(kStories));
  ASSERT_FALSE(bytes.empty());
  ExpectEveryTruncationFails(bytes, 2048, 61, 4099);
}

TEST(GgufBadInputTest, EveryTruncationOfWriterFileFails) {
  const std::vector<uint8_t> bytes = SampleFile();
  ExpectEveryTruncationFails(bytes, bytes.size(), 1, 1);
}

TEST(GgufBadInputTest, TruncationMessagesNameTheField) {
  const std::vector<uint8_t> bytes = ReadBytes(RequireSharedFile(kStories));
  auto cut = [&](size_t n) {
    return Parse(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
  };
  EXPECT_THAT(cut(0), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("file is 0 bytes")));
  EXPECT_THAT(cut(6), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("version at offset 4")));
  EXPECT_THAT(cut(20), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("n_kv at offset 16")));
  // n_kv = 19 needs more than the 6 bytes left.
  EXPECT_THAT(cut(30), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("n_kv 19 at offset 16")));
  // Inside the token array (key 0, tokenizer.ggml.tokens).
  EXPECT_THAT(cut(2000), StatusIs(absl::StatusCode::kDataLoss,
                                  AllOf(HasSubstr("metadata key 0 ('tokenizer.ggml.tokens')"),
                                        HasSubstr("array length 512 at offset"))));
  // In the data section: the message names the tensor and its byte range.
  EXPECT_THAT(cut(20000), StatusIs(absl::StatusCode::kDataLoss,
                                   AllOf(HasSubstr("('token_embd.weight')"),
                                         HasSubstr("data range [14176, 145248)"),
                                         HasSubstr("past end of file (20000 bytes)"))));
}

TEST(GgufBadInputTest, WrongMagic) {
  std::vector<uint8_t> bytes = SampleFile();
  std::memcpy(bytes.data(), "GGML", 4);
  EXPECT_THAT(Parse(bytes), StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("magic"), HasSubstr("offset 0"))));
}

TEST(GgufBadInputTest, UnsupportedVersions) {
  EXPECT_THAT(Parse(Raw().Header(1, 0, 0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("version 1"), HasSubstr("offset 4"))));
  EXPECT_THAT(Parse(Raw().Header(4, 0, 0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 4")));
  EXPECT_THAT(Parse(Raw().Header(0x03000000, 0, 0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("big-endian")));
  EXPECT_OK(Parse(Raw().Header(2, 0, 0).bytes()).status());
  EXPECT_OK(Parse(Raw().Header(3, 0, 0).bytes()).status());
}

TEST(GgufBadInputTest, HugeCounts) {
  EXPECT_THAT(Parse(Raw().Header(3, uint64_t{1} << 62, 0).Zeros(100).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("n_tensors 4611686018427387904 at offset 8"),
                             HasSubstr("only 100 bytes left"))));
  EXPECT_THAT(
      Parse(Raw().Header(3, 0, kU64Max).Zeros(100).bytes()),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("n_kv 18446744073709551615 at offset 16")));
  // Key string length.
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).U64(kU64Max).Zeros(20).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("metadata key 0: key length 18446744073709551615 at offset 24 "
                                 "exceeds file size 52")));
  // Value string length.
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).Str("general.name").U32(8).U64(kU64Max).Zeros(8).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("metadata key 0 ('general.name')"),
                             HasSubstr("string value length 18446744073709551615 at offset 48"))));
  // Array length, for a 1-byte element type and for strings.
  for (uint32_t elem : {0u, 8u, 9u}) {
    EXPECT_THAT(
        Parse(Raw().Header(3, 0, 1).Str("k").U32(9).U32(elem).U64(kU64Max / 2).Zeros(64).bytes()),
        StatusIs(absl::StatusCode::kDataLoss,
                 AllOf(HasSubstr("metadata key 0 ('k')"),
                       HasSubstr("array length 9223372036854775807 at offset 41"))));
  }
  // Tensor name length.
  EXPECT_THAT(Parse(Raw().Header(3, 1, 0).U64(kU64Max).Zeros(40).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("tensor 0: name length 18446744073709551615 at offset 24")));
}

TEST(GgufBadInputTest, CountLimits) {
  // Counts the bytes could hold but that no real file has.
  const uint64_t n = (uint64_t{1} << 20) + 1;
  EXPECT_THAT(Parse(Raw().Header(3, 0, n).Zeros(13 * n).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("n_kv 1048577 at offset 16 exceeds the limit of 1048576")));
  EXPECT_THAT(Parse(Raw().Header(3, n, 0).Zeros(32 * n).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("n_tensors 1048577 at offset 8 exceeds the limit of 1048576")));
}

TEST(GgufBadInputTest, ArrayElementLimit) {
  // 2^23 + 1 one-byte elements are present in the file but over the cap.
  const uint64_t n = (uint64_t{1} << 23) + 1;
  Raw r;
  r.Header(3, 0, 1).Str("big").U32(9).U32(0).U64(n).Zeros(n);
  EXPECT_THAT(Parse(r.bytes()), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("exceeds the limit of 8388608")));
}

TEST(GgufBadInputTest, BadValueTypes) {
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).Str("k").U32(13).Zeros(8).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata key 0 ('k'): value type 13 at offset 33")));
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).Str("k").U32(9).U32(77).U64(0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("array element type 77 at offset 37")));
  // Arrays nested 20 deep.
  Raw deep;
  deep.Header(3, 0, 1).Str("k").U32(9);
  for (int i = 0; i < 20; ++i) {
    deep.U32(9).U64(1);
  }
  deep.U32(0).U64(0);
  EXPECT_THAT(Parse(deep.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deeper than 8 levels")));
}

TEST(GgufBadInputTest, DuplicateKey) {
  EXPECT_THAT(Parse(Raw().Header(3, 0, 2).KvU32("a", 1).KvU32("a", 2).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata key 1 ('a') at offset 41: duplicate key")));
}

TEST(GgufBadInputTest, BadAlignment) {
  for (uint32_t a : {0u, 3u, 96u}) {
    Raw r;
    r.Header(3, 0, 1).KvU32("general.alignment", a);
    EXPECT_THAT(Parse(r.bytes()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(absl::StrCat("general.alignment ", a)),
                               HasSubstr("not a power of two"), HasSubstr("offset 49"))));
  }
  Raw s;
  s.Header(3, 0, 1).Str("general.alignment").U32(8).Str("32");
  EXPECT_THAT(Parse(s.bytes()), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("general.alignment is string")));
  // A valid non-default alignment is honoured.
  Raw ok;
  ok.Header(3, 1, 1).KvU32("general.alignment", 8).TensorInfo("t", {2}, 0, 0).PadTo(8).Zeros(8);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(ok.bytes()));
  EXPECT_EQ(f->alignment(), 8u);
  EXPECT_EQ(f->data_offset() % 8, 0u);
}

TEST(GgufBadInputTest, BadTensorInfos) {
  using ::absl::StatusCode;
  EXPECT_THAT(Parse(OneTensorFile("t", {1, 1, 1, 1, 1}, 0, 0, 4)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("tensor 0 ('t'): n_dims 5 at offset 33 out of range [1, 4]")));
  EXPECT_THAT(Parse(OneTensorFile("t", {}, 0, 0, 4)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("n_dims 0")));
  EXPECT_THAT(Parse(OneTensorFile("t", {4, uint64_t{1} << 63}, 0, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("dimension 1 at offset 45 is -9223372036854775808, negative")));
  EXPECT_THAT(Parse(OneTensorFile("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tensor 0 ('t')"), HasSubstr("overflows int64"),
                             HasSubstr("offset 37"))));
  // Elements fit int64 but bytes don't: 2^62 F32 values.
  EXPECT_THAT(Parse(OneTensorFile("t", {uint64_t{1} << 62}, 0, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("byte size")));
  EXPECT_THAT(Parse(OneTensorFile("weird", {4}, 99, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tensor 0 ('weird')"),
                             HasSubstr("unknown tensor type id 99"), HasSubstr("offset 49"))));
  EXPECT_THAT(Parse(OneTensorFile("q", {33}, 8, 0, 64)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("row length 33 is not a multiple of the Q8_0 block size 32")));
  EXPECT_THAT(
      Parse(OneTensorFile("t", {4}, 0, 4, 64)),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("data offset 4 at offset 49 is not a multiple of the alignment 32")));
  EXPECT_THAT(Parse(OneTensorFile("t", {100}, 0, 0, 16)),
              StatusIs(StatusCode::kDataLoss,
                       HasSubstr("tensor 0 ('t'): data range [64, 464) (data section at offset 64 "
                                 "+ tensor offset 0) past end of file (80 bytes)")));
  EXPECT_THAT(Parse(OneTensorFile("t", {4}, 0, kU64Max - 31, 16)),
              StatusIs(StatusCode::kDataLoss, HasSubstr("overflows")));
  // Names from the file are escaped and cut short in messages.
  EXPECT_THAT(Parse(OneTensorFile("x\ny\x01", {4}, 99, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("tensor 0 ('x\\ny\\x01')")));
  const std::string long_name = std::string(200, 'n');
  absl::Status long_status = Parse(OneTensorFile(long_name, {4}, 99, 0, 16)).status();
  EXPECT_THAT(long_status, StatusIs(StatusCode::kInvalidArgument, HasSubstr("n'...")));
  EXPECT_LT(long_status.message().size(), 300u);
  // Zero-sized tensors are fine, even at the very end.
  EXPECT_OK(Parse(OneTensorFile("t", {0, 7}, 0, 0, 0)).status());

  Raw dup;
  dup.Header(3, 2, 0).TensorInfo("x", {4}, 0, 0).TensorInfo("x", {4}, 0, 32).PadTo(32).Zeros(64);
  EXPECT_THAT(Parse(dup.bytes()),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("tensor 1 ('x'): duplicate tensor name (also tensor 0)")));
}

// Random corruption of the header must give a clean status or a valid file,
// never a crash or an out-of-bounds read (the ASan build checks the latter).
void FuzzHeader(const std::vector<uint8_t>& original, uint32_t seed, int iterations) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> clean, Parse(original));
  const uint64_t header_end = clean->data_offset();
  std::mt19937 rng(seed);
  int failures = 0;
  for (int it = 0; it < iterations; ++it) {
    std::vector<uint8_t> bytes = original;
    const int mutations = 1 + rng() % 8;
    for (int m = 0; m < mutations; ++m) {
      const uint64_t pos = rng() % header_end;
      switch (rng() % 4) {
        case 0:
          bytes[pos] = static_cast<uint8_t>(rng());
          break;
        case 1:
          bytes[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 2:
          bytes[pos] = 0xFF;
          break;
        default: {
          const uint64_t v = (uint64_t{rng()} << 32) | rng();
          std::memcpy(bytes.data() + pos, &v, std::min<uint64_t>(8, bytes.size() - pos));
        }
      }
    }
    if (rng() % 8 == 0) {
      bytes.resize(rng() % bytes.size());
    }
    absl::StatusOr<std::unique_ptr<GgufFile>> f = Parse(bytes);
    if (!f.ok()) {
      ++failures;
      ASSERT_THAT(f.status().code(),
                  AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss))
          << "seed " << seed << " iteration " << it << ": " << f.status();
      ASSERT_FALSE(f.status().message().empty());
      continue;
    }
    // Accepted: every tensor's data must really be inside the image.
    uint64_t sum = 0;
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      for (int64_t b = 0; b < t.num_bytes; ++b) {
        sum += t.data[b];
      }
    }
    volatile uint64_t sink = sum;
    (void)sink;
  }
  EXPECT_GT(failures, 0) << "seed " << seed;
}

TEST(GgufFuzzTest, RandomHeaderMutationsOfWriterFile) { FuzzHeader(SampleFile(), 20240611, 2000); }

TEST(GgufFuzzTest, RandomHeaderMutationsOfStories) {
  // Only the header region is mutated; a 1.2 MB copy per iteration bounds the count.
  FuzzHeader(ReadBytes(RequireSharedFile(kStories)), 7, 300);
}

// ---------------------------------------------------------------------------
// Quantizer

struct InputTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;
};

// Builds an F32-ish model file and returns the float values of every tensor
// (after rounding to its stored type).
std::map<std::string, std::vector<float>> WriteModel(const std::string& path,
                                                     const std::vector<InputTensor>& tensors,
                                                     uint32_t alignment) {
  std::mt19937 rng(17);
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("general.file_type", 0);  // ALL_F32
  w.SetAlignment(alignment);
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
  w.SetFloat32Array("tokenizer.ggml.scores", {0, -1, -2});
  w.SetValue("x.nested",
             Array(GgufValueType::kArray,
                   {Array(GgufValueType::kString, {Scalar(GgufValueType::kString, 0, 0, "n")})}));
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::map<std::string, std::vector<float>> values;
  for (const InputTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.dims) {
      n *= d;
    }
    std::vector<float> x = RandomRow(rng, n, 0.5f);
    EXPECT_OK(w.AddTensorFromF32(t.name, t.type, t.dims, x));
    // What the file holds, as floats.
    std::vector<uint8_t> stored(GgmlRowBytes(t.type, n));
    QuantizeRow(t.type, x.data(), stored.data(), n);
    DequantizeRow(t.type, stored.data(), x.data(), n);
    values[t.name] = x;
  }
  EXPECT_OK(w.WriteFile(path));
  return values;
}

const std::vector<InputTensor>& ModelTensors() {
  static const auto* tensors = new std::vector<InputTensor>{
      {"token_embd.weight", GgmlType::kF32, {64, 16}},
      {"output_norm.weight", GgmlType::kF32, {64}},
      {"output.weight", GgmlType::kF32, {64, 16}},
      {"rope_freqs.weight", GgmlType::kF32, {32}},
      {"blk.0.attn_norm.weight", GgmlType::kF32, {64}},
      {"blk.0.attn_q.weight", GgmlType::kF16, {64, 64}},
      {"blk.0.attn_k.weight", GgmlType::kBF16, {64, 32}},
      {"blk.0.attn_q.bias", GgmlType::kF32, {64}},
      {"blk.0.ffn_down.weight", GgmlType::kF32, {48, 64}},  // row of 48: not quantizable
      {"blk.0.ffn_gate_inp.weight", GgmlType::kF32, {64, 4}},
      {"blk.0.ffn_up_exps.weight", GgmlType::kF32, {64, 8, 2}},  // 3-D experts
  };
  return *tensors;
}

void ExpectQuantized(const std::string& in, const std::string& out, GgmlType target,
                     const std::map<std::string, std::vector<float>>& values,
                     const std::map<std::string, GgmlType>& want_types,
                     const GgufQuantizeReport& report) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> src, GgufFile::Open(in));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> dst, GgufFile::Open(out));
  EXPECT_EQ(dst->version(), 3u);
  EXPECT_EQ(dst->alignment(), src->alignment());
  // Metadata: same keys in the same order, then quantization_version; values
  // identical except file_type.
  std::vector<std::string> want_keys = src->metadata_keys();
  want_keys.push_back("general.quantization_version");
  EXPECT_EQ(dst->metadata_keys(), want_keys);
  for (const std::string& k : src->metadata_keys()) {
    if (k != "general.file_type") {
      ExpectSameValue(*dst->Find(k), *src->Find(k), k);
    }
  }
  EXPECT_EQ(dst->Find("general.file_type")->type, GgufValueType::kUint32);
  EXPECT_EQ(*dst->GetInt("general.file_type"), target == GgmlType::kQ8_0 ? 7 : 2);
  EXPECT_EQ(*dst->GetInt("general.quantization_version"), 2);

  ASSERT_EQ(dst->tensors().size(), src->tensors().size());
  ASSERT_EQ(report.tensors.size(), src->tensors().size());
  int64_t before = 0;
  int64_t after = 0;
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const GgufTensorInfo& s = src->tensors()[i];
    const GgufTensorInfo& d = dst->tensors()[i];
    SCOPED_TRACE(s.name);
    ASSERT_EQ(d.name, s.name);
    EXPECT_EQ(d.dims, s.dims);
    ASSERT_TRUE(want_types.count(s.name));
    EXPECT_EQ(d.type, want_types.at(s.name)) << GgmlTypeName(d.type);
    EXPECT_EQ(report.tensors[i].name, s.name);
    EXPECT_EQ(report.tensors[i].from, s.type);
    EXPECT_EQ(report.tensors[i].to, d.type);
    EXPECT_EQ(report.tensors[i].bytes_before, s.num_bytes);
    EXPECT_EQ(report.tensors[i].bytes_after, d.num_bytes);
    before += s.num_bytes;
    after += d.num_bytes;
    if (d.type == s.type) {
      EXPECT_EQ(std::vector<uint8_t>(d.data, d.data + d.num_bytes),
                std::vector<uint8_t>(s.data, s.data + s.num_bytes));
      continue;
    }
    // Dequantized output == DequantizeRow(QuantizeRow(x)) of the input floats.
    const std::vector<float>& x = values.at(s.name);
    std::vector<uint8_t> q(d.num_bytes);
    std::vector<float> want(x.size());
    std::vector<float> got(x.size());
    QuantizeRow(d.type, x.data(), q.data(), x.size());
    DequantizeRow(d.type, q.data(), want.data(), x.size());
    DequantizeRow(d.type, d.data, got.data(), x.size());
    EXPECT_EQ(got, want);
    EXPECT_EQ(std::vector<uint8_t>(d.data, d.data + d.num_bytes), q);
  }
  EXPECT_EQ(report.bytes_before, before);
  EXPECT_EQ(report.bytes_after, after);
  EXPECT_LT(report.bytes_after, report.bytes_before);
  EXPECT_GT(report.file_bytes_before, report.bytes_before);
  EXPECT_GT(report.file_bytes_after, report.bytes_after);
}

TEST(QuantizeGgufFileTest, Q8_0) {
  const std::string in = TempDir() + "/model_f32_q8.gguf";
  const std::string out = TempDir() + "/model_q8_0.gguf";
  const auto values = WriteModel(in, ModelTensors(), 32);
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(in, out, GgmlType::kQ8_0, &report));
  const GgmlType q = GgmlType::kQ8_0;
  ExpectQuantized(in, out, q, values,
                  {{"token_embd.weight", q},
                   {"output_norm.weight", GgmlType::kF32},
                   {"output.weight", q},
                   {"rope_freqs.weight", GgmlType::kF32},
                   {"blk.0.attn_norm.weight", GgmlType::kF32},
                   {"blk.0.attn_q.weight", q},
                   {"blk.0.attn_k.weight", q},
                   {"blk.0.attn_q.bias", GgmlType::kF32},
                   {"blk.0.ffn_down.weight", GgmlType::kF32},
                   {"blk.0.ffn_gate_inp.weight", GgmlType::kF32},
                   {"blk.0.ffn_up_exps.weight", q}},
                  report);
}

TEST(QuantizeGgufFileTest, Q4_0KeepsOutputAtQ8_0) {
  const std::string in = TempDir() + "/model_f32_q4.gguf";
  const std::string out = TempDir() + "/model_q4_0.gguf";
  const auto values = WriteModel(in, ModelTensors(), 64);  // non-default alignment kept
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(in, out, GgmlType::kQ4_0, &report));
  const GgmlType q = GgmlType::kQ4_0;
  ExpectQuantized(in, out, q, values,
                  {{"token_embd.weight", q},
                   {"output_norm.weight", GgmlType::kF32},
                   {"output.weight", GgmlType::kQ8_0},
                   {"rope_freqs.weight", GgmlType::kF32},
                   {"blk.0.attn_norm.weight", GgmlType::kF32},
                   {"blk.0.attn_q.weight", q},
                   {"blk.0.attn_k.weight", q},
                   {"blk.0.attn_q.bias", GgmlType::kF32},
                   {"blk.0.ffn_down.weight", GgmlType::kF32},
                   {"blk.0.ffn_gate_inp.weight", GgmlType::kF32},
                   {"blk.0.ffn_up_exps.weight", q}},
                  report);

  // Quantizing the result again: Q4_0 tensors are already the target (copied),
  // output.weight already Q8_0: the file converts to itself.
  const std::string again = TempDir() + "/model_q4_0_again.gguf";
  ASSERT_OK(QuantizeGgufFile(out, again, GgmlType::kQ4_0));
  EXPECT_EQ(ReadBytes(again), ReadBytes(out));
  // To Q8_0 it would requantize: refused, naming the tensor.
  EXPECT_THAT(QuantizeGgufFile(out, TempDir() + "/never.gguf", GgmlType::kQ8_0),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("'token_embd.weight'"), HasSubstr("already Q4_0"))));
}

TEST(QuantizeGgufFileTest, TiedEmbeddingsGetTheOutputType) {
  const std::string in = TempDir() + "/tied_f32.gguf";
  const std::string out = TempDir() + "/tied_q4_0.gguf";
  const auto values = WriteModel(in,
                                 {{"token_embd.weight", GgmlType::kF32, {64, 16}},
                                  {"blk.0.attn_q.weight", GgmlType::kF32, {64, 64}}},
                                 32);
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(in, out, GgmlType::kQ4_0, &report));
  ExpectQuantized(
      in, out, GgmlType::kQ4_0, values,
      {{"token_embd.weight", GgmlType::kQ8_0}, {"blk.0.attn_q.weight", GgmlType::kQ4_0}}, report);
}

TEST(QuantizeGgufFileTest, QuantizesStories260K) {
  const std::string out = TempDir() + "/stories_q8_0.gguf";
  GgufQuantizeReport report;
  ASSERT_OK(QuantizeGgufFile(RequireSharedFile(kStories), out, GgmlType::kQ8_0, &report));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, GgufFile::Open(out));
  EXPECT_EQ(f->metadata().size(), 21u);  // 19 + file_type + quantization_version
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(f->FindTensor("blk.0.ffn_down.weight")->type, GgmlType::kF32);  // 172 % 32 != 0
  EXPECT_EQ(f->FindTensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(report.tensors.size(), 48u);
}

TEST(QuantizeGgufFileTest, Errors) {
  EXPECT_THAT(QuantizeGgufFile("in", "out", GgmlType::kF16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("valid targets: Q8_0, Q4_0")));
  EXPECT_THAT(QuantizeGgufFile(TempDir() + "/missing.gguf", TempDir() + "/o.gguf", GgmlType::kQ8_0),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.gguf")));
}

}  // namespace
}  // namespace tandem::engine
