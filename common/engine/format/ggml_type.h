#pragma once
// Tensor element types of the GGUF format and their block layouts (as in the
// GGUF spec / ggml): a row of `n` elements of a quantized type is n/block_size
// blocks. Only the types Tandem computes with are listed; any other type id
// read from a file is an error that names it.

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
  kQ8_0 = 8,
  kBF16 = 30,
};

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK8_0 = 32;

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

// Maps a raw type id from a file; unknown ids give InvalidArgument naming the id.
absl::StatusOr<GgmlType> GgmlTypeFromId(uint32_t id);
absl::string_view GgmlTypeName(GgmlType type);
// Parses "F32", "f16", "Q8_0", "q4_0", "BF16".
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
// Converts n floats to `type` (F32, F16, BF16, Q8_0, Q4_0), with the same
// rounding as ggml's reference quantizers (quantize_row_q8_0_ref /
// quantize_row_q4_0_ref), so files match llama.cpp's quantize tool.
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace tandem::engine
