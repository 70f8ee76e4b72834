#include "common/engine/format/internal/gguf_common.h"

#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"

namespace tandem::engine::internal {

bool IsValidValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

std::string ValueTypeName(GgufValueType t) { return GgufValueTypeName(t); }

std::string DescribeType(const GgufValue& v) {
  if (v.type == GgufValueType::kArray) {
    return absl::StrCat("array<", ValueTypeName(v.array_type), ">");
  }
  return ValueTypeName(v.type);
}

absl::StatusOr<int64_t> IntValue(const GgufValue& v, absl::string_view what) {
  if (!IsGgufIntegerType(v.type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", DescribeType(v), ", not an integer"));
  }
  if (v.type == GgufValueType::kUint64) {
    if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is uint64 ", v.u, ", which does not fit int64"));
    }
    return static_cast<int64_t>(v.u);
  }
  return v.i;
}

absl::StatusOr<double> FloatValue(const GgufValue& v, absl::string_view what) {
  if (IsGgufFloatType(v.type)) {
    return v.f;
  }
  if (v.type == GgufValueType::kUint64) {
    return static_cast<double>(v.u);
  }
  if (IsGgufIntegerType(v.type)) {
    return static_cast<double>(v.i);
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", DescribeType(v), ", not a number"));
}

absl::StatusOr<uint64_t> AlignmentValue(const GgufValue& v) {
  ASSIGN_OR_RETURN(int64_t a, IntValue(v, "general.alignment"));
  if (a <= 0 || (a & (a - 1)) != 0 || static_cast<uint64_t>(a) > kMaxAlignment) {
    return absl::InvalidArgumentError(absl::StrCat(
        "general.alignment ", a, " is not a power of two in [1, ", kMaxAlignment, "]"));
  }
  return static_cast<uint64_t>(a);
}

std::string DimsString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::Status CheckDims(absl::Span<const int64_t> dims, GgmlType type, int64_t* num_elements,
                       int64_t* num_bytes) {
  if (dims.empty() || dims.size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_dims ", dims.size(), " out of range [1, ", kMaxDims, "]"));
  }
  int64_t n = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", d, " is negative (", dims[d], ")"));
    }
    if (__builtin_mul_overflow(n, dims[d], &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("element count of dims ", DimsString(dims), " overflows int64"));
    }
  }
  const int64_t block = GgmlBlockSize(type);
  if (dims[0] % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row length ", dims[0],
                                                   " is not a multiple of the ", GgmlTypeName(type),
                                                   " block size ", block));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n / block, GgmlTypeSize(type), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("byte size of ", GgmlTypeName(type), " dims ",
                                                   DimsString(dims), " overflows int64"));
  }
  *num_elements = n;
  *num_bytes = bytes;
  return absl::OkStatus();
}

std::string Quoted(absl::string_view name) {
  constexpr size_t kMaxShown = 96;
  std::string shown = absl::CHexEscape(name.substr(0, kMaxShown));
  return absl::StrCat("'", shown, name.size() > kMaxShown ? "'..." : "'");
}

}  // namespace tandem::engine::internal
