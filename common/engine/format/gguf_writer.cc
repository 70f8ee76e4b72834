// GgufWriter: builds a GGUF v3 file in memory or streams it to disk.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/format/gguf.h"
#include "common/engine/format/internal/gguf_common.h"

namespace tandem::engine {
namespace {

constexpr uint32_t kWriteVersion = 3;
// llama.cpp (GGML_MAX_NAME) rejects tensor names of 64 bytes or more.
constexpr size_t kMaxTensorNameBytes = 63;

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

void PutString(std::vector<uint8_t>* out, absl::string_view s) {
  Put<uint64_t>(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}

absl::Status CheckRange(const GgufValue& v, int64_t lo, int64_t hi) {
  if (v.i < lo || v.i > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("value ", v.i, " out of range for ", internal::ValueTypeName(v.type)));
  }
  return absl::OkStatus();
}

// Writes the payload of `v` (no type tag: the caller wrote it).
absl::Status PutValue(std::vector<uint8_t>* out, const GgufValue& v, int depth) {
  switch (v.type) {
    case GgufValueType::kUint8:
      RETURN_IF_ERROR(CheckRange(v, 0, std::numeric_limits<uint8_t>::max()));
      Put<uint8_t>(out, static_cast<uint8_t>(v.i));
      return absl::OkStatus();
    case GgufValueType::kInt8:
      RETURN_IF_ERROR(
          CheckRange(v, std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()));
      Put<int8_t>(out, static_cast<int8_t>(v.i));
      return absl::OkStatus();
    case GgufValueType::kUint16:
      RETURN_IF_ERROR(CheckRange(v, 0, std::numeric_limits<uint16_t>::max()));
      Put<uint16_t>(out, static_cast<uint16_t>(v.i));
      return absl::OkStatus();
    case GgufValueType::kInt16:
      RETURN_IF_ERROR(
          CheckRange(v, std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()));
      Put<int16_t>(out, static_cast<int16_t>(v.i));
      return absl::OkStatus();
    case GgufValueType::kUint32:
      RETURN_IF_ERROR(CheckRange(v, 0, std::numeric_limits<uint32_t>::max()));
      Put<uint32_t>(out, static_cast<uint32_t>(v.i));
      return absl::OkStatus();
    case GgufValueType::kInt32:
      RETURN_IF_ERROR(
          CheckRange(v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
      Put<int32_t>(out, static_cast<int32_t>(v.i));
      return absl::OkStatus();
    case GgufValueType::kUint64:
      Put<uint64_t>(out, v.u);
      return absl::OkStatus();
    case GgufValueType::kInt64:
      Put<int64_t>(out, v.i);
      return absl::OkStatus();
    case GgufValueType::kFloat32:
      Put<float>(out, static_cast<float>(v.f));
      return absl::OkStatus();
    case GgufValueType::kFloat64:
      Put<double>(out, v.f);
      return absl::OkStatus();
    case GgufValueType::kBool:
      Put<uint8_t>(out, v.i != 0 ? 1 : 0);
      return absl::OkStatus();
    case GgufValueType::kString:
      PutString(out, v.str);
      return absl::OkStatus();
    case GgufValueType::kArray:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("value type ", static_cast<uint32_t>(v.type), " is not a GGUF value type"));
  }
  if (!internal::IsValidValueType(static_cast<uint32_t>(v.array_type))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "array element type ", static_cast<uint32_t>(v.array_type), " is not a GGUF value type"));
  }
  if (v.array_type == GgufValueType::kArray && depth + 1 >= internal::kMaxArrayDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("arrays nested deeper than ", internal::kMaxArrayDepth, " levels"));
  }
  Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
  Put<uint64_t>(out, v.array.size());
  for (size_t k = 0; k < v.array.size(); ++k) {
    const GgufValue& e = v.array[k];
    if (e.type != v.array_type) {
      return absl::InvalidArgumentError(absl::StrCat("array element ", k, " is ",
                                                     internal::DescribeType(e), " in an array of ",
                                                     internal::ValueTypeName(v.array_type)));
    }
    absl::Status s = PutValue(out, e, depth + 1);
    if (!s.ok()) {
      return base::Annotate(s, absl::StrCat("array element ", k));
    }
  }
  return absl::OkStatus();
}

GgufValue Scalar(GgufValueType type) {
  GgufValue v;
  v.type = type;
  return v;
}

}  // namespace

// ----------------------------------------------------------------------------
// GgufWriter

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::SetString(const std::string& key, const std::string& value) {
  GgufValue v = Scalar(GgufValueType::kString);
  v.str = value;
  Set(key, std::move(v));
}

void GgufWriter::SetUint32(const std::string& key, uint32_t value) {
  GgufValue v = Scalar(GgufValueType::kUint32);
  v.i = value;
  Set(key, std::move(v));
}

void GgufWriter::SetInt32(const std::string& key, int32_t value) {
  GgufValue v = Scalar(GgufValueType::kInt32);
  v.i = value;
  Set(key, std::move(v));
}

void GgufWriter::SetUint64(const std::string& key, uint64_t value) {
  GgufValue v = Scalar(GgufValueType::kUint64);
  v.u = value;
  if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    v.i = static_cast<int64_t>(value);
  }
  Set(key, std::move(v));
}

void GgufWriter::SetFloat32(const std::string& key, float value) {
  GgufValue v = Scalar(GgufValueType::kFloat32);
  v.f = value;
  Set(key, std::move(v));
}

void GgufWriter::SetBool(const std::string& key, bool value) {
  GgufValue v = Scalar(GgufValueType::kBool);
  v.i = value ? 1 : 0;
  Set(key, std::move(v));
}

