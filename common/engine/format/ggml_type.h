#pragma once
// Tensor element types of the GGUF format and their block layouts (as in the
// GGUF spec / ggml): a row of `n` elements of a quantized type is n/block_size
// blocks. Only the types Tandem computes with are listed; any other type id
// read from a file is an error that names it. The quantized layouts are
// ggml's (ggml-common.h block_q*), all little-endian with fp16 scales.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::engine {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK_K = 256;       // elements per K-quant super-block
inline constexpr int kKScaleSize = 12;  // packed 6-bit scales/mins of Q4_K/Q5_K

// Q4_0 block: d (fp16 scale) then 16 bytes of nibbles; element j (< 16) is the
// low nibble of qs[j], element j+16 its high nibble; value = (q - 8) * d.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q8_0 block: d (fp16 scale) then 32 int8; value = q * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_1 block: d, m (fp16) then nibbles laid out as Q4_0; value = q * d + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0 block: d, qh (bit j = 5th bit of element j, little-endian u32), then
// the low nibbles laid out as Q4_0; value = (q - 16) * d.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1 block: d, m, qh, qs as Q5_0; value = q * d + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q4_K super-block of 256: 8 sub-blocks of 32 with 6-bit scale sc and min m
// packed in `scales` (see KQuantScaleMin); value = d * sc * q - dmin * m.
// Group g (< 4) of 64 elements: element 64g + l (l < 32) is the low nibble of
// qs[32g + l], element 64g + 32 + l its high nibble (sub-blocks 2g, 2g + 1).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: Q4_K plus a 5th bit: element 64g + l takes bit 2g of qh[l], element
// 64g + 32 + l bit 2g + 1.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K super-block: 16 sub-blocks of 16 with int8 scales; value =
// d * scales[s] * (q - 32), q 6 bits. Half h (< 2) of 128 elements uses
// ql[64h..], qh[32h..], scales[8h..]; for l < 32 its elements l, l + 32,
// l + 64, l + 96 are the low nibbles of ql[l], ql[l + 32], the high nibbles of
// ql[l], ql[l + 32], with high bits 2 at shifts 0, 2, 4, 6 of qh[l].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Sub-block j (< 8) scale and min of a Q4_K/Q5_K `scales` array (ggml's
// get_scale_min_k4).
inline void KQuantScaleMin(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: the "level" types. Seen as 32-element
// blocks (K-quant sub-blocks), each value is
//   (d * sc[j / 16]) * q[j] + m,
// q unsigned (0..31) except for Q5_0 (q - 16) and Q6_K (q - 32); sc is 1
// except for K-quants (Q4_K/Q5_K: the 6-bit sub-block scale, Q6_K: the int8
// scale of each 16-half); m is the block min (Q4_1/Q5_1), -dmin * min
// (Q4_K/Q5_K) or absent (0). In this form and order ggml computes them.
bool IsLevelType(GgmlType type);

struct LevelBlock {
  int8_t q[32];
  int16_t sc[2];
  float d;
  float m;
};

// Block b (32 elements) of a row of a level type.
void UnpackLevelBlock(GgmlType type, const uint8_t* row, int64_t b, LevelBlock* out);

// Maps a raw type id from a file; unknown ids give InvalidArgument naming the id.
absl::StatusOr<GgmlType> GgmlTypeFromId(uint32_t id);
absl::string_view GgmlTypeName(GgmlType type);
// Parses a type name, case-insensitively ("F32", "q4_0", "Q6_K", ...).
absl::StatusOr<GgmlType> GgmlTypeFromName(absl::string_view name);

int64_t GgmlBlockSize(GgmlType type);   // elements per block (1 for float types)
int64_t GgmlTypeSize(GgmlType type);    // bytes per block
// Bytes of a row of n elements; n must be a multiple of the block size.
int64_t GgmlRowBytes(GgmlType type, int64_t n);

// fp16 / bf16 <-> fp32 scalar conversions (round to nearest even).
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
float Bf16ToFp32(uint16_t h);
uint16_t Fp32ToBf16(float f);

// Converts a row of n elements of `type` at `src` to float. n must be a
// multiple of the block size.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);
// Converts n floats to `type` (any listed type), with the same algorithm as
// ggml's reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_0_ref,
// ..., quantize_row_q6_K_ref; K-quants without an importance matrix), so
// files match llama.cpp's quantize tool (up to fp32 contraction: llama.cpp
// built with FMA may round a few K-quant levels differently).
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace tandem::engine
