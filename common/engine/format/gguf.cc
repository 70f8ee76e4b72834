#include "common/engine/format/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"

namespace tandem::engine {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kWriteVersion = 3;
constexpr uint32_t kMaxDims = 4;
// Nesting is legal but no real file nests; the cap keeps a hostile file from
// recursing the stack away.
constexpr int kMaxArrayDepth = 8;
// Each parsed array element costs a GgufValue (~100 bytes), so a file of n bytes
// could otherwise make us allocate ~100n. Real files hold about 1M elements
// (vocabulary, scores, token types, merges).
constexpr uint64_t kMaxMetadataArrayElements = uint64_t{1} << 23;
// Caps on the header counts: far above any real model (hundreds of keys, a few
// thousand tensors), low enough that a hostile count cannot make the parser
// allocate more than a few hundred MB however large the file.
constexpr uint64_t kMaxKvCount = uint64_t{1} << 20;
constexpr uint64_t kMaxTensorCount = uint64_t{1} << 20;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
// llama.cpp (GGML_MAX_NAME) rejects tensor names of 64 bytes or more.
constexpr size_t kMaxTensorNameBytes = 63;
// Smallest encodings, used to reject counts the remaining bytes cannot hold
// before any memory is reserved for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // empty key, type, uint8
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // empty name, n_dims, 1 dim, type, offset

bool IsValidValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

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

std::string ValueTypeName(GgufValueType t) { return GgufValueTypeName(t); }

std::string DescribeType(const GgufValue& v) {
  if (v.type == GgufValueType::kArray) {
    return absl::StrCat("array<", ValueTypeName(v.array_type), ">");
  }
  return ValueTypeName(v.type);
}

bool IsIntegerType(GgufValueType t) {
  switch (t) {
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

bool IsFloatType(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

// Integer value of an integer-typed scalar, if it fits int64.
absl::StatusOr<int64_t> IntValue(const GgufValue& v, absl::string_view what) {
  if (!IsIntegerType(v.type)) {
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
  if (IsFloatType(v.type)) {
    return v.f;
  }
  if (v.type == GgufValueType::kUint64) {
    return static_cast<double>(v.u);
  }
  if (IsIntegerType(v.type)) {
    return static_cast<double>(v.i);
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", DescribeType(v), ", not a number"));
}

// general.alignment: any integer type (the spec says uint32), a power of two.
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

// Validates tensor dims and returns the element count and byte size in `type`.
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

// A key or tensor name from the file, as it goes into an error message:
// escaped and cut short, since the file may hold any bytes.
std::string Quoted(absl::string_view name) {
  constexpr size_t kMaxShown = 96;
  std::string shown = absl::CHexEscape(name.substr(0, kMaxShown));
  return absl::StrCat("'", shown, name.size() > kMaxShown ? "'..." : "'");
}

uint64_t PadTo(uint64_t n, uint64_t alignment) { return (alignment - n % alignment) % alignment; }

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
  if (!IsValidValueType(raw_type)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "array element type %d at offset %d is not a GGUF value type (0..12)", raw_type, type_at));
  }
  const auto elem_type = static_cast<GgufValueType>(raw_type);
  if (elem_type == GgufValueType::kArray && depth + 1 >= kMaxArrayDepth) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "array at offset %d nests arrays deeper than %d levels", type_at, kMaxArrayDepth));
  }
  const uint64_t count_at = r.pos();
  ASSIGN_OR_RETURN(uint64_t count, r.Read<uint64_t>("array length"));
  const uint64_t min_bytes = MinValueBytes(elem_type);
  if (count > r.remaining() / min_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "array length %d at offset %d: %d elements of %s need at least %d bytes each, only %d "
        "bytes left (file is %d bytes)",
        count, count_at, count, ValueTypeName(elem_type), min_bytes, r.remaining(), r.size()));
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
        absl::StrCat("value ", v.i, " out of range for ", ValueTypeName(v.type)));
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
  if (!IsValidValueType(static_cast<uint32_t>(v.array_type))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "array element type ", static_cast<uint32_t>(v.array_type), " is not a GGUF value type"));
  }
  if (v.array_type == GgufValueType::kArray && depth + 1 >= kMaxArrayDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("arrays nested deeper than ", kMaxArrayDepth, " levels"));
  }
  Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
  Put<uint64_t>(out, v.array.size());
  for (size_t k = 0; k < v.array.size(); ++k) {
    const GgufValue& e = v.array[k];
    if (e.type != v.array_type) {
      return absl::InvalidArgumentError(absl::StrCat("array element ", k, " is ", DescribeType(e),
                                                     " in an array of ",
                                                     ValueTypeName(v.array_type)));
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

// Closes a file descriptor on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) {
      close(fd_);
    }
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

// ----------------------------------------------------------------------------
// GgufFile

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
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
  if (size_ < sizeof(kMagic)) {
    return absl::DataLossError(
        absl::StrFormat("file is %d bytes, too small for the GGUF magic at offset 0", size_));
  }
  if (std::memcmp(base_, kMagic, sizeof(kMagic)) != 0) {
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
    const std::string context = absl::StrCat("metadata key ", i, " (", Quoted(*key), ")");
    const uint64_t type_at = r.pos();
    absl::StatusOr<uint32_t> raw_type = r.Read<uint32_t>("value type");
    if (!raw_type.ok()) {
      return base::Annotate(raw_type.status(), context);
    }
    if (!IsValidValueType(*raw_type)) {
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
    absl::StatusOr<uint64_t> alignment = AlignmentValue(*a);
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
    const std::string context = absl::StrCat("tensor ", i, " (", Quoted(t.name), ")");
    const uint64_t n_dims_at = r.pos();
    absl::StatusOr<uint32_t> n_dims = r.Read<uint32_t>("n_dims");
    if (!n_dims.ok()) {
      return base::Annotate(n_dims.status(), context);
    }
    if (*n_dims == 0 || *n_dims > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: n_dims %d at offset %d out of range [1, %d]", context, *n_dims,
                          n_dims_at, kMaxDims));
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
      return base::Annotate(type.status(), absl::StrFormat("%s: type at offset %d", context, type_at));
    }
    t.type = *type;
    absl::Status dims_ok = CheckDims(t.dims, t.type, &t.num_elements, &t.num_bytes);
    if (!dims_ok.ok()) {
      return base::Annotate(dims_ok, absl::StrFormat("%s: %s %s dims at offset %d", context,
                                               GgmlTypeName(t.type), DimsString(t.dims), dims_at));
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
  data_offset_ = r.pos() + PadTo(r.pos(), alignment_);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensorInfo& t = tensors_[i];
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(data_offset_, t.offset, &begin) ||
        __builtin_add_overflow(begin, static_cast<uint64_t>(t.num_bytes), &end)) {
      return absl::DataLossError(absl::StrFormat(
          "tensor %d (%s): data offset %d + %d bytes (data section at offset %d) overflows, past "
          "end of file (%d bytes)",
          i, Quoted(t.name), t.offset, t.num_bytes, data_offset_, size_));
    }
    if (end > size_) {
      return absl::DataLossError(absl::StrFormat(
          "tensor %d (%s): data range [%d, %d) (data section at offset %d + tensor offset %d) "
          "past end of file (%d bytes)",
          i, Quoted(t.name), begin, end, data_offset_, t.offset, size_));
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
        absl::StrCat(KeyWhat(key), " is ", DescribeType(*v), ", not an array"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  if (v->type != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", DescribeType(*v), ", not a string"));
  }
  return v->str;
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  return IntValue(*v, KeyWhat(key));
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  return FloatValue(*v, KeyWhat(key));
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindOrNotFound(*this, key));
  if (v->type != GgufValueType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", DescribeType(*v), ", not a bool"));
  }
  return v->i != 0;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindArray(*this, key));
  if (v->array_type != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", DescribeType(*v), ", not array<string>"));
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
  if (!IsFloatType(v->array_type) && !IsIntegerType(v->array_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", DescribeType(*v), ", not an array of numbers"));
  }
  std::vector<double> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    ASSIGN_OR_RETURN(double d, FloatValue(e, KeyWhat(key)));
    out.push_back(d);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, FindArray(*this, key));
  if (!IsIntegerType(v->array_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyWhat(key), " is ", DescribeType(*v), ", not an array of integers"));
  }
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (size_t k = 0; k < v->array.size(); ++k) {
    absl::StatusOr<int64_t> i = IntValue(v->array[k], absl::StrCat(KeyWhat(key), " element ", k));
    if (!i.ok()) {
      return i.status();
    }
    out.push_back(*i);
  }
  return out;
}

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
  absl::Status s = CheckDims(dims, type, &num_elements, &num_bytes);
  if (!s.ok()) {
    return base::Annotate(s, absl::StrCat("tensor '", name, "'"));
  }
  if (static_cast<uint64_t>(num_bytes) != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", GgmlTypeName(type), " ",
                                                   DimsString(dims), " needs ", num_bytes,
                                                   " bytes, got ", data.size()));
  }
  tensors_.push_back(Tensor{name, type, std::move(dims), std::move(data)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorFromF32(const std::string& name, GgmlType type,
                                          std::vector<int64_t> dims, absl::Span<const float> data) {
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  absl::Status s = CheckDims(dims, type, &num_elements, &num_bytes);
  if (!s.ok()) {
    return base::Annotate(s, absl::StrCat("tensor '", name, "'"));
  }
  if (static_cast<uint64_t>(num_elements) != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': dims ", DimsString(dims),
                                                   " hold ", num_elements, " elements, got ",
                                                   data.size()));
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
      return AlignmentValue(v);
    }
  }
  GgufValue v = Scalar(GgufValueType::kUint32);
  v.i = alignment_;
  return AlignmentValue(v);
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::SerializeHeader() const {
  ASSIGN_OR_RETURN(const uint64_t alignment, Alignment());
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
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
    offset += t.data.size() + PadTo(t.data.size(), alignment);
  }
  out.resize(out.size() + PadTo(out.size(), alignment), 0);
  return out;
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Serialize() const {
  ASSIGN_OR_RETURN(std::vector<uint8_t> out, SerializeHeader());
  ASSIGN_OR_RETURN(const uint64_t alignment, Alignment());
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(out.size() + PadTo(t.data.size(), alignment), 0);
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
    for (uint64_t pad = PadTo(t.data.size(), alignment); ok && pad > 0;) {
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

// ----------------------------------------------------------------------------
// Quantizer

namespace {

bool EndsWith(absl::string_view s, absl::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool Contains(absl::string_view s, absl::string_view part) {
  return s.find(part) != absl::string_view::npos;
}

// llama.cpp's tensor_allows_quantization (llama-quant.cpp), less the options
// we don't have.
bool AllowsQuantization(const GgufTensorInfo& t) {
  const absl::string_view name = t.name;
  if (!EndsWith(name, "weight") || t.dims.size() < 2) {
    return false;
  }
  for (absl::string_view excluded : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel",
                                     "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight",
                                     "time_mix_", "attn_rel_b.weight", ".position_embd."}) {
    if (Contains(name, excluded)) {
      return false;
    }
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

// The type `t` gets in a `target` file, or its own type when it is kept.
GgmlType TargetTypeFor(const GgufTensorInfo& t, GgmlType target, bool has_output) {
  if (!AllowsQuantization(t)) {
    return t.type;
  }
  GgmlType type = target;
  const bool is_output =
      t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
  if (is_output && target == GgmlType::kQ4_0) {
    type = GgmlType::kQ8_0;
  }
  if (t.dims[0] % GgmlBlockSize(type) != 0) {
    return t.type;  // llama.cpp has no fallback for Q4_0/Q8_0 and fails; we keep it
  }
  return type;
}

}  // namespace

absl::Status QuantizeGgufFile(const std::string& in, const std::string& out, GgmlType type,
                              GgufQuantizeReport* report) {
  if (type != GgmlType::kQ8_0 && type != GgmlType::kQ4_0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot quantize to ", GgmlTypeName(type), " (valid targets: Q8_0, Q4_0)"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(in));
  GgufQuantizeReport local;
  GgufQuantizeReport& rep = report != nullptr ? *report : local;
  rep = GgufQuantizeReport{};

  GgufWriter writer;
  for (const std::string& key : file->metadata_keys()) {
    writer.SetValue(key, *file->Find(key));
  }
  writer.SetUint32("general.file_type",
                   type == GgmlType::kQ8_0 ? kLlamaFtypeMostlyQ8_0 : kLlamaFtypeMostlyQ4_0);
  writer.SetUint32("general.quantization_version", 2);  // GGML_QNT_VERSION

  const bool has_output = file->FindTensor("output.weight") != nullptr;
  const auto& tensors = file->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = tensors[i];
    const GgmlType to = TargetTypeFor(t, type, has_output);
    if (to == t.type) {
      RETURN_IF_ERROR(writer.AddTensor(t.name, t.type, t.dims,
                                       std::vector<uint8_t>(t.data, t.data + t.num_bytes)));
    } else {
      if (t.type != GgmlType::kF32 && t.type != GgmlType::kF16 && t.type != GgmlType::kBF16) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: tensor %d (%s) is already %s; requantizing to %s is not supported (quantize "
            "from an F32, F16 or BF16 file)",
            in, i, Quoted(t.name), GgmlTypeName(t.type), GgmlTypeName(to)));
      }
      const int64_t row = t.dims[0];
      std::vector<float> values(t.num_elements);
      if (row > 0) {
        const int64_t row_bytes = GgmlRowBytes(t.type, row);
        for (int64_t r = 0; r < t.num_elements / row; ++r) {
          DequantizeRow(t.type, t.data + r * row_bytes, values.data() + r * row, row);
        }
      }
      RETURN_IF_ERROR(writer.AddTensorFromF32(t.name, to, t.dims, values));
    }
    GgufQuantizeTensorReport line;
    line.name = t.name;
    line.dims = t.dims;
    line.from = t.type;
    line.to = to;
    line.bytes_before = t.num_bytes;
    int64_t ignored = 0;
    RETURN_IF_ERROR(CheckDims(t.dims, to, &ignored, &line.bytes_after));
    rep.bytes_before += line.bytes_before;
    rep.bytes_after += line.bytes_after;
    rep.tensors.push_back(std::move(line));
  }
  RETURN_IF_ERROR(writer.WriteFile(out));

  std::error_code ec;
  rep.file_bytes_before = static_cast<int64_t>(std::filesystem::file_size(in, ec));
  rep.file_bytes_after = static_cast<int64_t>(std::filesystem::file_size(out, ec));
  return absl::OkStatus();
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

}  // namespace tandem::engine
