// GgufFile: the GGUF reader (mmap, every offset and size bounds-checked).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/fd.h"
#include "common/base/status_macros.h"
#include "common/engine/format/gguf.h"
#include "common/engine/format/internal/gguf_common.h"

namespace tandem::engine {
namespace {

// Each parsed array element costs a GgufValue (~100 bytes), so a file of n bytes
// could otherwise make us allocate ~100n. Real files hold about 1M elements
// (vocabulary, scores, token types, merges).
constexpr uint64_t kMaxMetadataArrayElements = uint64_t{1} << 23;
// Caps on the header counts: far above any real model (hundreds of keys, a few
// thousand tensors), low enough that a hostile count cannot make the parser
// allocate more than a few hundred MB however large the file.
constexpr uint64_t kMaxKvCount = uint64_t{1} << 20;
constexpr uint64_t kMaxTensorCount = uint64_t{1} << 20;
// Smallest encodings, used to reject counts the remaining bytes cannot hold
// before any memory is reserved for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // empty key, type, uint8
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // empty name, n_dims, 1 dim, type, offset

uint64_t MinValueBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:  // u64 length
      return 8;
    case GgufValueType::kArray:  // u32 type + u64 count
      return 12;
  }
  return 1;
}

// Bounds-checked little-endian cursor over the file image. Every failure is a
// DataLoss naming the field and its byte offset.
class Reader {
 public:
  Reader(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }

