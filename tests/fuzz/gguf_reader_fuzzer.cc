// libFuzzer harness for the GGUF reader: arbitrary bytes parsed as a GGUF
// file (GgufFile::FromBuffer runs the same Parse as Open on a mapping),
// then every typed getter on every key, the tensor lookups, and
// dequantising the first row of each tensor (the reader promised its bytes
// are in range). Finally the tokenizer is built from the metadata, as a
// worker does with a model file.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/format/gguf.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace tandem::engine {
namespace {

// Largest first row dequantised per tensor: keeps each input fast.
constexpr int64_t kMaxRow = 1 << 16;

void ReadFirstRow(const GgufTensorInfo& t) {
  if (t.dims.empty() || t.num_elements == 0) {
    return;
  }
  const int64_t row = t.dims[0];
  fuzz::Require(row > 0 && row % GgmlBlockSize(t.type) == 0, "tensor row fits whole blocks");
  fuzz::Require(GgmlRowBytes(t.type, row) <= t.num_bytes, "first row within tensor bytes");
  if (row > kMaxRow) {
    return;
  }
  std::vector<float> out(row);
  DequantizeRow(t.type, t.data, out.data(), row);
}

void Exercise(const GgufFile& file) {
  for (const auto& [key, value] : file.metadata()) {
    (void)file.GetString(key);
    (void)file.GetInt(key);
    (void)file.GetFloat(key);
    (void)file.GetBool(key);
    (void)file.GetStringArray(key);
    (void)file.GetFloatArray(key);
    (void)file.GetIntArray(key);
  }
  fuzz::Require(file.metadata_keys().size() == file.metadata().size(), "one key per metadata entry");
  for (const GgufTensorInfo& t : file.tensors()) {
    fuzz::Require(file.FindTensor(t.name) == &t, "tensor names index their info");
    ReadFirstRow(t);
  }
  (void)Tokenizer::FromGguf(file);
}

}  // namespace
}  // namespace tandem::engine

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tandem::engine::GgufFile::FromBuffer(absl::MakeConstSpan(data, size));
  if (file.ok()) {
    tandem::engine::Exercise(**file);
  }
  return 0;
}
