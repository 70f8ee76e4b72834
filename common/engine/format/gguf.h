#pragma once
// GGUF v2/v3 reader (mmap, every offset and size bounds-checked) and writer.
//
// GgufFile is immutable after Open and safe to read from any thread. Tensor
// data pointers stay valid for the GgufFile's lifetime.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/engine/format/ggml_type.h"

namespace tandem::engine {

enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

// "uint8", "float32", "string", "array", ...
const char* GgufValueTypeName(GgufValueType type);
// The eight integer types (uint8 ... int64; bool is not one of them), and float32 / float64.
bool IsGgufIntegerType(GgufValueType type);
bool IsGgufFloatType(GgufValueType type);

// One metadata value. Arrays hold elements of a single type; nested arrays are
// allowed by the spec and kept.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  // Scalars: integers in `i` (or `u` for uint64; the reader also mirrors a
  // uint64 that fits into `i`), floats in `f`, bool in `i` (0 / 1).
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string str;
  GgufValueType array_type = GgufValueType::kUint8;
  std::vector<GgufValue> array;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;   // ggml order: dims[0] is the contiguous (row) length
  uint64_t offset = 0;         // relative to the start of the data section
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
};

class GgufFile {
 public:
  // Maps and parses `path`. Errors (InvalidArgument / NotFound / DataLoss) name
  // the field and byte offset that failed ("tensor 3 ('blk.0.attn_q.weight'):
  // data range [1024, 2048) ... past end of file (1500 bytes)"). DataLoss: the
  // file ends before a field, a count or length cannot fit in the bytes left,
  // or tensor data lies past the end; InvalidArgument: a value is malformed
  // (magic, version, type id, n_dims, dims, alignment, duplicates).
  // A file changed or truncated by someone else while mapped is not detected.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (copied). For tests and fuzzing.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(absl::Span<const uint8_t> bytes);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  // Metadata keys in file order (metadata() is sorted); the quantizer copies in this order.
  const std::vector<std::string>& metadata_keys() const { return metadata_keys_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  const GgufValue* Find(absl::string_view key) const;
  const GgufTensorInfo* FindTensor(absl::string_view name) const;

  // Typed getters: NotFound if absent, InvalidArgument naming key and actual
  // type if of the wrong kind. Integer getters accept any integer type whose
  // value fits.
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;  // any float or int type
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;          // munmap on destruction when set
  std::vector<uint8_t> owned_;       // FromBuffer copy
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<std::string> metadata_keys_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file: metadata in insertion order, tensors laid out aligned.
class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& value);
  void SetUint32(const std::string& key, uint32_t value);
  void SetInt32(const std::string& key, int32_t value);
  void SetUint64(const std::string& key, uint64_t value);
  void SetFloat32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetFloat32Array(const std::string& key, const std::vector<float>& values);
  void SetInt32Array(const std::string& key, const std::vector<int32_t>& values);
  // Copies any value read from a GgufFile (used by the quantizer to keep all metadata).
  void SetValue(const std::string& key, const GgufValue& value);
  void SetAlignment(uint32_t alignment);  // also writes general.alignment

  // `data` holds the tensor in `type` (GgmlRowBytes(type, dims[0]) * rows bytes).
  absl::Status AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                         std::vector<uint8_t> data);
  // Converts float data to `type` with QuantizeRow.
  absl::Status AddTensorFromF32(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                                absl::Span<const float> data);

  // Errors: InvalidArgument for a bad general.alignment or a malformed value
  // (array element of the wrong type, integer out of range for its type).
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;
  // Streams the file to `path` via a temporary file renamed into place.
  absl::Status WriteFile(const std::string& path) const;

 private:
  void Set(const std::string& key, GgufValue value);
  absl::StatusOr<uint64_t> Alignment() const;
  // Header, metadata, tensor infos and the padding up to the data section.
  absl::StatusOr<std::vector<uint8_t>> SerializeHeader() const;

  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

// One tensor of a QuantizeGgufFile run.
struct GgufQuantizeTensorReport {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType from = GgmlType::kF32;
  GgmlType to = GgmlType::kF32;
  int64_t bytes_before = 0;
  int64_t bytes_after = 0;
};

struct GgufQuantizeReport {
  std::vector<GgufQuantizeTensorReport> tensors;
  int64_t bytes_before = 0;  // tensor data only
  int64_t bytes_after = 0;
  int64_t file_bytes_before = 0;
  int64_t file_bytes_after = 0;
};

