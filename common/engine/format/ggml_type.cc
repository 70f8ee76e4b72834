#include "common/engine/format/ggml_type.h"

#include <bit>
#include <cmath>
#include <cstring>

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

// ggml: MIN(15, (int8_t)(x + 8.5f)), truncation toward zero; x + 8.5 >= 0.5 for
// every in-range input.
uint8_t Q4Nibble(float x) {
  const float t = x + 8.5f;
  if (t >= 15.0f) {
    return 15;
  }
  if (t > 0.0f) {
    return static_cast<uint8_t>(t);
  }
  return 0;  // also NaN
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
    // The signed value of largest magnitude (the first one on ties) maps to -8,
    // so the full [-8, 7] range is used on its side.
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      const float v = xb[j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
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

}  // namespace

absl::StatusOr<GgmlType> GgmlTypeFromId(uint32_t id) {
  switch (id) {
    case static_cast<uint32_t>(GgmlType::kF32):
    case static_cast<uint32_t>(GgmlType::kF16):
    case static_cast<uint32_t>(GgmlType::kQ4_0):
    case static_cast<uint32_t>(GgmlType::kQ8_0):
    case static_cast<uint32_t>(GgmlType::kBF16):
      return static_cast<GgmlType>(id);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown tensor type id ", id, " (supported: 0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 30 BF16)"));
}

absl::string_view GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kBF16:
      return "BF16";
  }
  return "UNKNOWN";
}

absl::StatusOr<GgmlType> GgmlTypeFromName(absl::string_view name) {
  for (GgmlType t :
       {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kBF16}) {
    if (absl::EqualsIgnoreCase(name, GgmlTypeName(t))) {
      return t;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tensor type '", name, "' (valid: F32, F16, BF16, Q8_0, Q4_0)"));
}

int64_t GgmlBlockSize(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return kQK4_0;
    case GgmlType::kQ8_0:
      return kQK8_0;
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 1;
  }
  return 1;
}

int64_t GgmlTypeSize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2;
    case GgmlType::kQ4_0:
      return sizeof(BlockQ4_0);
    case GgmlType::kQ8_0:
      return sizeof(BlockQ8_0);
  }
  return 0;
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
  }
  LOG(FATAL) << "QuantizeRow: bad type " << static_cast<uint32_t>(type);
}

}  // namespace tandem::engine