  absl::Status Truncated(uint64_t need, absl::string_view what) const {
    return absl::DataLossError(
        absl::StrFormat("%s at offset %d: needs %d bytes, only %d left (file is %d bytes)", what,
                        pos_, need, remaining(), size_));
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    if (sizeof(T) > remaining()) {
      return Truncated(sizeof(T), what);
    }
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A GGUF string: u64 length, then that many bytes (not NUL-terminated).
  absl::StatusOr<std::string> ReadString(absl::string_view what) {
    const uint64_t at = pos_;
    if (remaining() < sizeof(uint64_t)) {
      return Truncated(sizeof(uint64_t), absl::StrCat(what, " length"));
    }
    uint64_t len;
    std::memcpy(&len, base_ + pos_, sizeof(len));
    pos_ += sizeof(len);
    if (len > remaining()) {
      return absl::DataLossError(
          absl::StrFormat("%s length %d at offset %d exceeds file size %d (%d bytes left)", what,
                          len, at, size_, remaining()));
    }
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Parses one value of type `type` (already read) into `out`. `budget` counts
// the array elements still allowed in this file.
absl::Status ParseValue(Reader& r, GgufValueType type, int depth, uint64_t* budget,
                        GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufValueType::kUint8: {
      ASSIGN_OR_RETURN(uint8_t v, r.Read<uint8_t>("uint8 value"));
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kInt8: {
      ASSIGN_OR_RETURN(int8_t v, r.Read<int8_t>("int8 value"));
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kUint16: {
      ASSIGN_OR_RETURN(uint16_t v, r.Read<uint16_t>("uint16 value"));
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kInt16: {
      ASSIGN_OR_RETURN(int16_t v, r.Read<int16_t>("int16 value"));
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kUint32: {
      ASSIGN_OR_RETURN(uint32_t v, r.Read<uint32_t>("uint32 value"));
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kInt32: {
      ASSIGN_OR_RETURN(int32_t v, r.Read<int32_t>("int32 value"));
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kUint64: {
      ASSIGN_OR_RETURN(uint64_t v, r.Read<uint64_t>("uint64 value"));
      out->u = v;
      if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        out->i = static_cast<int64_t>(v);
      }
      return absl::OkStatus();
    }
    case GgufValueType::kInt64: {
      ASSIGN_OR_RETURN(int64_t v, r.Read<int64_t>("int64 value"));
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kFloat32: {
      ASSIGN_OR_RETURN(float v, r.Read<float>("float32 value"));
      out->f = v;
      return absl::OkStatus();
    }
    case GgufValueType::kFloat64: {
      ASSIGN_OR_RETURN(double v, r.Read<double>("float64 value"));
      out->f = v;
      return absl::OkStatus();
    }
    case GgufValueType::kBool: {
      ASSIGN_OR_RETURN(uint8_t v, r.Read<uint8_t>("bool value"));
      out->i = v != 0 ? 1 : 0;
      return absl::OkStatus();
    }
    case GgufValueType::kString: {
      ASSIGN_OR_RETURN(out->str, r.ReadString("string value"));
      return absl::OkStatus();
    }
    case GgufValueType::kArray:
      break;
  }
  if (type != GgufValueType::kArray) {
    return absl::InternalError("unreachable value type");
  }

  const uint64_t type_at = r.pos();
  ASSIGN_OR_RETURN(uint32_t raw_type, r.Read<uint32_t>("array element type"));
  if (!internal::IsValidValueType(raw_type)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "array element type %d at offset %d is not a GGUF value type (0..12)", raw_type, type_at));
  }
  const auto elem_type = static_cast<GgufValueType>(raw_type);
  if (elem_type == GgufValueType::kArray && depth + 1 >= internal::kMaxArrayDepth) {
    return absl::InvalidArgumentError(
        absl::StrFormat("array at offset %d nests arrays deeper than %d levels", type_at,
                        internal::kMaxArrayDepth));
  }
  const uint64_t count_at = r.pos();
  ASSIGN_OR_RETURN(uint64_t count, r.Read<uint64_t>("array length"));
  const uint64_t min_bytes = MinValueBytes(elem_type);
  if (count > r.remaining() / min_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "array length %d at offset %d: %d elements of %s need at least %d bytes each, only %d "
        "bytes left (file is %d bytes)",
        count, count_at, count, internal::ValueTypeName(elem_type), min_bytes, r.remaining(),
        r.size()));
  }
  if (count > *budget) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "array length %d at offset %d exceeds the limit of %d metadata array elements per file",
        count, count_at, kMaxMetadataArrayElements));
  }
  *budget -= count;
  out->array_type = elem_type;
  out->array.resize(count);
  for (uint64_t k = 0; k < count; ++k) {
    absl::Status s = ParseValue(r, elem_type, depth + 1, budget, &out->array[k]);
    if (!s.ok()) {
      return base::Annotate(s, absl::StrCat("array element ", k));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// ----------------------------------------------------------------------------
// GgufFile

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  base::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* m = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (m == MAP_FAILED) {
      return absl::ErrnoToStatus(errno, absl::StrCat("mmap ", path));
    }
    file->mapping_ = m;
    file->base_ = static_cast<const uint8_t*>(m);
  }
  absl::Status s = file->Parse();
  if (!s.ok()) {
    return base::Annotate(s, path);
  }
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(absl::Span<const uint8_t> bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->owned_.assign(bytes.begin(), bytes.end());
  file->base_ = file->owned_.data();
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) {
    munmap(mapping_, size_);
  }
}

absl::Status GgufFile::Parse() {
  Reader r(base_, size_);
  if (size_ < sizeof(internal::kGgufMagic)) {
    return absl::DataLossError(
        absl::StrFormat("file is %d bytes, too small for the GGUF magic at offset 0", size_));
  }
  if (std::memcmp(base_, internal::kGgufMagic, sizeof(internal::kGgufMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad magic %02x %02x %02x %02x at offset 0: not a GGUF file (expected \"GGUF\")", base_[0],
        base_[1], base_[2], base_[3]));
  }
  ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("magic"));
  (void)magic;

  ASSIGN_OR_RETURN(version_, r.Read<uint32_t>("version"));
  if (version_ == 1) {
    return absl::InvalidArgumentError(
        "GGUF version 1 at offset 4 is not supported (only versions 2 and 3; re-convert the "
        "model with a current converter)");
  }
  if (version_ != 2 && version_ != 3) {
    const bool swapped = (version_ & 0xFFFF) == 0;
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF version %d at offset 4 is not supported (only versions 2 and 3)%s",
                        version_, swapped ? "; a big-endian file?" : ""));
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("n_tensors"));
  ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("n_kv"));
  if (n_kv > r.remaining() / kMinKvBytes) {
    return absl::DataLossError(absl::StrFormat(
        "n_kv %d at offset 16: metadata entries need at least %d bytes each, only %d bytes left "
        "(file is %d bytes)",
        n_kv, kMinKvBytes, r.remaining(), size_));
  }
  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    return absl::DataLossError(absl::StrFormat(
        "n_tensors %d at offset 8: tensor infos need at least %d bytes each, only %d bytes left "
        "(file is %d bytes)",
        n_tensors, kMinTensorInfoBytes, r.remaining(), size_));
  }
  if (n_kv > kMaxKvCount) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "n_kv %d at offset 16 exceeds the limit of %d metadata entries", n_kv, kMaxKvCount));
  }
  if (n_tensors > kMaxTensorCount) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "n_tensors %d at offset 8 exceeds the limit of %d tensors", n_tensors, kMaxTensorCount));
  }

  // Metadata.
  uint64_t budget = kMaxMetadataArrayElements;
  uint64_t alignment_at = 0;
  metadata_keys_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = r.pos();
    absl::StatusOr<std::string> key = r.ReadString("key");
    if (!key.ok()) {
      return base::Annotate(key.status(), absl::StrCat("metadata key ", i));
    }
    const std::string context = absl::StrCat("metadata key ", i, " (", internal::Quoted(*key), ")");
    const uint64_t type_at = r.pos();
    absl::StatusOr<uint32_t> raw_type = r.Read<uint32_t>("value type");
    if (!raw_type.ok()) {
      return base::Annotate(raw_type.status(), context);
    }
    if (!internal::IsValidValueType(*raw_type)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: value type %d at offset %d is not a GGUF value type (0..12)",
                          context, *raw_type, type_at));
    }
    GgufValue value;
    absl::Status s = ParseValue(r, static_cast<GgufValueType>(*raw_type), 0, &budget, &value);
    if (!s.ok()) {
      return base::Annotate(s, context);
    }
    if (metadata_.count(*key) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s at offset %d: duplicate key", context, key_at));
    }
    if (*key == "general.alignment") {
      alignment_at = type_at;
    }
    metadata_keys_.push_back(*key);
    metadata_.emplace(std::move(*key), std::move(value));
  }
  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    absl::StatusOr<uint64_t> alignment = internal::AlignmentValue(*a);
    if (!alignment.ok()) {
      return base::Annotate(alignment.status(),
                            absl::StrFormat("metadata value at offset %d", alignment_at));
    }
    alignment_ = *alignment;
  }

  // Tensor infos.
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    absl::StatusOr<std::string> name = r.ReadString("name");
    if (!name.ok()) {
      return base::Annotate(name.status(), absl::StrCat("tensor ", i));
    }
    t.name = std::move(*name);
    const std::string context = absl::StrCat("tensor ", i, " (", internal::Quoted(t.name), ")");
    const uint64_t n_dims_at = r.pos();
    absl::StatusOr<uint32_t> n_dims = r.Read<uint32_t>("n_dims");
    if (!n_dims.ok()) {
      return base::Annotate(n_dims.status(), context);
    }
    if (*n_dims == 0 || *n_dims > internal::kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: n_dims %d at offset %d out of range [1, %d]", context, *n_dims,
                          n_dims_at, internal::kMaxDims));
    }
    const uint64_t dims_at = r.pos();
    for (uint32_t d = 0; d < *n_dims; ++d) {
      const uint64_t dim_at = r.pos();
      absl::StatusOr<uint64_t> dim = r.Read<uint64_t>(absl::StrCat("dimension ", d));
      if (!dim.ok()) {
        return base::Annotate(dim.status(), context);
      }
      if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: dimension %d at offset %d is %d, negative as int64", context, d,
                            dim_at, static_cast<int64_t>(*dim)));
      }
      t.dims.push_back(static_cast<int64_t>(*dim));
    }
    const uint64_t type_at = r.pos();
    absl::StatusOr<uint32_t> raw_type = r.Read<uint32_t>("type");
    if (!raw_type.ok()) {
      return base::Annotate(raw_type.status(), context);
    }
    absl::StatusOr<GgmlType> type = GgmlTypeFromId(*raw_type);
    if (!type.ok()) {
      return base::Annotate(type.status(),
                            absl::StrFormat("%s: type at offset %d", context, type_at));
    }
    t.type = *type;
    absl::Status dims_ok = internal::CheckDims(t.dims, t.type, &t.num_elements, &t.num_bytes);
    if (!dims_ok.ok()) {
      return base::Annotate(
          dims_ok, absl::StrFormat("%s: %s %s dims at offset %d", context, GgmlTypeName(t.type),
                                   internal::DimsString(t.dims), dims_at));
    }
    const uint64_t offset_at = r.pos();
    absl::StatusOr<uint64_t> offset = r.Read<uint64_t>("data offset");
    if (!offset.ok()) {
      return base::Annotate(offset.status(), context);
    }
    t.offset = *offset;
    if (t.offset % alignment_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: data offset %d at offset %d is not a multiple of the alignment %d",
                          context, t.offset, offset_at, alignment_));
    }
    if (auto it = tensor_index_.find(t.name); it != tensor_index_.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: duplicate tensor name (also tensor %d), name at offset %d", context,
                          it->second, n_dims_at - 8 - t.name.size()));
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Data section: the header end rounded up to the alignment. A file without
  // tensor data may end before it.
  data_offset_ = r.pos() + internal::PadTo(r.pos(), alignment_);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensorInfo& t = tensors_[i];
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(data_offset_, t.offset, &begin) ||
        __builtin_add_overflow(begin, static_cast<uint64_t>(t.num_bytes), &end)) {
      return absl::DataLossError(absl::StrFormat(
          "tensor %d (%s): data offset %d + %d bytes (data section at offset %d) overflows, past "
          "end of file (%d bytes)",
          i, internal::Quoted(t.name), t.offset, t.num_bytes, data_offset_, size_));
    }
    if (end > size_) {
      return absl::DataLossError(absl::StrFormat(
          "tensor %d (%s): data range [%d, %d) (data section at offset %d + tensor offset %d) "
          "past end of file (%d bytes)",
          i, internal::Quoted(t.name), begin, end, data_offset_, t.offset, size_));
    }
    t.data = base_ + begin;
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::StatusOr<const GgufValue*> FindOrNotFound(const GgufFile& f, absl::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat("metadata key '", key, "' not found"));
  }
  return v;
}

