#pragma once
// Pieces the GGUF reader, writer and quantizer share: format limits, value
// conversions, dims checks and error-message helpers.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/engine/format/gguf.h"

namespace tandem::engine::internal {

inline constexpr char kGgufMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kMaxDims = 4;
// Nesting is legal but no real file nests; the cap keeps a hostile file from
// recursing the stack away.
inline constexpr int kMaxArrayDepth = 8;
inline constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

bool IsValidValueType(uint32_t t);
std::string ValueTypeName(GgufValueType t);
// "uint32", or "array<string>" for arrays.
std::string DescribeType(const GgufValue& v);

// Integer value of an integer-typed scalar, if it fits int64.
absl::StatusOr<int64_t> IntValue(const GgufValue& v, absl::string_view what);
absl::StatusOr<double> FloatValue(const GgufValue& v, absl::string_view what);
// general.alignment: any integer type (the spec says uint32), a power of two.
absl::StatusOr<uint64_t> AlignmentValue(const GgufValue& v);

std::string DimsString(absl::Span<const int64_t> dims);
// Validates tensor dims and returns the element count and byte size in `type`.
absl::Status CheckDims(absl::Span<const int64_t> dims, GgmlType type, int64_t* num_elements,
                       int64_t* num_bytes);

// A key or tensor name from the file, as it goes into an error message:
// escaped and cut short, since the file may hold any bytes.
std::string Quoted(absl::string_view name);

// Bytes of padding that bring `n` up to a multiple of `alignment`.
inline uint64_t PadTo(uint64_t n, uint64_t alignment) {
  return (alignment - n % alignment) % alignment;
}

}  // namespace tandem::engine::internal