// llama.cpp's general.file_type values (LLAMA_FTYPE_*) for the types we write.
inline constexpr uint32_t kLlamaFtypeMostlyQ4_0 = 2;
inline constexpr uint32_t kLlamaFtypeMostlyQ4_1 = 3;
inline constexpr uint32_t kLlamaFtypeMostlyQ8_0 = 7;
inline constexpr uint32_t kLlamaFtypeMostlyQ5_0 = 8;
inline constexpr uint32_t kLlamaFtypeMostlyQ5_1 = 9;
inline constexpr uint32_t kLlamaFtypeMostlyQ4_K_S = 14;
inline constexpr uint32_t kLlamaFtypeMostlyQ4_K_M = 15;
inline constexpr uint32_t kLlamaFtypeMostlyQ5_K_S = 16;
inline constexpr uint32_t kLlamaFtypeMostlyQ6_K = 18;

// What QuantizeGgufFile makes: every quantizable tensor in one type (Q8_0,
// Q4_0, and the "pure" Q4_1 ... Q6_K), or llama.cpp's mixed Q4_K_M recipe (no
// importance matrix).
enum class QuantRecipe { kQ8_0, kQ4_0, kQ4_K_M, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K };
// Parses "Q8_0", "Q4_0", "Q4_K_M", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K",
// "Q6_K" (case-insensitive); anything else is InvalidArgument listing them.
absl::StatusOr<QuantRecipe> QuantRecipeFromName(absl::string_view name);
absl::string_view QuantRecipeName(QuantRecipe recipe);

// The type each tensor of `file` gets under `recipe`, in file order (its own
// type when it is kept), as llama.cpp's llama_tensor_get_type decides:
//  - quantizable: tensors named "*weight" with n_dims >= 2, except
//    "*_norm.weight", "ffn_gate_inp.weight" (MoE router), position /
//    token-type embeddings and the other small tensors llama.cpp keeps; all
//    other tensors (1-D norms, biases, rope_freqs) are kept.
//  - Q8_0 / Q4_0: that type, but output.weight (or token_embd.weight when
//    there is no output.weight, i.e. tied embeddings) is Q8_0 in a Q4_0 file
//    (llama.cpp wants Q6_K there; rows not a multiple of 256 fall back to
//    Q8_0 in llama.cpp too).
//  - Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: that type for every quantizable
//    tensor, the output tensor included, as llama.cpp's quantize does with
//    `--pure` (no k-quant mixture). Note llama.cpp's own "Q4_K" / "Q5_K"
//    names are aliases of its Q4_K_M / Q5_K_M mixtures; ours are pure. Rows
//    not a multiple of 256 fall back as llama.cpp's do (Q4_K -> Q5_0,
//    Q5_K -> Q5_1, Q6_K -> Q8_0). general.file_type: 3, 8, 9, 14 (Q4_K_S,
//    "mostly Q4_K"), 16 (Q5_K_S) and 18.
//  - Q4_K_M: Q4_K; the output tensor (as above) Q6_K; attn_v.weight and
//    ffn_down.weight Q6_K for the i-th of n such tensors (counted in file
//    order, as llama.cpp does) when use_more_bits(i, n): i < n/8, i >= 7n/8 or
//    (i - n/8) % 3 == 2. Rows not a multiple of 256 fall back as llama.cpp's
//    do: Q4_K -> Q5_0, Q6_K -> Q8_0.
//  - a tensor whose row length is not a multiple of the chosen type's block is
//    kept (llama.cpp fails or falls back to F16).
std::vector<GgmlType> PlanQuantization(const GgufFile& file, QuantRecipe recipe);

// Converts the F32/F16/BF16 GGUF `in` as PlanQuantization says, writing `out`
// (GGUF v3) with all metadata kept in order, general.file_type set to
// llama.cpp's value (7 Q8_0, 2 Q4_0, 15 Q4_K_M) and
// general.quantization_version 2. Input tensors that would be quantized but
// already are give FailedPrecondition (llama.cpp refuses to requantize by
// default). `report`, when set, receives one line per tensor and the sizes.
absl::Status QuantizeGgufFile(const std::string& in, const std::string& out, QuantRecipe recipe,
                              GgufQuantizeReport* report = nullptr);
// The single-type recipes by type: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K
// or Q6_K (anything else is InvalidArgument).
absl::Status QuantizeGgufFile(const std::string& in, const std::string& out, GgmlType type,
                              GgufQuantizeReport* report = nullptr);

}  // namespace tandem::engine