std::string KeyWhat(absl::string_view key) { return absl::StrCat("metadata key '", key, "'"); }

absl::StatusOr<const GgufValue*> FindArray(const GgufFile& f, absl::string_view key) {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(f, key));
  if (v->type != GgufValueType::kArray) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", internal::DescribeType(*v), ", not an array"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  if (v->type != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", internal::DescribeType(*v), ", not a string"));
  }
  return v->str;
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  return internal::IntValue(*v, KeyWhat(key));
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  return internal::FloatValue(*v, KeyWhat(key));
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  if (v->type != GgufValueType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", internal::DescribeType(*v), ", not a bool"));
  }
  return v->i != 0;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindArray(*this, key));
  if (v->array_type != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", internal::DescribeType(*v), ", not array<string>"));
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    out.push_back(e.str);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindArray(*this, key));
  if (!IsGgufFloatType(v->array_type) && !IsGgufIntegerType(v->array_type)) {
    return absl::InvalidArgumentError(absl::StrCat(KeyWhat(key), " is ", internal::DescribeType(*v),
                                                   ", not an array of numbers"));
  }
  std::vector<double> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    ASSIGN_OR_RETURN(double d, internal::FloatValue(e, KeyWhat(key)));
    out.push_back(d);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindArray(*this, key));
  if (!IsGgufIntegerType(v->array_type)) {
    return absl::InvalidArgumentError(absl::StrCat(KeyWhat(key), " is ", internal::DescribeType(*v),
                                                   ", not an array of integers"));
  }
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (size_t k = 0; k < v->array.size(); ++k) {
    absl::StatusOr<int64_t> i =
        internal::IntValue(v->array[k], absl::StrCat(KeyWhat(key), " element ", k));
    if (!i.ok()) {
      return i.status();
    }
    out.push_back(*i);
  }
  return out;
}

const char* GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool IsGgufIntegerType(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool IsGgufFloatType(GgufValueType type) {
  return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

}  // namespace tandem::engine
