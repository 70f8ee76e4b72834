#pragma once
// Minimal NumPy .npy (format 1.0) reading and writing for float32 C-order
// arrays: --logits-out files and golden reference logits.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::engine {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

absl::Status WriteNpy(const std::string& path, absl::Span<const int64_t> shape,
                      absl::Span<const float> data);
// Reads a little-endian float32 ('<f4') C-order array; other dtypes, Fortran
// order or a size that disagrees with the shape are InvalidArgument.
absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

}  // namespace tandem::engine