void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  GgufValue v = Scalar(GgufValueType::kArray);
  v.array_type = GgufValueType::kString;
  v.array.reserve(values.size());
  for (const std::string& s : values) {
    GgufValue e = Scalar(GgufValueType::kString);
    e.str = s;
    v.array.push_back(std::move(e));
  }
  Set(key, std::move(v));
}

void GgufWriter::SetFloat32Array(const std::string& key, const std::vector<float>& values) {
  GgufValue v = Scalar(GgufValueType::kArray);
  v.array_type = GgufValueType::kFloat32;
  v.array.reserve(values.size());
  for (float f : values) {
    GgufValue e = Scalar(GgufValueType::kFloat32);
    e.f = f;
    v.array.push_back(std::move(e));
  }
  Set(key, std::move(v));
}

void GgufWriter::SetInt32Array(const std::string& key, const std::vector<int32_t>& values) {
  GgufValue v = Scalar(GgufValueType::kArray);
  v.array_type = GgufValueType::kInt32;
  v.array.reserve(values.size());
  for (int32_t i : values) {
    GgufValue e = Scalar(GgufValueType::kInt32);
    e.i = i;
    v.array.push_back(std::move(e));
  }
  Set(key, std::move(v));
}

void GgufWriter::SetValue(const std::string& key, const GgufValue& value) { Set(key, value); }

void GgufWriter::SetAlignment(uint32_t alignment) {
  alignment_ = alignment;
  SetUint32("general.alignment", alignment);
}

absl::Status GgufWriter::AddTensor(const std::string& name, GgmlType type,
                                   std::vector<int64_t> dims, std::vector<uint8_t> data) {
  if (name.empty() || name.size() > kMaxTensorNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor name '", name, "' is ", name.size(),
                                                   " bytes; must be 1..", kMaxTensorNameBytes));
  }
  for (const Tensor& t : tensors_) {
    if (t.name == name) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", name, "'"));
    }
  }
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  absl::Status s = internal::CheckDims(dims, type, &num_elements, &num_bytes);
  if (!s.ok()) {
    return base::Annotate(s, absl::StrCat("tensor '", name, "'"));
  }
  if (static_cast<uint64_t>(num_bytes) != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", GgmlTypeName(type), " ",
                                                   internal::DimsString(dims), " needs ", num_bytes,
                                                   " bytes, got ", data.size()));
  }
  tensors_.push_back(Tensor{name, type, std::move(dims), std::move(data)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorFromF32(const std::string& name, GgmlType type,
                                          std::vector<int64_t> dims, absl::Span<const float> data) {
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  absl::Status s = internal::CheckDims(dims, type, &num_elements, &num_bytes);
  if (!s.ok()) {
    return base::Annotate(s, absl::StrCat("tensor '", name, "'"));
  }
  if (static_cast<uint64_t>(num_elements) != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': dims ",
                                                   internal::DimsString(dims), " hold ",
                                                   num_elements, " elements, got ", data.size()));
  }
  std::vector<uint8_t> bytes(num_bytes);
  const int64_t row = dims[0];
  if (row > 0) {
    const int64_t row_bytes = GgmlRowBytes(type, row);
    for (int64_t r = 0; r < num_elements / row; ++r) {
      QuantizeRow(type, data.data() + r * row, bytes.data() + r * row_bytes, row);
    }
  }
  return AddTensor(name, type, std::move(dims), std::move(bytes));
}

absl::StatusOr<uint64_t> GgufWriter::Alignment() const {
  for (const auto& [k, v] : metadata_) {
    if (k == "general.alignment") {
      return internal::AlignmentValue(v);
    }
  }
  GgufValue v = Scalar(GgufValueType::kUint32);
  v.i = alignment_;
  return internal::AlignmentValue(v);
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::SerializeHeader() const {
  ASSIGN_OR_RETURN(const uint64_t alignment, Alignment());
  std::vector<uint8_t> out(internal::kGgufMagic,
                           internal::kGgufMagic + sizeof(internal::kGgufMagic));
  Put<uint32_t>(&out, kWriteVersion);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    PutString(&out, key);
    Put<uint32_t>(&out, static_cast<uint32_t>(value.type));
    absl::Status s = PutValue(&out, value, 0);
    if (!s.ok()) {
      return base::Annotate(s, absl::StrCat("metadata key '", key, "'"));
    }
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, t.dims.size());
    for (int64_t d : t.dims) {
      Put<uint64_t>(&out, static_cast<uint64_t>(d));
    }
    Put<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&out, offset);
    offset += t.data.size() + internal::PadTo(t.data.size(), alignment);
  }
  out.resize(out.size() + internal::PadTo(out.size(), alignment), 0);
  return out;
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Serialize() const {
  ASSIGN_OR_RETURN(std::vector<uint8_t> out, SerializeHeader());
  ASSIGN_OR_RETURN(const uint64_t alignment, Alignment());
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(out.size() + internal::PadTo(t.data.size(), alignment), 0);
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> header, SerializeHeader());
  ASSIGN_OR_RETURN(const uint64_t alignment, Alignment());
  const std::string tmp = absl::StrCat(path, ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("create ", tmp));
  }
  static const uint8_t kZeros[64] = {};
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const Tensor& t : tensors_) {
    if (!ok) {
      break;
    }
    if (!t.data.empty()) {
      ok = std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size();
    }
    for (uint64_t pad = internal::PadTo(t.data.size(), alignment); ok && pad > 0;) {
      const size_t n = pad < sizeof(kZeros) ? pad : sizeof(kZeros);
      ok = std::fwrite(kZeros, 1, n, f) == n;
      pad -= n;
    }
  }
  int write_errno = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    write_errno = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return absl::ErrnoToStatus(write_errno != 0 ? write_errno : EIO, absl::StrCat("write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return absl::ErrnoToStatus(e, absl::StrCat("rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine
